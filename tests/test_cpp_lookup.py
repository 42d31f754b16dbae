"""The C++ lookup engine through the installed CMake package: build the C++ example and benchmark with
find_package(wavetune), then run them on synthetic tables (docs/tables.md). CPU tier: no GPU needed."""

from __future__ import annotations

import json
import math
import random
import re
import subprocess
from pathlib import Path

import pytest

import wavetune
from conftest import REPO, cpp_program
from test_mapping import reference as map_reference
from wavetune.codegen import config_space as cs
from wavetune.tuning import model as reference_model
from wavetune.tuning import tablefile
from wavetune.__main__ import cmake_dir
from wavetune.tuning.tablefile import fnv1a64

SM_COUNT = 132


def _gpu_name() -> str:
    """The GPU the example checks tables against where it can see one (a build with kernels on a GPU), else
    an H200's name: the synthetic tables must match the running GPU, or they are refused."""
    if wavetune.build_info()["kernels_compiled"]:
        try:
            return wavetune._C.device_properties()["name"]
        except RuntimeError:  # no GPU visible
            pass
    return "NVIDIA H200"


GPU_NAME = _gpu_name()


def table_text(configs, waves, micro=(), exact=(), meta=None, comments=True, priors=(), memory=None,
               compute=None) -> bytes:
    """A table file. configs: [(variant, decomposition, splits)]; waves: [(config, w, a, b, c, d)];
    micro: [(config, w_min, raster, swizzle)];
    exact: [(dtype, layout, m_first, m_last, n, k, config, raster, swizzle, us)];
    priors: [(config, max_m, margin)]; memory: bytes per us, compute: flop per us (None: no record)."""
    fields = {
        "gpu_name": GPU_NAME,
        "sm_count": str(SM_COUNT),
        "config_space_hash": wavetune.build_info()["config_space_hash"],
        "wavetune_version": wavetune.__version__,
        "cuda_version": "13000",
        "created": "2025-01-01T00:00:00Z",
        "timing": "synthetic: written by tests/test_cpp_lookup.py",
    }
    fields.update(meta or {})
    lines = ["wavetune-table 4"]
    if comments:
        lines.append("# a synthetic table")
    lines += [f"meta {k} {v}" for k, v in fields.items()]
    lines += [f"config {i} {name} {dec} {splits}" for i, (name, dec, splits) in enumerate(configs)]
    lines += ["wave " + " ".join(repr(x) for x in wave) for wave in waves]
    lines += ["micro " + " ".join(str(x) for x in rule) for rule in micro]
    lines += ["exact " + " ".join(repr(x) if isinstance(x, float) else str(x) for x in e) for e in exact]
    lines += ["prior " + " ".join(str(x) for x in p) for p in priors]
    lines += [f"memory {memory!r}"] if memory is not None else []
    lines += [f"compute {compute!r}"] if compute is not None else []
    body = ("\n".join(lines) + "\n").encode()
    return body + f"checksum {fnv1a64(body):016x}\n".encode()


def with_checksum(body: bytes) -> bytes:
    return body + f"checksum {fnv1a64(body):016x}\n".encode()


# --- The model as docs/tables.md states it: the Python reference (model.predict) and mapping ------------


def map_problem(v, m, n, k, decomposition, splits, sm_count=SM_COUNT):
    return map_reference(v, m, n, k, decomposition, splits, sm_count)


def predict(models, coords):
    grid, steps, capacity, waves = coords
    return reference_model.predict(models, grid, steps, waves, capacity)


# --- Building the C++ programs against the installed package --------------------------------------


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cpp")
    projects = [(REPO / "examples" / "cpp", "select_kernel"), (REPO / "benchmarks" / "cpp", "decision_time")]
    return {target: cpp_program(source, target, root) for source, target in projects}


def run(program, *args, timeout=30):
    return subprocess.run([str(program), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def fields(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if ": " in line and not line.startswith("candidate")]
    return dict(line.split(": ", 1) for line in lines)


def uncompiled_variant_names() -> list[str]:
    """The bf16 column-major variants of the gemm config space that this build lacks (a table's configs of them
    are skipped, not refused); none in a build of the full kernel set."""
    compiled = {c.name for c in wavetune.configs()}
    space = cs.load(REPO / "cutlass_configs" / "sm90_gemm.toml")
    return [v.name for v in space.variants if v.dtype == "bf16" and v.b_layout == "col" and v.name not in compiled]


def variant_names(count: int) -> list[str]:
    """Names for tests that need no selection to succeed: compiled bf16 column-major variants where the
    build has them, else variants of its config space it lacks (their configs are skipped)."""
    names = [c.name for c in wavetune.configs() if c.dtype == "bf16" and c.b_layout == "col"]
    return (names + uncompiled_variant_names())[:count]


def bf16_col_variants():
    """The bf16 column-major variants (not the decode kernels)."""
    found = [c for c in wavetune.configs() if c.dtype == "bf16" and c.b_layout == "col" and c.schedule != "decode"]
    if len(found) < 2:
        pytest.skip(f"the build has {len(found)} bf16 column-major variants besides the decode kernels; these "
                    "tests need two (kernel set ci or full)")
    return found


def test_package_layout():
    pkg = Path(wavetune.__file__).parent
    for header in ("lookup.h", "kernels.h", "mapping.h", "types.h", "errors.h"):
        assert (pkg / "include" / "wavetune" / header).is_file(), header
    for lib in ("libwavetune_lookup", "libwavetune_kernels"):
        assert len(list((pkg / "lib").glob(f"{lib}.so.*"))) == 1, lib  # named by the ABI version (test_abi.py)
    for name in ("wavetuneConfig.cmake", "wavetuneConfigVersion.cmake", "wavetuneTargets.cmake"):
        assert (cmake_dir() / name).is_file(), name
    targets = (cmake_dir() / "wavetuneTargets.cmake").read_text()
    assert "wavetune::lookup" in targets and "wavetune::kernels" in targets
    assert "cuda" not in targets.lower(), "consumers must not need CUDA to link wavetune::kernels"


def test_model_choice_cheapest_config(programs, tmp_path):
    v0, v1 = bf16_col_variants()[:2]
    missing = uncompiled_variant_names()[:1]  # a variant of the config space this build lacks: skipped
    table = tmp_path / "table.wtt"
    table.write_bytes(table_text(
        configs=[(v0.name, "data_parallel", 1), (v1.name, "data_parallel", 1), (v0.name, "data_parallel", 1),
                 *((name, "data_parallel", 1) for name in missing)],
        waves=[(0, 1, 50.0, 0.0, 0.0, 0.0), (1, 1, 10.0, 0.0, 0.0, 0.0), (2, 1, 30.0, 0.0, 0.0, 0.0),
               *((3, 1, 1.0, 0.0, 0.0, 0.0) for _ in missing)],
        micro=[(1, 1, "along_m", 2), (1, 1000000, "along_n", 8)]))
    done = run(programs["select_kernel"], table, 256, 4096, 4096)
    assert done.returncode == 0, done.stderr
    out = fields(done.stdout)
    assert out["variant"] == f"{v1.name} (id {v1.id})"
    expected = predict({1: (10.0, 0.0, 0.0, 0.0)}, map_problem(v1, 256, 4096, 4096, "data_parallel", 1))
    assert out["config"] == "1" and out["source"] == "model" and math.isclose(float(out["predicted_us"]), expected)
    assert out["decomposition"] == "data_parallel splits=1"
    assert out["raster"] == "along_m max_swizzle=2"  # the rule with the largest w-min <= w
    assert f"{len(missing)} skipped as not compiled" in out["table"]

    # No compiled config for fp16 with row-major B in this table: refused, with the fallback named.
    done = run(programs["select_kernel"], table, 256, 4096, 4096, "fp16", "row")
    assert done.returncode == 1 and "default_variant" in done.stderr and "fp16 with row-major B" in done.stderr


def test_exact_range_wins_for_its_m(programs, tmp_path):
    v0, v1 = bf16_col_variants()[:2]
    table = tmp_path / "table.wtt"
    table.write_bytes(table_text(
        configs=[(v0.name, "data_parallel", 1), (v1.name, "data_parallel", 1)],
        waves=[(0, 1, 50.0, 0.0, 0.0, 0.0), (1, 1, 10.0, 0.0, 0.0, 0.0)],
        exact=[("bf16", "col", 24, 24, 4096, 4096, 0, "along_n", 4, 7.25),
               ("bf16", "col", 100, 200, 4096, 4096, 0, "along_m", 2, 9.5)]))
    for m, raster, us in ((24, "along_n max_swizzle=4", 7.25), (100, "along_m max_swizzle=2", 9.5),
                          (150, "along_m max_swizzle=2", 9.5), (200, "along_m max_swizzle=2", 9.5)):
        out = fields(run(programs["select_kernel"], table, m, 4096, 4096).stdout)
        assert out["source"] == "exact" and out["config"] == "0" and out["variant"].startswith(v0.name + " ")
        assert float(out["predicted_us"]) == us and out["raster"] == raster
    for m in (23, 25, 99, 201):  # outside the ranges: the model
        out = fields(run(programs["select_kernel"], table, m, 4096, 4096).stdout)
        assert out["source"] == "model" and out["config"] == "1"


def test_prior_stays_unless_the_model_predicts_more_than_its_margin(programs, tmp_path):
    v0, v1 = bf16_col_variants()[:2]
    table = tmp_path / "table.wtt"

    def choice(priors, m):
        table.write_bytes(table_text(configs=[(v0.name, "data_parallel", 1), (v1.name, "data_parallel", 1)],
                                     waves=[(0, 1, 11.0, 0.0, 0.0, 0.0), (1, 1, 10.0, 0.0, 0.0, 0.0)],
                                     micro=[(0, 1, "along_n", 4)], priors=priors))
        done = run(programs["select_kernel"], table, m, 4096, 4096)
        assert done.returncode == 0, done.stderr
        return fields(done.stdout)

    # Config 1 is predicted 10% faster than config 0.
    out = choice([(0, 64, 0.2)], 64)  # within the 20% margin: the prior, with its own micro rule
    assert out["config"] == "0" and out["source"] == "model" and float(out["predicted_us"]) == 11.0
    assert out["raster"] == "along_n max_swizzle=4"
    assert choice([(0, 64, 0.05)], 64)["config"] == "1"  # beyond a 5% margin: the model's pick
    assert choice([(0, 64, 0.2)], 65)["config"] == "1"  # M outside the prior's bucket
    assert choice([(1, 16, 0.2), (0, 0, 0.2)], 65)["config"] == "0"  # 0: every larger M
    assert choice([(1, 16, 0.2), (0, 0, 0.2)], 16)["config"] == "1"  # the first bucket that holds M
    assert choice([], 16)["config"] == "1"  # no priors: the model alone
    # Two priors for one dtype, layout and max-m are refused.
    table.write_bytes(table_text(configs=[(v0.name, "data_parallel", 1), (v1.name, "data_parallel", 1)],
                                 waves=[(0, 1, 11.0, 0.0, 0.0, 0.0), (1, 1, 10.0, 0.0, 0.0, 0.0)],
                                 priors=[(0, 64, 0.2), (1, 64, 0.2)]))
    done = run(programs["select_kernel"], table, 16, 4096, 4096)
    assert done.returncode == 1 and "two priors for bf16 col with max-m 64" in done.stderr


def test_stream_k_is_chosen_only_where_it_is_modeled(programs, tmp_path):
    """A stream-K config predicted fastest is passed over where CUTLASS would run it data-parallel (at most
    kStreamKMinSteps K steps a tile, or whole waves of tiles) or where it would split each output tile among
    more than kStreamKMaxPeers CTAs (mapping.h), and chosen elsewhere; explain and the bound rule say which."""
    v0 = bf16_col_variants()[0]
    sk = next((v for v in bf16_col_variants() if v.scheduler == "stream_k"), None)
    if sk is None:
        pytest.skip("no stream_k bf16 col variant in this build")
    table = tmp_path / "table.wtt"
    table.write_bytes(table_text(configs=[(v0.name, "data_parallel", 1), (sk.name, "stream_k", 1)],
                                 waves=[(0, 1, 50.0, 0.0, 0.0, 0.0), (1, 1, 10.0, 0.0, 0.0, 0.0)]))
    tile_m, tile_n, tile_k = sk.tile
    cases = [  # (kernel tile rows, kernel tile columns, K steps, modeled)
        (64, 64, 16, True),  # 4096 tiles of 16 K steps
        (1, 1, 4096, False),  # one tile shared by every CTA
        (64, 64, 8, False),  # CUTLASS runs 8 K steps a tile data-parallel
        (12, 11, 16, False),  # 132 tiles, a whole wave: data-parallel too
    ]
    for tile_rows, tile_cols, steps, modeled in cases:
        rows, cols, k = tile_rows * tile_m, tile_cols * tile_n, steps * tile_k
        m, n = (cols, rows) if sk.swap_ab else (rows, cols)
        _, L, C, _ = map_problem(sk, m, n, k, "stream_k", 1)
        assert wavetune._C.stream_k_modeled(tile_rows * tile_cols, steps, L, C) == modeled
        done = run(programs["select_kernel"], table, m, n, k, "--explain")
        assert done.returncode == 0, done.stderr
        assert fields(done.stdout)["config"] == ("1" if modeled else "0"), (m, n, k, L)
        rows_out = [line for line in done.stdout.splitlines() if line.startswith("candidate: ")]
        assert [r.endswith(f"choosable={int(c)}") for r, c in zip(rows_out, (True, modeled))] == [True, True]


def test_a_table_of_stream_k_configs_alone_still_chooses(programs, tmp_path):
    """Where no candidate is modeled and no prior applies, the pick is the least predicted of them all."""
    sk = [v for v in bf16_col_variants() if v.scheduler == "stream_k"][:2]
    if len(sk) < 2:
        pytest.skip("needs two stream_k bf16 col variants")
    table = tmp_path / "table.wtt"
    table.write_bytes(table_text(configs=[(v.name, "stream_k", 1) for v in sk],
                                 waves=[(0, 1, 12.0, 0.0, 0.0, 0.0), (1, 1, 6.0, 0.0, 0.0, 0.0)]))
    m, n, k = 4096, 4096, 4 * max(v.tile[2] for v in sk)  # 4 K steps a tile: CUTLASS runs both data-parallel
    done = run(programs["select_kernel"], table, m, n, k, "--explain")
    assert done.returncode == 0, done.stderr
    assert all(line.endswith("choosable=0") for line in done.stdout.splitlines() if line.startswith("candidate: "))
    out = fields(done.stdout)
    assert out["config"] == "1" and float(out["predicted_us"]) == 6.0 and out["source"] == "model"


@pytest.mark.parametrize("record, problem, rate, floor_of", [
    # bytes/us: the floor is 2*(m*k + n*k + m*n) / 2e6 = 16.9 us
    ("memory", (16, 4096, 4096), 2e6, reference_model.memory_floor_us),
    # flop/us: the floor is 2*m*n*k / 6.25e8 = 13.7 us, after calibration; one wave of either tile
    ("compute", (16, 4096, 65536), 6.25e8, reference_model.compute_floor_us),
])
def test_floors_bound_every_prediction(programs, tmp_path, record, problem, rate, floor_of):
    """Where a floor binds both configs' predictions they tie there and the prior (or the lower id) stays."""
    v0, v1 = bf16_col_variants()[:2]
    table = tmp_path / "table.wtt"
    floor = floor_of(*problem, rate)
    assert 13 < floor < 17

    def select(per_us, priors=(), *args):
        table.write_bytes(table_text(configs=[(v0.name, "data_parallel", 1), (v1.name, "data_parallel", 1)],
                                     waves=[(0, 1, 12.0, 0.0, 0.0, 0.0), (1, 1, 6.0, 0.0, 0.0, 0.0)],
                                     priors=priors, **{record: per_us}))
        done = run(programs["select_kernel"], table, *problem, *args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    # Without the record the model picks config 1 (predicted 2x faster) over the prior, config 0.
    assert fields(select(None, [(0, 0, 0.2)]))["config"] == "1"
    # With it both predictions are below the floor: they tie at the floor, and the prior stays.
    out = fields(select(rate, [(0, 0, 0.2)]))
    assert out["config"] == "0" and float(out["predicted_us"]) == pytest.approx(floor, rel=1e-9)  # 10 digits
    assert fields(select(rate))["config"] == "0"  # no prior: the tie goes to the lower config id
    rows = [line for line in select(rate, (), "--explain").splitlines() if line.startswith("candidate: ")]
    assert len(rows) == 2
    assert [float(r.split("predicted_us=")[1].split()[0]) for r in rows] == pytest.approx([floor, floor], rel=1e-6)
    # A floor below both predictions changes nothing.
    assert fields(select(rate * 1000))["config"] == "1"


def test_model_matches_the_documented_formulas(programs, tmp_path):
    """Every candidate's coordinates and prediction (--explain) against a Python transcription of
    docs/tables.md and mapping.h, over problems that hit each wave regime; the choice is the argmin."""
    variants = bf16_col_variants()
    stream_k = [v for v in variants if v.scheduler == "stream_k"]
    # At least one config per wave set (a variant may serve several), so that every regime is met.
    configs = [(variants[i % len(variants)].name, "data_parallel", 1) for i in range(max(len(variants), 5))]
    if stream_k:
        configs += [(stream_k[0].name, "split_k", 3), (stream_k[0].name, "stream_k", 1)]
    rng = random.Random(7)
    wave_sets = [(2, 4), (1, 5, 6), (3,), (1, 2, 5), (1, 4)]
    models = [{w: (rng.uniform(2, 20), rng.uniform(0, 0.05), rng.uniform(0, 0.5), rng.uniform(0, 0.002))
               for w in wave_sets[i % len(wave_sets)]} for i in range(len(configs))]
    table = tmp_path / "table.wtt"
    table.write_bytes(table_text(configs, [(i, w, *m[w]) for i, m in enumerate(models) for w in m]))
    by_name = {v.name: v for v in variants}
    shapes = [(1, 4096, 4096), (128, 6144, 4096), (1000, 4096, 14336), (4096, 28672, 4096), (16384, 8192, 8192),
              (3000, 57344, 8192), (7, 8, 8)] + [(m, 4096, 4096) for m in (1024, 1536, 2048, 2560, 3072)]
    seen_regimes = set()
    for m, n, k in shapes:
        done = run(programs["select_kernel"], table, m, n, k, "--explain")
        assert done.returncode == 0, done.stderr
        rows = [dict(kv.split("=") for kv in line.split(": ", 1)[1].split()) for line in done.stdout.splitlines()
                if line.startswith("candidate: ")]
        assert [int(r["config"]) for r in rows] == list(range(len(configs)))
        expected = []
        for (name, dec, splits), r, model in zip(configs, rows, models):
            coords = map_problem(by_name[name], m, n, k, dec, splits)
            w, profiled = coords[3], sorted(model)
            seen_regimes.add("below" if w < profiled[0] else "at" if w in model else "between" if w < profiled[-1]
                             else "above" if len(profiled) > 1 else "above one")
            assert (int(r["G"]), int(r["L"]), int(r["C"]), int(r["w"])) == coords, (m, n, k, name, dec)
            expected.append(predict(model, coords))
            assert math.isclose(float(r["predicted_us"]), expected[-1], rel_tol=1e-8), (m, n, k, name, dec)
        out = fields(done.stdout)
        chosen = int(out["config"])
        eligible = [i for i, (name, dec, _) in enumerate(configs) if dec != "stream_k" or wavetune._C.stream_k_modeled(
            *reference_model.problem_extents(by_name[name].tile, by_name[name].cluster, by_name[name].swap_ab, m, n, k),
            int(rows[i]["L"]), int(rows[i]["C"]))]
        assert [int(r["choosable"]) for r in rows] == [int(i in eligible) for i in range(len(configs))]
        assert chosen == min(eligible, key=lambda i: (expected[i], i))
        # select's prepared mapping and explain's map_problem give the same prediction, digit for digit.
        assert out["predicted_us"] == rows[chosen]["predicted_us"] and out["source"] == "model"
        if configs[chosen][1] == "split_k":  # launched splits never exceed the K tiles
            assert int(out["decomposition"].split("=")[1]) == min(3, -(-k // by_name[configs[chosen][0]].tile[2]))
    assert seen_regimes == {"below", "at", "between", "above", "above one"}, seen_regimes


def test_pruned_selection_is_the_argmin_of_every_prediction(programs, tmp_path):
    """select skips candidates whose lower bound (the memory floor or their least tile traffic, times their
    least calibration factor, or the compute floor) cannot win, and every candidate where the compute floor
    alone keeps the prior; its choice and prediction must be those of evaluating every
    candidate (--explain) under the prior rule, wherever the floors bind and wherever they do not."""
    variants = bf16_col_variants()
    rng = random.Random(11)
    meta = dict(line.split(" ", 2)[1:] for line in table_text([], []).decode().splitlines() if line.startswith("meta"))
    problems = [(rng.choice([1, 3, 16, 77, 300, 1000, 4096, 15000]), rng.choice([256, 1024, 4096, 28672]),
                 rng.choice([128, 1024, 4096, 14336])) for _ in range(24)]
    table = tmp_path / "table.wtt"
    for margin in (None, 0.0, 0.5):
        tablefile.write_table(
            table, meta=meta,
            configs=[{"variant": v.name, "decomposition": "data_parallel", "splits": 1} for v in variants],
            waves={i: {w: [rng.uniform(2, 20), rng.uniform(0, 0.05), rng.uniform(0, 0.5), rng.uniform(0, 0.002)]
                       for w in (1, 3)} for i in range(len(variants))},
            micro={}, exact=[], priors=[] if margin is None else [{"config_id": 0, "max_m": 0, "margin": margin}],
            memory_bytes_per_us=3e6, traffic_bytes_per_us=2e7, compute_flop_per_us=2e8,
            calibration={i: [rng.uniform(-0.3, 0.3)] + [rng.uniform(-0.05, 0.05) for _ in range(3)]
                         for i in range(len(variants))})
        for m, n, k in problems:
            done = run(programs["select_kernel"], table, m, n, k, "--explain")
            assert done.returncode == 0, done.stderr
            rows = [dict(kv.split("=") for kv in line.split(": ", 1)[1].split()) for line in done.stdout.splitlines()
                    if line.startswith("candidate: ")]
            times = [float(r["predicted_us"]) for r in rows]
            chosen = min(range(len(times)), key=lambda i: (times[i], i))
            if margin is not None and times[0] <= times[chosen] * (1 + margin):
                chosen = 0
            out = fields(done.stdout)
            expected = (chosen, rows[chosen]["predicted_us"])
            assert (int(out["config"]), out["predicted_us"]) == expected, (margin, m, n, k)


def test_corrupt_and_truncated_tables_are_refused(programs, tmp_path):
    v0, v1 = variant_names(2)
    good = table_text(configs=[(v0, "data_parallel", 1), (v1, "data_parallel", 1)],
                      waves=[(0, 1, 50.0, 0.0, 0.0, 0.0), (1, 1, 10.0, 0.0, 0.0, 0.0)])
    table = tmp_path / "table.wtt"
    table.write_bytes(good)
    done = run(programs["select_kernel"], table, 16, 4096, 4096)
    assert done.returncode == 0 or "no compiled config" in done.stderr, done.stderr  # the intact file loads

    at = good.index(b"wave 1 1 10.0") + len("wave 1 1 ")  # one byte of a coefficient: 10.0 -> 90.0
    table.write_bytes(good[:at] + b"9" + good[at + 1:])
    done = run(programs["select_kernel"], table, 16, 4096, 4096)
    assert done.returncode == 1 and "checksum mismatch" in done.stderr and str(table) in done.stderr

    for cut in (len(good) // 2, len(good) - 5, good.rindex(b"checksum")):
        table.write_bytes(good[:cut])
        done = run(programs["select_kernel"], table, 16, 4096, 4096)
        assert done.returncode == 1 and "checksum" in done.stderr, (cut, done.stderr)

    done = run(programs["select_kernel"], tmp_path / "missing.wtt", 16, 4096, 4096)
    assert done.returncode == 1 and "missing.wtt" in done.stderr and "cannot open" in done.stderr


def test_table_of_another_config_space_is_refused(programs, tmp_path):
    (v0,) = variant_names(1)
    table = tmp_path / "table.wtt"
    table.write_bytes(table_text(configs=[(v0, "data_parallel", 1)], waves=[(0, 1, 5.0, 0.0, 0.0, 0.0)],
                                 meta={"config_space_hash": "0123456789abcdef"}))
    done = run(programs["select_kernel"], table, 16, 4096, 4096)
    build_hash = wavetune.build_info()["config_space_hash"]
    assert done.returncode == 1
    assert "0123456789abcdef" in done.stderr and build_hash in done.stderr and "re-tune" in done.stderr


def exact_line(m_first: int, m_last: int) -> bytes:
    return f"exact bf16 col {m_first} {m_last} 4096 4096 0 heuristic 1 5.0\n".encode()


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda b: b.replace(b"wavetune-table 4", b"wavetune-table 2"), r"table.wtt:1: unsupported table version '2'"),
        (lambda b: b.replace(b"wavetune-table 4", b"wavetune-table 3"),
         r"table.wtt:1: unsupported table version '3': this build reads version 4 \(re-tune"),
        (lambda b: b + b"exact bf16 col 8 4096 4096 0 heuristic 1 5.0\n", r"table.wtt:\d+: exact record: expected 11"),
        (lambda b: b + exact_line(9, 8), r"table.wtt:\d+: m-last 8 is below m-first 9"),
        (lambda b: b + exact_line(1, 16) + exact_line(17, 20) + exact_line(16, 16),
         r"table.wtt:\d+: the exact range M 16..16 overlaps M 1..16 on line \d+ \(bf16 col N=4096 K=4096\)"),
        (lambda b: b + b"memory 0.0\n", r"table.wtt:\d+: memory rate 0 bytes/us is not positive"),
        (lambda b: b + b"traffic -1.0\n", r"table.wtt:\d+: traffic rate -1 bytes/us is not positive"),
        (lambda b: b + b"traffic 1e7\ntraffic 2e7\n", r"table.wtt:\d+: a second traffic record"),
        (lambda b: b + b"memory 1e6\nmemory 2e6\n", r"table.wtt:\d+: a second memory record"),
        (lambda b: b + b"compute 0.0\n", r"table.wtt:\d+: compute rate 0 flop/us is not positive"),
        (lambda b: b + b"compute 8e8\ncompute 9e8\n", r"table.wtt:\d+: a second compute record"),
        (lambda b: b + b"memory\n", r"table.wtt:\d+: memory record: expected 2 fields"),
        (lambda b: b + b"prior 0 16\n", r"table.wtt:\d+: prior record: expected 4 fields"),
        (lambda b: b + b"prior 0 16 -0.5\n", r"table.wtt:\d+: margin -0.5 is negative"),
        (lambda b: b + b"prior 0 -1 0.2\n", r"table.wtt:\d+: max-m -1 is out of range"),
        (lambda b: b + b"prior 4 16 0.2\n", r"table.wtt:\d+: config id 4 out of range"),
        (lambda b: b.replace(b"meta sm_count 132\n", b""), r"missing required meta key 'sm_count'"),
        (lambda b: b.replace(b"wave 0 1 5.0", b"wave 0 1 5.0x"),
         r"table.wtt:\d+: coefficient a '5.0x' is not a finite decimal"),
        (lambda b: b.replace(b"wave 0 1 5.0", b"wave 0 1  5.0"), r"table.wtt:\d+: empty field"),
        (lambda b: b.replace(b"wave 0 1 5.0", b"wave 3 1 5.0"), r"table.wtt:\d+: config id 3 out of range"),
        (lambda b: b.replace(b"config 0 ", b"config 1 "), r"table.wtt:\d+: config id 1 out of order"),
        (lambda b: b.replace(b"wave 0 1 5.0 0.0 0.0 0.0", b"wave 0 1 5.0 0.0 0.0"), r"wave record: expected 7 fields"),
        (lambda b: b + b"bogus record\n", r"table.wtt:\d+: unknown record type 'bogus'"),
        (lambda b: b + b"calibration 0 0.1 0.0 0.0\n", r"table.wtt:\d+: calibration record: expected 6 fields"),
        (lambda b: b + b"calibration 2 0.1 0.0 0.0 0.0\n", r"table.wtt:\d+: config id 2 out of range"),
        (lambda b: b + b"calibration 0 0.1 0 0 0\ncalibration 0 0.2 0 0 0\n",
         r"table.wtt:\d+: a second calibration record for config 0"),
        (lambda b: b.replace(b"data_parallel 1", b"data_parallel 4"), r"splits is 1 unless split_k"),
    ],
)
def test_malformed_tables_name_the_file_and_line(programs, tmp_path, edit, message):
    (v0,) = variant_names(1)
    good = table_text(configs=[(v0, "data_parallel", 1)], waves=[(0, 1, 5.0, 0.0, 0.0, 0.0)])
    body = good[:good.rindex(b"checksum")]
    table = tmp_path / "table.wtt"
    table.write_bytes(with_checksum(edit(body)))
    done = run(programs["select_kernel"], table, 16, 4096, 4096)
    assert done.returncode == 1 and re.search(message, done.stderr), done.stderr


@pytest.mark.parametrize("edit, message", [
    (lambda b: b + b"memory 1e-300\n",
     r"memory rate 1e-300 is outside the physical range \[10000, 1e\+10\] bytes/us \(10 GB/s to 10 PB/s\)"),
    (lambda b: b + b"traffic 1e+300\n", r"traffic rate 1e\+300 is outside the physical range \[10000, 1e\+10\]"),
    (lambda b: b + b"compute 1e-300\n",
     r"compute rate 1e-300 is outside the physical range \[100000, 1e\+12\] flop/us \(0.1 TFLOP/s"),
    (lambda b: b.replace(b"data_parallel 1", b"split_k 1000000000"),
     r"config 0: splits 1000000000 is outside the physical range \[1, 1024\]"),
    (lambda b: b + b"calibration 0 1000000.0 0.0 0.0 0.0\n",
     r"config 0: calibration c0 1e\+06 is outside the physical range \[-20, 20\]"),
    (lambda b: b + b"calibration 0 0.0 0.0 -1000000.0 0.0\n",
     r"config 0: calibration c2 -1e\+06 is outside the physical range \[-2, 2\]"),
])
def test_values_outside_physical_range_are_refused(programs, tmp_path, edit, message):
    """Finite values no GPU's tuning measures, in a table with a valid checksum: each refused, naming the record
    or config, the field, the value and the range (a rate of 1e-300 made a 300-digit floor, one of 1e300 none)."""
    (v0,) = variant_names(1)
    good = table_text(configs=[(v0, "data_parallel", 1)], waves=[(0, 1, 5.0, 0.0, 0.0, 0.0)])
    table = tmp_path / "table.wtt"
    table.write_bytes(with_checksum(edit(good[:good.rindex(b"checksum")])))
    done = run(programs["select_kernel"], table, 16, 4096, 4096)
    assert done.returncode == 1 and re.search(f"{re.escape(str(table))}: {message}", done.stderr), done.stderr


@pytest.mark.parametrize("table", sorted((REPO / "tables").glob("*.wtt")), ids=lambda p: p.name)
def test_every_shipped_table_is_within_the_physical_ranges(table):
    family = tablefile.read_table(table)["meta"].get("family", "gemm")
    assert wavetune._C.Selector(str(table), family).config_count() > 0


def test_the_bindings_take_the_problem_key_fields_the_family_names():
    """A table family names its problem key (TableFamily::key_fields); select and explain take those fields by
    keyword, each in its range, and refuse other names."""
    from wavetune.__main__ import explain_selector
    attention, _ = explain_selector(REPO / "tables" / "nvidia-h200.attention.wtt", "attention")
    gemm = wavetune._C.Selector(str(REPO / "tables" / "nvidia-h200.wtt"), "gemm")
    assert attention.key_fields == ["heads_q", "heads_kv", "causal"] and gemm.key_fields == []
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'heads' \(the attention family's problems "
                                        r"have the key fields heads_q, heads_kv, causal\)"):
        attention.explain("bf16", "col", 1, 4096, 128, heads=8)
    with pytest.raises(TypeError, match=r"'heads_q' \(the gemm family's problems have no key fields\)"):
        gemm.select("bf16", "col", 16, 4096, 4096, heads_q=8)
    with pytest.raises(ValueError, match=r"causal=2 is out of range: it must be in \[0, 1\]"):
        attention.select("bf16", "col", 1, 4096, 128, causal=2)
    with pytest.raises(ValueError, match="heads_q=6 must be a positive multiple of heads_kv=4"):
        attention.select("bf16", "col", 1, 4096, 128, heads_q=6, heads_kv=4)

    def predicted(**key):
        return {r["name"]: r["predicted_us"] for r in attention.explain("bf16", "col", 2048, 2048, 128, **key)}
    # The mapping reads the fields: a causal mask walks fewer KV tiles, more heads make more CTAs.
    assert predicted() == predicted(heads_q=1, heads_kv=1, causal=False)  # the fields' defaults
    assert predicted(causal=True) != predicted() != predicted(heads_q=32, heads_kv=8)


def test_a_variant_no_build_has_is_refused_and_one_this_build_lacks_is_skipped(programs, tmp_path):
    """A name outside the config space (not a smaller kernel set's variant) is refused, naming it; a variant of
    the space that is not compiled and cuBLAS (a candidate whether or not libcublas loads here) are not."""
    (v0,) = variant_names(1)
    table = tmp_path / "table.wtt"

    def select(name):
        table.write_bytes(table_text(configs=[(v0, "data_parallel", 1), (name, "data_parallel", 1)],
                                     waves=[(0, 1, 5.0, 0.0, 0.0, 0.0), (1, 1, 9.0, 0.0, 0.0, 0.0)]))
        return run(programs["select_kernel"], table, 16, 4096, 4096)

    done = select("bf16_bcol_no_such_variant")
    space_hash = wavetune.build_info()["config_space_hash"]
    assert done.returncode == 1, done.stdout
    assert (f"{table}: config 1 names variant 'bf16_bcol_no_such_variant', which no build has: it is not in the "
            f"gemm config space {space_hash}") in done.stderr
    for name in ["cublas_bf16_bcol", *uncompiled_variant_names()[:1]]:
        done = select(name)
        assert done.returncode == 0 or "is compiled in this build" in done.stderr, (name, done.stderr)


def test_arbitrary_bytes_never_crash_or_hang(programs, tmp_path):
    """Mutated tables with a valid checksum, so the parser itself sees the damage."""
    variants = bf16_col_variants()
    v1 = variants[0]
    v0 = next((v for v in variants if v.scheduler == "stream_k"), variants[1])
    first = (v0.name, "split_k", 2) if v0.scheduler == "stream_k" else (v0.name, "data_parallel", 1)
    good = table_text(configs=[first, (v1.name, "data_parallel", 1)],
                      waves=[(0, 1, 50.0, 0.0, 0.0, 0.0), (1, 2, 10.0, 0.5, 0.0, 0.0)],
                      micro=[(0, 2, "along_n", 4)], exact=[("bf16", "col", 8, 16, 64, 64, 1, "heuristic", 1, 3.0)])
    body = good[:good.rindex(b"checksum")]
    rng = random.Random(1)
    table = tmp_path / "table.wtt"
    for i in range(60):
        data = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(data))
            if rng.random() < 0.5:
                data[pos] = rng.randrange(256)
            else:
                data[pos:pos + rng.randint(1, 20)] = bytes(rng.randrange(256) for _ in range(rng.randint(0, 6)))
        table.write_bytes(with_checksum(bytes(data)) if i % 3 else bytes(data))
        done = subprocess.run([str(programs["select_kernel"]), str(table), "16", "64", "64"], capture_output=True,
                              timeout=10)
        assert done.returncode in (0, 1), (i, done.returncode, done.stderr)
        if done.returncode == 1:
            assert str(table).encode() in done.stderr or b"no compiled config in table" in done.stderr, done.stderr


def test_decision_time_benchmark(programs, tmp_path):
    variants = bf16_col_variants()
    configs = [(v.name, "data_parallel", 1) for v in variants]
    table = tmp_path / "table.wtt"
    table.write_bytes(table_text(configs, [(i, w, 5.0 + i, 0.01, 0.1, 0.0001) for i in range(len(configs))
                                           for w in (1, 2, 4)]))
    done = run(programs["decision_time"], table, 3, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["candidates"] == len(configs) and result["problems"] > 100
    assert 0 < result["warm_ns"] and 0 < result["cold_ns"] < 1e6

"""Tables end to end without a GPU: written by Python (tablefile), read and evaluated by the C++ engine
(through the bindings), refused when they do not fit, and explained by the CLI."""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest

import wavetune
from wavetune import _C
from wavetune.tuning import model
from wavetune.tuning import tablefile
from wavetune.families.gemm import tuning
from wavetune.runtime import tables
from test_cpp_lookup import uncompiled_variant_names

pytestmark = pytest.mark.skipif(not tuning.candidates(), reason="no compiled bf16 column-major variant")

GPU, SMS = "NVIDIA H200", 132


def make_table(path, exact=((60, 70, 4096, 4096),), hash_=None, priors=None, memory=None, extra_configs=()):
    """A table of every bf16 col candidate with synthetic waves; ``exact``: (m_first, m_last, n, k) ranges, all
    choosing the last candidate with raster along_m, swizzle 2 and 7.5 us."""
    cands = tuning.candidates()
    waves = {i: {1: [2.0 + i, 0.01, 0.05 * (i + 1), 1e-4], 3: [6.0 + i, 0.01, 0.1 * (i + 1), 1e-4]}
             for i in range(len(cands))}
    tablefile.write_table(
        path,
        meta={"gpu_name": GPU, "sm_count": SMS, "config_space_hash": hash_ or wavetune.build_info()["config_space_hash"],
              "wavetune_version": wavetune.__version__, "cuda_version": 13000, "created": "2026-11-21T00:00:00+00:00"},
        configs=[{"variant": c.variant.name, "decomposition": c.decomposition, "splits": c.splits} for c in cands]
        + [{"variant": name, "decomposition": "data_parallel", "splits": 1} for name in extra_configs],
        waves={**waves, **{len(cands) + i: {1: [1.0, 0.0, 0.0, 0.0]} for i in range(len(extra_configs))}},
        micro={0: [(2, "along_n", 4)]},
        occupancy=tuning.occupancy_records(cands),  # as the tuner records it: what Candidate.coordinates reads
        exact=[{"dtype": "bf16", "b_layout": "col", "m_first": m_first, "m_last": m_last, "n": n, "k": k,
                "config_id": len(cands) - 1, "raster": "along_m", "max_swizzle": 2, "us": 7.5}
               for m_first, m_last, n, k in exact],
        priors=priors,
        memory_bytes_per_us=memory,
    )
    return cands, waves



def fastest_choosable(rows: list[dict]) -> dict:
    """explain's row the model picks: the least prediction (then the lower id) among the configs the lookup
    may choose there (stream-K only where it is modeled, docs/model.md section 7)."""
    return min((r for r in rows if r["choosable"]), key=lambda r: (r["predicted_us"], r["config"]))

def test_python_written_table_is_evaluated_by_the_cpp_engine_like_the_reference(tmp_path):
    path = tmp_path / "t.wtt"
    cands, waves = make_table(path)
    selector = tables.open_table(path)
    assert selector.config_count() == len(cands) and selector.exact_count() == 1 and selector.sm_count() == SMS
    assert selector.meta()["gpu_name"] == GPU
    for m, n, k in [(1, 4096, 4096), (16, 14336, 4096), (300, 6144, 4096), (4096, 28672, 8192), (16384, 8192, 29568)]:
        rows = selector.explain("bf16", "col", m, n, k)
        assert [r["name"] for r in rows] == [c.key for c in cands]
        for r in rows:
            expected = model.predict(waves[r["config"]], r["grid"], r["k_iters"], r["waves"], r["capacity"])
            assert r["predicted_us"] == pytest.approx(expected, rel=1e-12)
            assert (r["grid"], r["k_iters"], r["capacity"], r["waves"]) == tuple(
                cands[r["config"]].coordinates(m, n, k, SMS))
        choice = selector.select("bf16", "col", m, n, k)
        best = fastest_choosable(rows)
        assert choice["source"] == "model" and choice["config"] == best["config"]
        assert choice["predicted_us"] == pytest.approx(best["predicted_us"])


def test_exact_range_and_micro_rule(tmp_path):
    path = tmp_path / "t.wtt"
    cands, _ = make_table(path)
    selector = tables.open_table(path)
    for m in (60, 64, 70):
        choice = selector.select("bf16", "col", m, 4096, 4096)
        assert choice["source"] == "exact" and choice["config"] == len(cands) - 1
        assert (choice["raster"], choice["max_swizzle"], choice["predicted_us"]) == ("along_m", 2, 7.5)
        assert choice["name"] == cands[-1].variant.name
    for m, n, k in [(59, 4096, 4096), (71, 4096, 4096), (64, 4096, 8192), (64, 8192, 4096)]:
        assert selector.select("bf16", "col", m, n, k)["source"] == "model"


def test_exact_ranges_with_gaps_hold_exactly_their_m(tmp_path):
    """Many ranges per layer, in several layers, with gaps: the C++ lookup (hash of the layer, then a binary
    search over m_last) finds the range holding M, and the model decides in the gaps."""
    rng = random.Random(3)
    layers = [(4096, 4096), (4096, 14336), (28672, 4096), (1024, 1024)]
    ranges = []
    for n, k in layers:
        m = rng.randint(1, 5)
        while m < 3000:
            last = m + rng.choice((0, 0, 1, 7, 100))
            ranges.append((m, last, n, k))
            m = last + 1 + rng.choice((0, 0, 0, 1, 50))
    path = tmp_path / "t.wtt"
    cands, _ = make_table(path, exact=ranges)
    selector = tables.open_table(path)
    assert selector.exact_count() == len(ranges)
    held = {(m, n, k) for first, last, n, k in ranges for m in range(first, last + 1)}
    for n, k in layers + [(4096, 1024)]:
        for m in range(1, 3200):
            expected = "exact" if (m, n, k) in held else "model"
            assert selector.select("bf16", "col", m, n, k)["source"] == expected, (m, n, k)


def test_model_only_choice_skips_the_exact_table(tmp_path):
    """select(exact=False): the model's choice even where an exact entry exists (benchmarks/compare.py
    reports it as wavetune's model alone)."""
    path = tmp_path / "t.wtt"
    make_table(path)
    selector = tables.open_table(path)
    for m in (64, 1, 4096):  # 64x4096x4096 has an exact entry
        choice = selector.select("bf16", "col", m, 4096, 4096, exact=False)
        best = min(selector.explain("bf16", "col", m, 4096, 4096), key=lambda r: (r["predicted_us"], r["config"]))
        assert choice["source"] == "model" and choice["config"] == best["config"]
        assert choice["predicted_us"] == pytest.approx(best["predicted_us"])
    assert selector.select("bf16", "col", 64, 4096, 4096, exact=True)["source"] == "exact"


def test_refusals(tmp_path):
    path = tmp_path / "t.wtt"
    make_table(path)
    selector = tables.open_table(path)
    selector.check_device(GPU, SMS)
    with pytest.raises(ValueError, match="NVIDIA H100"):
        selector.check_device("NVIDIA H100 80GB HBM3", SMS)
    with pytest.raises(ValueError, match="114"):
        selector.check_device(GPU, 114)

    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    (tmp_path / "corrupt.wtt").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum"):
        tables.open_table(tmp_path / "corrupt.wtt")
    (tmp_path / "cut.wtt").write_bytes(path.read_bytes()[: len(data) // 3])
    with pytest.raises(ValueError, match="checksum|truncated"):
        tables.open_table(tmp_path / "cut.wtt")
    with pytest.raises(ValueError, match="cannot|No such|not found|open"):
        tables.open_table(tmp_path / "missing.wtt")

    make_table(tmp_path / "other.wtt", hash_="0123456789abcdef")
    with pytest.raises(ValueError, match="0123456789abcdef"):
        tables.open_table(tmp_path / "other.wtt")


def test_priors_are_the_fallback_buckets_and_hold_within_their_margin(tmp_path):
    cands = tuning.candidates()
    priors = tuning.prior_records([c for c in cands if not c.variant.from_library], "bf16", "col")
    buckets = [b for b in _C.fallback_buckets() if b[:2] == ("bf16", "col")]
    dp = {c.variant.id: i for i, c in enumerate(cands) if c.decomposition == "data_parallel"}
    assert [(p["max_m"], cands[p["config_id"]].variant.id) for p in priors] == [
        (max_m, variant) for _, _, max_m, variant in buckets if variant in dp]
    assert all(cands[p["config_id"]].decomposition == "data_parallel" for p in priors)
    assert all(p["margin"] == tuning.PRIOR_MARGIN for p in priors)
    assert tuning.prior_records(cands, "fp16", "row") == []  # no fp16 row-major config in the list

    # A prior for every M whose margin splits the shapes: it must stay exactly where its prediction is
    # within the margin of the fastest one's.
    path = tmp_path / "t.wtt"
    make_table(path)
    shapes = [(m, n, 4096) for m in (1, 16, 300, 4096) for n in (4096, 28672)]
    rows = {shape: tables.open_table(path).explain("bf16", "col", *shape) for shape in shapes}
    ratios = {i: [r[i]["predicted_us"] / min(x["predicted_us"] for x in r) for r in rows.values()]
              for i in range(len(cands))}
    prior = max(ratios, key=lambda i: max(ratios[i]) - min(ratios[i]))
    margin = (min(ratios[prior]) + max(ratios[prior])) / 2 - 1
    if not margin > 0:
        pytest.skip("the synthetic predictions do not separate the candidates")
    make_table(path, priors=[{"config_id": prior, "max_m": 0, "margin": margin}])
    selector = tables.open_table(path)
    kept = 0
    for shape in shapes:
        best = fastest_choosable(rows[shape])
        within = rows[shape][prior]["predicted_us"] <= (1 + margin) * best["predicted_us"]
        assert selector.select("bf16", "col", *shape, exact=False)["config"] == (prior if within else best["config"])
        kept += within
    assert 0 < kept < len(shapes)  # both branches were exercised
    held = [s for s in shapes if 1 < ratios[prior][shapes.index(s)] <= 1 + margin]  # kept, not the fastest
    for shape in held[:1]:
        done = run_cli("explain", *map(str, shape), "--table", str(path))
        assert done.returncode == 0 and "the table's prior for this M" in done.stdout, done.stdout


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "wavetune", *args], capture_output=True, text=True, cwd="/")


def test_cli_explain_needs_no_gpu(tmp_path):
    path = tmp_path / "t.wtt"
    make_table(path)
    done = run_cli("explain", "16", "4096", "4096", "--table", str(path), "--top", "3")
    assert done.returncode == 0, done.stderr
    assert "choice:" in done.stdout and "model: lowest predicted latency" in done.stdout
    assert len([line for line in done.stdout.splitlines() if "/data_parallel/" in line or "/split_k/" in line
                or "/stream_k/" in line]) >= 1
    exact = run_cli("explain", "64", "4096", "4096", "--table", str(path))
    assert "exact table" in exact.stdout


def test_memory_floor_from_the_anchors_and_in_explain(tmp_path):
    cands = tuning.candidates()

    class Log:  # the anchors' latencies, as MeasurementLog.get gives them
        def get(self, problem, c):
            return {(16, 4096, 4096): 20.0, (4096, 4096, 4096): 300.0}.get(problem[2:])

    plan = {(16, 4096, 4096): cands[:1], (4096, 4096, 4096): cands[:1], (8, 1024, 1024): cands[:1]}
    # The fastest operand traffic: 16x4096x4096 moves 2*(16*4096 + 4096*4096 + 16*4096) bytes in 20 us.
    bandwidth = tuning.fastest_rate(Log(), plan, "bf16", "col", tuning.operand_traffic)
    assert bandwidth == model.operand_bytes(16, 4096, 4096) / 20.0
    assert tuning.fastest_rate(Log(), {(8, 1024, 1024): cands[:1]}, "bf16", "col", tuning.operand_traffic) is None

    path = tmp_path / "t.wtt"
    missing = uncompiled_variant_names()[:1]  # a config of a variant this build lacks: skipped, noted
    make_table(path, memory=bandwidth, extra_configs=missing)
    floor = model.memory_floor_us(16, 4096, 4096, bandwidth)
    assert floor == pytest.approx(20.0)
    rows = tables.open_table(path).explain("bf16", "col", 16, 4096, 4096)
    assert rows and min(r["predicted_us"] for r in rows) >= floor
    done = run_cli("explain", "16", "4096", "4096", "--table", str(path))
    assert done.returncode == 0, done.stderr
    assert "memory floor: 20.00 us" in done.stdout
    assert (f"note: 1 of the table's {len(cands) + 1} configs" in done.stdout) == bool(missing)


def test_traffic_floor_from_the_anchors_bounds_each_config(tmp_path):
    """Each config's prediction is at least its tile traffic at the table's rate, which is the fastest
    tile traffic among the anchors; a small tile re-reading its operands is priced out."""
    cands = tuning.candidates()

    class Log:
        def get(self, problem, c):
            return {(4096, 4096, 4096): 300.0}.get(problem[2:])

    traffic = tuning.tile_traffic(SMS)
    rate = tuning.fastest_rate(Log(), {(4096, 4096, 4096): cands}, "bf16", "col", traffic)
    assert rate == max(traffic(c, 4096, 4096, 4096) for c in cands) / 300.0
    path = tmp_path / "t.wtt"
    make_table(path)
    tablefile.write_table(path, **{**tablefile.read_table(path), "traffic_bytes_per_us": rate})
    selector = tables.open_table(path)
    assert selector.traffic_bytes_per_us() == rate
    for m, n, k in [(1, 4096, 4096), (15000, 1536, 768), (4096, 4096, 4096)]:
        for r in selector.explain("bf16", "col", m, n, k):
            c = cands[r["config"]]
            floor = model.traffic_floor_us(r["grid"], r["k_iters"], c.variant.tile, rate)
            assert floor > 0 and r["predicted_us"] >= floor * (1 - 1e-12)
    # Read back and written again, the record survives byte for byte.
    assert tablefile.read_table(path)["traffic_bytes_per_us"] == rate


def test_calibration_scales_each_config_as_the_reference_says(tmp_path):
    """A calibration record multiplies its config's floored prediction by exp(c0 + c1 ln M + c2 ln N + c3 ln
    K) in the C++ engine, the others keep theirs, and the choice follows the scaled predictions."""
    if len(tuning.candidates()) < 2:
        pytest.skip("needs two bf16 column-major configs")
    path = tmp_path / "t.wtt"
    make_table(path, exact=())
    shapes = [(m, 4096, 2048) for m in (3, 700, 5000)]
    plain = {(r["config"], s): r["predicted_us"] for s in shapes for r in tables.open_table(path).explain("bf16", "col", *s)}
    calibration = {0: [0.2, 0.1, -0.05, 0.03], 1: [-5.0, 0.0, 0.0, 0.0]}  # config 1 becomes the cheapest
    tablefile.write_table(path, **{**tablefile.read_table(path), "calibration": calibration})
    selector = tables.open_table(path)
    for s in shapes:
        for r in selector.explain("bf16", "col", *s):
            factor = model.calibration_factor(calibration[r["config"]], *s) if r["config"] in calibration else 1.0
            assert r["predicted_us"] == pytest.approx(plain[(r["config"], s)] * factor, rel=1e-12)
        assert selector.select("bf16", "col", *s)["config"] == 1


def test_calibrated_choice_is_the_argmin_of_the_calibrated_predictions(tmp_path):
    """Every config calibrated with factors near 1 (the selector bounds exp to skip hopeless candidates):
    the choice and its predicted time are exactly those of the cheapest calibrated prediction."""
    cands = tuning.candidates()
    if len(cands) < 2:
        pytest.skip("needs two bf16 column-major configs")
    path = tmp_path / "t.wtt"
    make_table(path, exact=())
    rng = random.Random(3)
    calibration = {i: [rng.uniform(-0.4, 0.4), rng.uniform(-0.05, 0.05), rng.uniform(-0.05, 0.05),
                       rng.uniform(-0.05, 0.05)] for i in range(len(cands))}
    tablefile.write_table(path, **{**tablefile.read_table(path), "calibration": calibration})
    selector = tables.open_table(path)
    for _ in range(300):
        s = (rng.randint(1, 20000), 8 * rng.randint(1, 4000), 8 * rng.randint(1, 4000))
        best = fastest_choosable(selector.explain("bf16", "col", *s))
        choice = selector.select("bf16", "col", *s, exact=False)
        assert (choice["config"], choice["predicted_us"]) == (best["config"], best["predicted_us"]), s


def test_the_floors_bound_calibrated_predictions_and_the_choice(tmp_path):
    """A calibration factor below 1 never carries a prediction under the memory or tile traffic floor (issue 75:
    an H100 choice at 3.6 TB/s); the choice, found by a pruned search, is the cheapest floored prediction."""
    cands = tuning.candidates()
    path = tmp_path / "t.wtt"
    make_table(path, exact=())
    bandwidth, rate = 3e6, 2e7  # bytes per us: near an H100's memory and tile traffic rates
    rng = random.Random(5)
    calibration = {i: [rng.uniform(-3.0, 0.5), 0.0, 0.0, 0.0] for i in range(len(cands))}
    tablefile.write_table(path, **{**tablefile.read_table(path), "calibration": calibration,
                                   "memory_bytes_per_us": bandwidth, "traffic_bytes_per_us": rate})
    selector = tables.open_table(path)
    for s in [(16, 14336, 4096), (1, 4096, 4096)] + [(rng.randint(1, 20000), 8 * rng.randint(1, 4000),
                                                       8 * rng.randint(1, 4000)) for _ in range(200)]:
        rows = selector.explain("bf16", "col", *s)
        floor = model.memory_floor_us(*s, bandwidth)
        for r in rows:
            traffic = model.traffic_floor_us(r["grid"], r["k_iters"], cands[r["config"]].variant.tile, rate)
            assert r["predicted_us"] >= max(floor, traffic), (s, r)
        best = fastest_choosable(rows)
        choice = selector.select("bf16", "col", *s, exact=False)
        assert (choice["config"], choice["predicted_us"]) == (best["config"], best["predicted_us"]), s


def test_cli_cmake_dir_and_info():
    done = run_cli("--cmake-dir")
    assert done.returncode == 0
    from pathlib import Path

    assert (Path(done.stdout.strip()) / "wavetuneConfig.cmake").exists()
    info = run_cli("info")
    assert info.returncode == 0, info.stderr
    assert "kernel set" in info.stdout
    if ", sm_" in info.stdout:  # a GPU is visible: the table of each family is reported
        assert "\ngemm table: " in info.stdout and "\ngrouped_gemm table: " in info.stdout


def test_working_set_keeps_the_grid_within_the_loss_bounds(tmp_path):
    """Pruning drops variants while the best kept prediction stays within the bounds everywhere on a
    (small) grid; the built-in default's variants stay."""
    if len(tuning.candidates()) < 2:
        pytest.skip("needs two or more compiled bf16 column-major candidates (a filtered build may have one)")
    path = tmp_path / "t.wtt"
    make_table(path)
    grid = dict(nk=(1024, 8192), ms=(1, 17, 100, 777, 5000))
    keys, times = tuning.grid_predictions(path, "bf16", "col", **grid)
    working = tuning.working_set(path, "bf16", "col", **grid)
    kept = [i for i, key in enumerate(keys) if key in working]
    loss = np.log(times[:, kept].min(axis=1) / times.min(axis=1))
    assert loss.mean() <= tuning.WORKING_SET_GEOMEAN_LOSS + 1e-9 and loss.max() <= tuning.WORKING_SET_WORST_LOSS + 1e-9
    in_table = {key.split("/")[0] for key in keys}
    fallback = {c.name for c in wavetune.configs() if any(c.id == b[3] for b in _C.fallback_buckets())}
    assert fallback & in_table <= {key.split("/")[0] for key in working}

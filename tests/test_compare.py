"""The GEMM benchmarks' parts that need no GPU (wavetune.families.gemm.comparison and .replay, and
benchmarks/compare.py report run as a program): shape files, the bucket heuristic as the harness uses it,
learned-model features, summary statistics, the nvMatmulHeuristics mapping, markdown, and a whole report over
a synthetic log. scikit-learn, matplotlib and nvidia-matmul-heuristics are optional: what needs them skips
without them."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import wavetune
from wavetune.codegen import config_space
from wavetune.tuning import report, tablefile
from wavetune.families.gemm import comparison, replay, tuning
from wavetune.families.gemm.api import KernelConfig
from wavetune.families.gemm.tuning import Candidate

REPO = Path(__file__).resolve().parents[1]

CONFIG_SPACE = REPO / "cutlass_configs" / "sm90_gemm.toml"
needs_bf16_col = pytest.mark.skipif(not tuning.candidates(), reason="no compiled bf16 column-major variant")


def variant(tile, cluster=(1, 1), swap_ab=False, schedule="cooperative", scheduler="persistent", id_=0):
    name = f"bf16_bcol{'_swapab' if swap_ab else ''}_{schedule}_{'x'.join(map(str, tile))}_" \
           f"{'x'.join(map(str, cluster))}_{scheduler}"
    return KernelConfig(id_, name, "bf16", "col", swap_ab, schedule, tile, cluster, scheduler, "sm90a")


# ---- shape files -------------------------------------------------------------------------------------


def test_suite_form_models_and_m_override(tmp_path):
    path = tmp_path / "suite.json"
    path.write_text(json.dumps({"M": [1, 64], "models": {"a": {"qkv": [6144, 4096], "o": [4096, 4096]},
                                                         "b": {"o": [4096, 4096], "down": [4096, 14336]}}}))
    assert comparison.load_shapes(path) == [(1, 4096, 4096), (64, 4096, 4096), (1, 4096, 14336), (64, 4096, 14336),
                                         (1, 6144, 4096), (64, 6144, 4096)]
    assert comparison.load_shapes(path, "b") == [(1, 4096, 4096), (64, 4096, 4096), (1, 4096, 14336), (64, 4096, 14336)]
    assert comparison.load_shapes(path, "a", [8]) == [(8, 4096, 4096), (8, 6144, 4096)]


def test_model_layer_list_forms(tmp_path):
    layers = tmp_path / "llama.json"
    layers.write_text(json.dumps({"qkv": [6144, 4096], "o": [4096, 4096], "gate_up": [28672, 4096]}))
    shapes = comparison.load_shapes(layers)
    assert len(shapes) == 3 * len(comparison.DEFAULT_M) and shapes[0] == (1, 4096, 4096)
    assert comparison.load_shapes(layers, ms=[16]) == [(16, 4096, 4096), (16, 6144, 4096), (16, 28672, 4096)]
    pairs = tmp_path / "pairs.json"
    pairs.write_text(json.dumps([[4096, 4096], [4096, 4096], [1024, 512]]))
    assert comparison.load_shapes(pairs, ms=[2]) == [(2, 1024, 512), (2, 4096, 4096)]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"qkv": [6144]}))
    with pytest.raises(ValueError, match="layer list"):
        comparison.load_shapes(bad)


def test_read_log_and_kernel_seconds(tmp_path):
    path = tmp_path / "log.jsonl"
    rows = [{"problem": ["bf16", "col", 16, 4096, 4096], "config": "v/data_parallel/1", "raster": "heuristic",
             "max_swizzle": 1, "us": 10.0},
            {"problem": ["bf16", "col", 16, 4096, 4096], "config": "w/split_k/2", "raster": "along_m",
             "max_swizzle": 2, "us": None}]
    path.write_text("\n".join(json.dumps(r) for r in [{"gpu_name": "G", "sm_count": 132, "l2_bytes": 50 << 20}, *rows]))
    header, records = comparison.read_log(path)
    assert header["sm_count"] == 132
    assert records == {("bf16", "col", 16, 4096, 4096, "v/data_parallel/1", "heuristic", 1): 10.0,
                       ("bf16", "col", 16, 4096, 4096, "w/split_k/2", "along_m", 2): None}
    # 16x4096x4096: 33.7 MB a copy, 4 copies exceed 2 x 50 MiB; 8 launches are 2 passes; 3 warm-up + 8 x 6 replays.
    assert comparison.rotation(16, 4096, 4096, 50 << 20, tuning.profile_options(16, 4096, 4096)) == (4, 8)
    assert comparison.kernel_seconds(16, 4096, 4096, 10.0, 50 << 20) == pytest.approx(10e-6 * (3 + 8 * 6))
    # Tiny problems stop at 64 copies; huge ones need a single copy.
    assert comparison.rotation(1, 64, 64, 50 << 20, {"min_launches": 8})[0] == 64
    assert comparison.rotation(16384, 57344, 8192, 50 << 20, {"min_launches": 2}) == (1, 2)


@needs_bf16_col
def test_candidate_of_a_key():
    for c in tuning.candidates():
        assert comparison.candidate_of(c.key) == c


def test_oracle_needs_every_candidate_at_default_micro_parameters():
    cands = [Candidate(variant((128, 128, 64), id_=1)), Candidate(variant((64, 128, 64), schedule="pingpong", id_=2))]
    problem = ("bf16", "col", 16, 4096, 4096)
    records = {(*problem, cands[0].key, "heuristic", 1): 10.0}
    assert comparison.oracle(records, problem, cands) is None
    records[(*problem, cands[1].key, "heuristic", 1)] = None  # measured: it cannot run the problem
    assert comparison.oracle(records, problem, cands) == (10.0, cands[0].key)
    records[(*problem, cands[1].key, "heuristic", 1)] = 8.0
    records[(*problem, cands[0].key, "along_m", 2)] = 1.0  # another raster: not a candidate of the oracle
    assert comparison.oracle(records, problem, cands) == (8.0, cands[1].key)


# ---- the simple baselines ----------------------------------------------------------------------------


def test_bucket_heuristic_is_the_fallback_buckets_of_the_config_space():
    space = config_space.load(CONFIG_SPACE)
    compiled = {c.name for c in wavetune.configs()}
    rows = [(max_m, v.name) for dtype, layout, max_m, v in space.fallback
            if (dtype, layout) == ("bf16", "col") and v.name in compiled]
    if not any(c.dtype == "bf16" and c.b_layout == "col" for c in wavetune.configs()):
        pytest.skip("no compiled bf16 column-major variant")
    for m in (1, 16, 17, 64, 65, 256, 300, 2048, 2049, 16384):
        # The first compiled bucket that takes M, else the build's first bf16 col variant other than cuBLAS's.
        col = [c for c in wavetune.configs() if (c.dtype, c.b_layout) == ("bf16", "col")]
        expected = next((name for max_m, name in rows if max_m == 0 or m <= max_m),
                        next((c.name for c in col if c.schedule != "cublas"), col[0].name))
        assert comparison.bucket_choice("bf16", "col", m, 4096, 4096) == f"{expected}/data_parallel/1"


def test_default_choice_names_a_variant_of_the_config_space():
    names = {v.name for v in config_space.load(CONFIG_SPACE).variants}
    for dtype in ("bf16", "fp16"):
        key = comparison.default_choice(dtype, "col")
        assert key.endswith("/data_parallel/1") and key.split("/")[0] in names


# ---- learned models ----------------------------------------------------------------------------------


def test_features_of_a_problem_and_config():
    c = Candidate(variant((128, 256, 64), cluster=(1, 2)), "split_k", 4)
    row = comparison.features(300, 4096, 8192, c, (128, 32, 132, 1))
    assert len(row) == len(comparison.FEATURES)
    f = dict(zip(comparison.FEATURES, row))
    assert (f["M"], f["N"], f["K"]) == (300, 4096, 8192)
    assert f["log2 K"] == 13 and f["log2 M"] == pytest.approx(math.log2(300))
    assert (f["tile M"], f["tile N"], f["tile K"], f["cluster M"], f["cluster N"]) == (128, 256, 64, 1, 2)
    assert (f["swap AB"], f["cooperative"], f["split-K"], f["stream-K"], f["splits"]) == (0, 1, 1, 0, 4)
    assert (f["G"], f["L"], f["C"], f["waves"]) == (128, 32, 132, 1)
    assert f["last wave fill"] == pytest.approx(128 / 132)
    assert f["log2 G*L"] == 12
    assert f["log2 tile bytes loaded"] == pytest.approx(math.log2(128 * 32 * (128 + 256) * 64 * 2))
    operand_bytes = 2 * (300 * 8192 + 4096 * 8192 + 300 * 4096)
    assert f["flops per operand byte"] == pytest.approx(2 * 300 * 4096 * 8192 / operand_bytes)
    assert f["log2 operand bytes"] == pytest.approx(math.log2(operand_bytes))
    swapped = comparison.features(8, 4096, 4096, Candidate(variant((128, 16, 128), swap_ab=True)), (32, 32, 132, 1))
    assert dict(zip(comparison.FEATURES, swapped))["swap AB"] == 1


def test_learned_models_fit_and_rank():
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    import numpy as np

    # Latency grows with G * L: a model that learned it ranks the smaller grid first (400 rows: gradient
    # boosting's leaves take 20 samples at least).
    rows = [[g, l, g * l] for g in range(1, 21) for l in range(1, 21)]
    targets = [math.log(5 + g * l) for g, l, _ in rows]
    for name in comparison.LEARNED_MODELS:
        estimator = comparison.make_learned_model(name)
        estimator.fit(np.array(rows), np.array(targets))
        assert int(np.argmin(estimator.predict(np.array([[16, 8, 128], [1, 1, 1]])))) == 1


# ---- nvMatmulHeuristics ------------------------------------------------------------------------------


def test_nvmmh_gpu_names():
    assert comparison.nvmmh_gpu("NVIDIA H100 80GB HBM3") == "H100_SXM"
    assert comparison.nvmmh_gpu("NVIDIA H100 PCIe") == "H100_PCIE"
    assert comparison.nvmmh_gpu("NVIDIA H100 NVL") == "H100_NVL"
    assert comparison.nvmmh_gpu("NVIDIA H200") == "H200_SXM"
    assert comparison.nvmmh_gpu("NVIDIA A100-SXM4-80GB") is None


def test_nearest_candidate_mapping():
    cands = [
        Candidate(variant((64, 128, 64), schedule="pingpong", id_=1)),
        Candidate(variant((128, 128, 64), schedule="pingpong", id_=2)),
        Candidate(variant((128, 128, 64), id_=3)),
        Candidate(variant((128, 256, 64), cluster=(1, 2), id_=4)),
        *[Candidate(variant((128, 128, 64), scheduler="stream_k", id_=5), "split_k", s) for s in (2, 4, 8)],
        Candidate(variant((128, 128, 64), scheduler="stream_k", id_=5), "stream_k"),
        Candidate(variant((128, 64, 128), swap_ab=True, id_=6)),  # problem-oriented: 64 x 128 x 128
        Candidate(variant((64, 128, 128), schedule="pingpong", id_=7)),
    ]
    key = lambda *a: comparison.nearest_candidate(*a, cands).key  # noqa: E731
    assert comparison.problem_shape(cands[-2]) == (64, 128, 128, 1, 1)
    # Same tile and cluster: that config; equal ones go to the first in order (ping-pong before cooperative).
    assert key((128, 256, 64), (1, 2), 1) == cands[3].key
    assert key((128, 128, 64), (1, 1), 1) == cands[1].key
    # Tile 64x128x128: a swap-AB kernel and a plain one both have it; the plain one is taken.
    assert key((64, 128, 128), (1, 1), 1) == cands[-1].key
    # Nearest in log2: from 64x32x64, the 64x128x64 kernel is 2 steps away (N), every other one 3 or more.
    assert key((64, 32, 64), (1, 1), 1) == cands[0].key
    # Split-K: the split-K config with the nearest split count; stream-K is never a match.
    assert key((128, 128, 64), (1, 1), 4) == cands[5].key
    assert key((128, 128, 64), (1, 1), 16) == cands[6].key
    # A cluster shape we lack: the nearest (1x4 is one step from 1x2, with the same tile).
    assert key((128, 256, 64), (1, 4), 1) == cands[3].key


def test_nvmmh_bounded_top_choice_is_one_of_ours():
    pytest.importorskip("nvMatmulHeuristics", reason="nvidia-matmul-heuristics is not installed")
    cands = [Candidate(variant((128, 128, 64))), Candidate(variant((128, 256, 64), cluster=(1, 2)))]
    heuristics = comparison.NvMatmulHeuristics("H100_SXM", "bf16", "col", restrict_to=cands)
    top = heuristics.top(4096, 4096, 4096)
    assert top is not None and (*top["tile"], *top["cluster"]) in {comparison.problem_shape(c) for c in cands}
    assert top["us"] > 0
    free = comparison.NvMatmulHeuristics("H100_SXM", "bf16", "col").top(1, 4096, 4096)
    assert free is not None and free["split_k"] >= 1


# ---- statistics and tables ---------------------------------------------------------------------------


def test_summarize_per_m_range():
    values = [(1, 1.0), (16, 0.25), (17, 0.5), (4096, 0.8)]
    s = report.summarize(values)
    assert list(s) == ["1-16", "17-256", ">2048", "all"]  # no value in 257-2048: left out
    assert s["1-16"] == {"shapes": 2, "geomean": pytest.approx(0.5), "worst": 0.25}
    assert s["all"]["shapes"] == 4 and s["all"]["worst"] == 0.25
    assert s["all"]["geomean"] == pytest.approx((1.0 * 0.25 * 0.5 * 0.8) ** 0.25)


def test_markdown_table_and_cells():
    table = report.markdown_table(["a", "b"], [["1", "x"], ["2", "y"]])
    assert table == "| a | b |\n| --- | --- |\n| 1 | x |\n| 2 | y |"
    assert report.fmt(None, ".3f") == "-" and report.fmt(0.12345, ".3f") == "0.123"


# ---- a whole report, without a GPU -------------------------------------------------------------------


def compare_report(*args: str) -> None:
    """``python benchmarks/compare.py report ARGS``, as it is run, with this wavetune."""
    env = {**os.environ, "PYTHONPATH": str(Path(wavetune.__file__).parent.parent)}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "compare.py"), "report", *args],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr


@needs_bf16_col
@pytest.mark.skipif(f"bf16_bcol_{comparison.DEFAULT_VARIANT}" not in {c.name for c in wavetune.configs()},
                    reason="the report's single-config method needs the default variant, not in this kernel set")
def test_report_over_a_synthetic_log(tmp_path):
    """measure's files written by hand (latency from a made-up formula), then `compare.py report`: every
    method gets a row, the oracle's ratio is 1, and the JSON carries per-shape picks."""
    cands = tuning.candidates()
    sm_count, l2 = 132, 50 << 20

    def latency(c: Candidate, m, n, k):
        g, l, cap, w = c.coordinates(m, n, k, sm_count)
        return 3.0 + 0.05 * l * w + 0.001 * c.variant.id + (2.0 if c.decomposition == "stream_k" else 0.0)

    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"M": [1, 300, 4096], "models": {"m": {"o": [4096, 4096], "down": [4096, 14336]}}}))
    shapes = comparison.load_shapes(suite)
    plan = tuning.anchor_plan(cands, sm_count)
    records = [((*shape,), c) for shape, cs in plan.items() for c in cs] + [(s, c) for s in shapes for c in cands]
    log = tmp_path / "log.jsonl"
    with log.open("w") as f:
        f.write(json.dumps({"gpu_name": "NVIDIA H100 80GB HBM3", "sm_count": sm_count, "l2_bytes": l2,
                            "config_space_hash": wavetune.build_info()["config_space_hash"],
                            "timing": "synthetic"}) + "\n")
        for (m, n, k), c in records:
            f.write(json.dumps({"problem": ["bf16", "col", m, n, k], "config": c.key, "raster": "heuristic",
                                "max_swizzle": 1, "us": latency(c, m, n, k)}) + "\n")
    with (tmp_path / "log.torch.jsonl").open("w") as f:  # measure's file beside the log
        f.write(json.dumps({"gpu_name": "NVIDIA H100 80GB HBM3", "driver": "0", "cuda_runtime": "13.0",
                            "torch": "x", "timing": "synthetic"}) + "\n")
        for m, n, k in shapes:
            oracle = min(cands, key=lambda c: latency(c, m, n, k))
            for method, config, us in (("torch.matmul", None, 5.0), ("F.linear", None, 5.5),
                                       ("wavetune.gemm", oracle.key, latency(oracle, m, n, k))):
                f.write(json.dumps({"problem": ["bf16", "col", m, n, k], "method": method, "config": config,
                                    "us": us, "error": 0.0}) + "\n")

    def write_table(path: Path, **meta) -> Path:
        tablefile.write_table(
            path, meta={"gpu_name": "NVIDIA H100 80GB HBM3", "sm_count": sm_count,
                        "config_space_hash": wavetune.build_info()["config_space_hash"], "wavetune_version": "0",
                        "cuda_version": 0, "created": "2026-11-22T00:00:00+00:00", **meta},
            configs=[{"variant": c.variant.name, "decomposition": c.decomposition, "splits": c.splits} for c in cands],
            waves={i: {1: [3.0 + 0.001 * c.variant.id, 0.0, 0.05, 0.0]} for i, c in enumerate(cands)},
            micro={}, exact=[{"dtype": "bf16", "b_layout": "col", "m_first": 1, "m_last": 1, "n": 4096, "k": 4096,
                              "config_id": 0, "raster": "heuristic", "max_swizzle": 1, "us": 3.0}])
        return path

    table = write_table(tmp_path / "t.wtt")
    decision = tmp_path / "decision_time.txt"
    decision.write_text('table t: ...\n{"cold_ns": 600.0, "warm_ns": 18.0, "candidates": 57, "problems": 184}\n')

    out = tmp_path / "out"
    compare_report("--log", str(log), "--table", str(table), "--shapes", str(suite), "--out", str(out),
                   "--decision-time", str(decision))
    results = json.loads((out / "compare.json").read_text())
    rows = {m["name"]: m for m in results["methods"]}
    assert results["shapes"] == len(shapes) and results["candidates"] == len(cands)
    for name in ("oracle (exhaustive)", "wavetune (table)", "wavetune (model only)", "M-bucket heuristic",
                 "single config", "cuBLAS (torch.matmul)", "cuBLAS (F.linear)"):
        assert rows[name]["shapes_judged"] == len(shapes), name
    oracle = rows["oracle (exhaustive)"]
    assert oracle["ratio_to_oracle"]["all"]["geomean"] == pytest.approx(1.0)
    assert oracle["tuning_measurements"] == len(shapes) * len(cands)
    assert rows["wavetune (table)"]["decision_ns"] == 600.0
    assert "1 of 6 shapes hit an exact entry" in rows["wavetune (table)"]["what"]
    # The model alone is charged the anchor plan (and no exhaustive shape), cuBLAS nothing.
    assert 0 < rows["wavetune (model only)"]["tuning_measurements"] < rows["wavetune (table)"]["tuning_measurements"]
    assert rows["cuBLAS (torch.matmul)"]["speedup_over_cublas"]["all"]["geomean"] == pytest.approx(1.0)
    assert results["model_accuracy"]["wavetune"]["all"]["n"] == len(shapes) * len(cands)
    assert results["timing"]["profiler_over_torch_for_the_oracle_config"]["median"] == pytest.approx(1.0)
    assert len(results["per_shape"]) == len(shapes)
    text = (out / "compare.md").read_text()
    assert "| oracle (exhaustive) | 6 | 1.000 | 1.000 |" in text and "## Ratio to oracle by M range" in text

    # A table made by `tune --budget` names the waves it profiled: the model is charged their anchors only.
    budget_table = write_table(tmp_path / "budget.wtt", plan_waves="1,32")
    compare_report("--log", str(log), "--table", str(budget_table), "--shapes", str(suite),
                   "--out", str(tmp_path / "budget"))
    rows = {m["name"]: m for m in json.loads((tmp_path / "budget" / "compare.json").read_text())["methods"]}
    budget_anchors = sum(map(len, tuning.anchor_plan(cands, sm_count, (1, 32)).values()))
    assert rows["wavetune (model only)"]["tuning_measurements"] == budget_anchors < sum(map(len, plan.values()))



def test_micro_oracle_extends_the_fastest_multi_wave_candidates():
    cands = [c for c in tuning.candidates() if c.decomposition == "data_parallel"][:8]
    if len(cands) < 8:
        pytest.skip("fewer than 8 compiled bf16 column-major data-parallel variants")
    problem = ("bf16", "col", 8192, 8192, 8192)  # more than one wave for every candidate
    records = {(*problem, c.key, "heuristic", 1): 100.0 + i for i, c in enumerate(cands[:-1])}
    assert comparison.micro_oracle_runs(records, problem, cands, 132) == []  # not every candidate measured
    records[(*problem, cands[-1].key, "heuristic", 1)] = 1000.0  # far behind: no micro runs for it
    runs = comparison.micro_oracle_runs(records, problem, cands, 132)
    swizzled = [o for o in tuning.MICRO_OPTIONS if o != ("heuristic", 1)]
    assert runs == [(c, *o) for c in cands[:comparison.MICRO_ORACLE_TOP] for o in swizzled]

    assert comparison.best_launch(records, problem, cands) == (100.0, cands[0].key, "heuristic", 1)
    records[(*problem, cands[3].key, "along_m", 2)] = 90.0
    records[(*problem, "not_a_candidate", "along_m", 2)] = 1.0
    assert comparison.best_launch(records, problem, cands) == (90.0, cands[3].key, "along_m", 2)


def test_choice_quality_evaluates_a_table_as_documented(tmp_path):
    """The GEMM table's replay (benchmarks/choice_quality.py's): the reference prediction is the wave model times
    the calibration, over the floors; the prior holds within its margin and yields beyond it."""
    names = ["bf16_bcol_pingpong_64x64x64_1x1_persistent", "bf16_bcol_cooperative_128x128x64_1x1_persistent"]
    meta = {"gpu_name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "config_space_hash": "0123456789abcdef",
            "wavetune_version": "0", "cuda_version": 13000, "created": "2026-11-23T00:00:00+00:00"}
    path = tmp_path / "t.wtt"
    tablefile.write_table(path, meta, [{"variant": v, "decomposition": "data_parallel", "splits": 1} for v in names],
                          {0: {1: [10.0, 0.0, 0.0, 0.0]}, 1: {1: [20.0, 0.0, 0.0, 0.0]}}, None, None,
                          priors=[{"config_id": 1, "max_m": 0, "margin": 0.5}], calibration={1: [-0.1, 0.0, 0.0, 0.0]})
    keys, predict, choosable, priors = replay.table_predictor(path, 132)
    assert keys == [f"{v}/data_parallel/1" for v in names]
    assert predict(keys[0], 64, 4096, 4096) == 10.0
    assert predict(keys[1], 64, 4096, 4096) == pytest.approx(20.0 * math.exp(-0.1))
    assert priors == [(math.inf, keys[1], 0.5)]
    assert replay.choose({keys[0]: 10.0, keys[1]: 14.0}, 64, priors) == keys[1]  # within 50%: the prior
    assert replay.choose({keys[0]: 10.0, keys[1]: 16.0}, 64, priors) == keys[0]
    assert choosable(keys[0], 1, 64, 1 << 20)  # data-parallel: no peer limit


def test_choice_quality_maps_cublas_through_its_nominal_tile(tmp_path):
    """A table's cuBLAS config, whether or not libcublas loads here, is mapped through the nominal 128x128x64 tile
    the lookup gives it (builtin_candidates.h, _C.cublas_candidates)."""
    meta = {"gpu_name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "config_space_hash": "0123456789abcdef",
            "wavetune_version": "0", "cuda_version": 13000, "created": "2026-11-23T00:00:00+00:00"}
    path = tmp_path / "t.wtt"
    tablefile.write_table(path, meta, [{"variant": "cublas_bf16_bcol", "decomposition": "data_parallel", "splits": 1}],
                          {0: {1: [0.0, 1.0, 10.0, 0.0]}}, None, None)
    keys, predict, _, _ = replay.table_predictor(path, 132)
    assert predict(keys[0], 128, 256, 128) == 1.0 * 2 + 10.0 * 2  # G = 1 x 2 tiles of 128x128, L = 128 / 64
    assert predict(keys[0], 300, 1024, 1000) == 1.0 * 3 * 8 + 10.0 * 16


def test_choice_quality_chooses_stream_k_only_where_it_is_modeled(tmp_path):
    name = "bf16_bcol_cooperative_128x64x64_1x1_stream_k"
    meta = {"gpu_name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "config_space_hash": "0123456789abcdef",
            "wavetune_version": "0", "cuda_version": 13000, "created": "2026-11-23T00:00:00+00:00"}
    path = tmp_path / "t.wtt"
    tablefile.write_table(path, meta, [{"variant": name, "decomposition": "stream_k", "splits": 1}],
                          {0: {1: [10.0, 0.0, 0.0, 0.0]}}, None, None)
    keys, _, choosable, _ = replay.table_predictor(path, 132)
    assert choosable(keys[0], 128 * 64, 64 * 64, 64 * 16)  # 4096 tiles of 16 K steps: stream-K, 1 CTA a tile
    assert not choosable(keys[0], 128, 64, 64 * 4096)  # one tile of 4096 K steps over 132 CTAs (L = 32)
    assert not choosable(keys[0], 128 * 64, 64 * 64, 64 * 8)  # 8 K steps a tile: CUTLASS runs it data-parallel
    assert not choosable(keys[0], 128 * 12, 64 * 11, 64 * 16)  # 132 tiles, one whole wave: data-parallel too


def test_vs_cublas_finalists_always_hold_the_library():
    lib = Candidate(KernelConfig(1 << 20, "cublas_bf16_bcol", "bf16", "col", False, "cublas", (128, 128, 64),
                                 (1, 1), "persistent", "any"))
    cutlass = [Candidate(variant((64, 16 * (i + 1), 64), schedule="pingpong", id_=i)) for i in range(4)]
    cands = cutlass + [lib]
    screened = {c.key: float(i) for i, c in enumerate(cutlass)} | {lib.key: 9.0}  # fastest first, library last
    assert [c.key for c in comparison.pick_finalists(screened, cands, 2)] == [cutlass[0].key, cutlass[1].key, lib.key]
    first = {lib.key: 0.5} | {c.key: float(i) for i, c in enumerate(cutlass)}  # library fastest: not twice
    assert [c.key for c in comparison.pick_finalists(first, cands, 2)] == [lib.key, cutlass[0].key]
    assert comparison.pick_finalists({}, cands, 3) == []  # no screen (--finalists 0)


def test_launch_context_takes_the_table_micro_rule_only_where_asked():
    from wavetune.tuning import deploy

    table = tablefile.read_table(REPO / "tables" / "nvidia-h100-80gb-hbm3.wtt")
    cands = deploy.table_candidates(table, "bf16", "col")
    ruled = [cid for cid, rules in table["micro"].items() if cid in cands and rules]
    if not ruled:
        pytest.skip("no compiled config of the H100 table has a micro rule")
    key = cands[ruled[0]].key
    m, n, k = 16384, 16384, 4096
    runs = comparison.table_launches(table, [key, key + ":rule"], m, n, k)
    waves = cands[ruled[0]].coordinates(m, n, k, int(table["meta"]["sm_count"]))[3]
    assert runs[key] == cands[ruled[0]].launch()
    assert runs[key + ":rule"] == cands[ruled[0]].launch(*deploy.table_launch(table, ruled[0], waves)[1:])

"""The dense GEMM table judged across SM counts, without a GPU: replay.judge (a table's choice on measured latencies,
over its own configs' best or every measured config's) and benchmarks/sm_counts.py's report, run as a program over
tables and logs written by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import wavetune
from wavetune.families.gemm import replay
from wavetune.tuning import tablefile

REPO = Path(__file__).resolve().parents[1]
SMALL, LARGE = "bf16_bcol_pingpong_64x64x64_1x1_persistent", "bf16_bcol_cooperative_128x128x64_1x1_persistent"
OTHER = "bf16_bcol_swapab_pingpong_64x8x128_1x1_persistent/data_parallel/1"  # measured, in neither table
# Every shape is one wave of either tile on 132 SMs; the last takes 72 of the 64x64 tiles, two waves on 66 SMs.
SHAPES = [(64, 1024, 1024), (128, 2048, 1024), (64, 4608, 1024)]


def key(name: str) -> str:
    return f"{name}/data_parallel/1"


def write_table(path: Path, sm_count: int, small_us: float, large_us: float) -> Path:
    """A table of the two configs, each a constant time per wave (no floors, no calibration, no prior)."""
    meta = {"gpu_name": f"GPU ({sm_count} SMs)", "sm_count": sm_count, "config_space_hash": "0123456789abcdef",
            "wavetune_version": "0", "cuda_version": 13000, "created": "2026-12-07T00:00:00+00:00"}
    path.parent.mkdir(parents=True, exist_ok=True)
    tablefile.write_table(path, meta, [{"variant": v, "decomposition": "data_parallel", "splits": 1}
                                       for v in (SMALL, LARGE)],
                          {0: {1: [small_us, 0.0, 0.0, 0.0]}, 1: {1: [large_us, 0.0, 0.0, 0.0]}}, None, None)
    return path


def records(times: dict[str, float]) -> dict:
    """A tuning log's records (comparison.read_log's form): ``times`` by config key on every shape, plus a row at
    another raster and one that cannot run, which the judge leaves out."""
    out = {("bf16", "col", *s, k, "heuristic", 1): us for s in SHAPES for k, us in times.items()}
    out[("bf16", "col", *SHAPES[0], key(SMALL), "along_m", 2)] = 0.001
    out[("bf16", "col", *SHAPES[0], "cublas_bf16_bcol/data_parallel/1", "heuristic", 1)] = None
    return out


def test_measured_by_shape_keeps_default_launches_that_ran():
    measured = replay.measured_by_shape(records({key(SMALL): 10.0}))
    assert measured == {s: {key(SMALL): 10.0} for s in SHAPES}


def test_judge_scores_the_choice_over_the_tables_or_every_configs_best(tmp_path):
    table = write_table(tmp_path / "t.wtt", 132, 12.0, 20.0)  # chooses the 64x64 tile on 132 SMs
    measured = replay.measured_by_shape(records({key(SMALL): 30.0, key(LARGE): 15.0, OTHER: 10.0}))
    own = replay.judge(measured, table, 132, SHAPES + [(1, 1, 1)])
    assert own.ratios == [(m, 0.5) for m, _, _ in SHAPES] and own.missing == 1 and own.configs == 2
    assert sorted(own.errors) == pytest.approx(sorted([18 / 30, 5 / 15] * 3))
    catalog = replay.judge(measured, table, 132, SHAPES, catalog_oracle=True)
    assert catalog.ratios == [(m, 10.0 / 30.0) for m, _, _ in SHAPES]
    mapped = replay.judge(measured, table, 66, SHAPES)  # the 64x64 tile's 72 CTAs take two waves on 66 SMs
    assert mapped.ratios == [(64, 0.5), (128, 0.5), (64, 1.0)]


def write_count(work: Path, label: str, sm_count: int, table_us: tuple, times: dict, options: dict) -> None:
    """A count's folder as benchmarks/sm_counts.py leaves it: its table, its log and done.json."""
    write_table(work / label / "table" / f"gpu-{label}.wtt", sm_count, *table_us)
    header = {"gpu_name": "GPU" if label == "full" else f"GPU ({sm_count} SMs)", "sm_count": sm_count}
    lines = [json.dumps(header)] + [json.dumps({"problem": list(k[:5]), "config": k[5], "raster": k[6],
                                                "max_swizzle": k[7], "us": us}) for k, us in records(times).items()]
    (work / label / "gemm.jsonl").write_text("\n".join(lines) + "\n")
    (work / label / "done.json").write_text(json.dumps({"options": options, "wall_s": 100.0, "date": "2026-12-07",
                                                        "kernel_set": "test", "variants": [SMALL, LARGE]}))


def test_the_sm_counts_report_over_tables_and_logs_written_by_hand(tmp_path):
    """Full GPU: the 64x64 tile is fastest and chosen. On 66 SMs the 128x128 tile is, and the table tuned there
    chooses it; the full GPU's table keeps the 64x64 tile as it chooses, and mapped at 66 SMs gives it up where
    its 72 CTAs take two waves."""
    work, options = tmp_path / "work", {"tune_count": 2, "heldout_count": 3, "budget": 100}
    work.mkdir()
    (work / "tune-2.json").write_text(json.dumps([]))
    (work / "heldout-3.json").write_text(json.dumps([{"m": m, "n": n, "k": k} for m, n, k in SHAPES]))
    write_count(work, "full", 132, (12.0, 20.0), {key(SMALL): 10.0, key(LARGE): 20.0}, options)
    write_count(work, "66", 66, (20.0, 10.0), {key(SMALL): 30.0, key(LARGE): 15.0, OTHER: 10.0}, options)
    env = {**os.environ, "PYTHONPATH": str(Path(wavetune.__file__).parent.parent)}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "sm_counts.py"), "--out", str(tmp_path / "out"),
                           "--work", str(work), "--sms", "full,66", "--tune-count", "2", "--heldout-count", "3",
                           "--budget", "100", "--score-only"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "out" / "sm_counts.json").read_text())
    assert report["device"] == "GPU" and report["kernel_set"] == "test" and report["options"] == options
    full, small = report["counts"]
    assert (full["sm_count"], small["sm_count"]) == (132, 66) and "cross" not in full
    assert full["own"]["geomean"] == pytest.approx(1.0) and small["own"]["geomean"] == pytest.approx(1.0)
    cross = small["cross"]
    assert cross["tuned_here"]["geomean"] == pytest.approx(10 / 15)  # another config is faster on every shape
    assert cross["full_as_tuned"]["geomean"] == pytest.approx(10 / 30)
    assert cross["full_mapped_here"]["geomean"] == pytest.approx((10 / 30 * 10 / 30 * 10 / 15) ** (1 / 3))
    assert cross["penalty"] == pytest.approx(0.5)
    assert cross["full_mapped_here"]["worst"] == pytest.approx(10 / 30)
    markdown = (tmp_path / "out" / "sm_counts.md").read_text()
    assert "| 66 | 0.667 (0.67) | 0.333 (0.33) | 0.420 (0.33) | 0.500 |" in markdown
    assert "| 132 | 2 | 3 | 1.000 (1.00) |" in markdown


def test_the_sm_counts_report_refuses_counts_measured_with_other_options(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "tune-24.json").write_text("[]")
    (work / "heldout-40.json").write_text(json.dumps([{"m": m, "n": n, "k": k} for m, n, k in SHAPES]))
    write_count(work, "full", 132, (12.0, 20.0), {key(SMALL): 10.0}, {"tune_count": 2, "heldout_count": 3,
                                                                       "budget": 100})
    env = {**os.environ, "PYTHONPATH": str(Path(wavetune.__file__).parent.parent)}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "sm_counts.py"), "--out", str(tmp_path / "out"),
                           "--work", str(work), "--sms", "full", "--score-only"], capture_output=True, text=True,
                          env=env)
    assert done.returncode != 0 and "needs one table measured with {'tune_count': 24" in done.stderr

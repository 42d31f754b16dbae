"""How good are wavetune's choices? The model against exhaustive search on a shape suite.

    python benchmarks/evaluate_model.py --table tables/nvidia-h200.wtt --log measurements.jsonl --out $OUT

For every suite shape (default: shared/benchmarks/llm_shapes.json, every model and M), every candidate
config of the table is measured (the exhaustive oracle, resumable through the measurement log), and so is
the launch wavetune's model picks for it (its config with the raster and swizzle of the micro stage).
The table's exact entries are not consulted: the suite shapes were never profiled for fitting, so this
judges the model on shapes it has not seen. Reports, per M range and overall:
- choice quality: oracle time / chosen time (1.0 = the exhaustive best), geometric mean and worst;
- model accuracy: |predicted - measured| / measured over every (shape, config), median and 90th percentile;
- tuning cost: measurements and GPU seconds of the sparse plan (from the log) against exhaustive search.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import wavetune
from wavetune import _C, api, model, tuning

REPO = Path(__file__).resolve().parents[1]
SUITES = (REPO.parent / "shared" / "benchmarks" / "llm_shapes.json", REPO / "shared" / "benchmarks" / "llm_shapes.json")
M_RANGES = (("1-16", 1, 16), ("17-256", 17, 256), ("257-2048", 257, 2048), (">2048", 2049, math.inf))


def geomean(xs: list[float]) -> float:
    return math.exp(statistics.fmean(map(math.log, xs)))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--table", required=True, type=Path)
    p.add_argument("--log", required=True, type=Path, help="measurement log (the tuning log is reused)")
    p.add_argument("--shapes", type=Path, default=next((s for s in SUITES if s.exists()), SUITES[0]))
    p.add_argument("--models", help="comma-separated models of the suite (default: all)")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--b-layout", default="col")
    p.add_argument("--out", type=Path, default=Path("."))
    args = p.parse_args()

    selector = api.open_table(args.table)
    log = tuning.MeasurementLog(args.log)
    anchor_records = len(log.records)  # before the suite is measured: the tuning plan's cost
    cands = {c.key: c for c in tuning.candidates(args.dtype, args.b_layout)}
    # The table's candidates for this dtype and layout (explain lists them all, for any problem).
    scored = [cands[p["name"]] for p in selector.explain(args.dtype, args.b_layout, 1, 8, 8)]
    shapes = tuning.suite_shapes(args.shapes, args.models)
    print(f"{log.device['name']}: {len(shapes)} suite shapes x {len(scored)} table configs (exhaustive)")

    rows, errors = [], []
    for m, n, k in tuning.progress(shapes, "suite"):
        problem = (args.dtype, args.b_layout, m, n, k)
        choice = selector.select(args.dtype, args.b_layout, m, n, k)
        chosen = cands[f"{choice['name']}/{choice['decomposition']}/{choice['splits']}"]
        log.measure(problem, [(c, "heuristic", 1) for c in scored] + [(chosen, choice["raster"], choice["max_swizzle"])])
        measured = {c.key: log.get(problem, c) for c in scored}
        timed = {key: us for key, us in measured.items() if us is not None}
        oracle_key = min(timed, key=timed.get)
        chosen_us = log.get(problem, chosen, choice["raster"], choice["max_swizzle"])
        for pred in selector.explain(args.dtype, args.b_layout, m, n, k):
            us = measured.get(pred["name"])
            if us is not None:
                errors.append((m, pred["predicted_us"], us))
        rows.append({"M": m, "N": n, "K": k, "oracle": oracle_key, "oracle_us": timed[oracle_key],
                     "chosen": chosen.key, "raster": choice["raster"], "max_swizzle": choice["max_swizzle"],
                     "chosen_us": chosen_us, "predicted_us": choice["predicted_us"],
                     "ratio": timed[oracle_key] / chosen_us})

    summary = []
    for name, lo, hi in (*M_RANGES, ("all", 1, math.inf)):
        group = [r for r in rows if lo <= r["M"] <= hi]
        if group:
            acc = model.accuracy(*zip(*[(pred, us) for mm, pred, us in errors if lo <= mm <= hi]))
            summary.append({"range": name, "shapes": len(group),
                            "geomean_ratio": geomean([r["ratio"] for r in group]),
                            "worst_ratio": min(r["ratio"] for r in group),
                            "median_error": acc["median"], "p90_error": acc["p90"]})
    report = {
        "device": log.device, "table": str(args.table), "table_meta": selector.meta(),
        "wavetune_build": wavetune.build_info(), "command": " ".join(sys.argv), "timing": tuning.TIMING,
        "exhaustive_measurements": len(shapes) * len(scored), "configs": len(scored),
        "tuning_measurements": anchor_records, "this_run_measured": log.measured,
        "this_run_gpu_seconds": log.gpu_seconds, "summary": summary, "shapes": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "evaluate_model.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"{'M range':<10}{'shapes':>7}{'geomean':>9}{'worst':>8}{'med err':>9}{'p90 err':>9}")
    for s in summary:
        print(f"{s['range']:<10}{s['shapes']:>7}{s['geomean_ratio']:>9.3f}{s['worst_ratio']:>8.3f}"
              f"{s['median_error']:>9.1%}{s['p90_error']:>9.1%}")
    worst = sorted(rows, key=lambda r: r["ratio"])[:8]
    print("worst choices:")
    for r in worst:
        print(f"  M={r['M']} N={r['N']} K={r['K']}: chose {r['chosen']} {r['chosen_us']:.1f} us, "
              f"oracle {r['oracle']} {r['oracle_us']:.1f} us ({r['ratio']:.3f})")
    print(f"exhaustive: {len(shapes) * len(scored)} measurements; this run measured {log.measured} in "
          f"{log.gpu_seconds:.1f} GPU-seconds; wrote {args.out / 'evaluate_model.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

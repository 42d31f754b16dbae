"""How repeatable the profiler is: every candidate re-measured on every `--every`-th suite shape into a
second log, compared with the first pass (a tuning log that `compare.py measure` filled). Prints, and
writes next to the second log, the spread of second / first and how the first pass's best config fares in
the second pass: the noise floor of the choice / oracle ratios in docs/benchmarks.md.

    python benchmarks/repeatability.py --log h100.jsonl --repeat h100.repeat.jsonl --every 7   # GPU
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import compare
from wavetune.families.gemm import tuning
from wavetune.families.gemm.comparison import load_shapes, oracle
from wavetune.tuning.report import geomean


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--log", required=True, type=Path, help="the first pass: a log with the suite measured")
    p.add_argument("--repeat", required=True, type=Path, help="the second pass's log (resumable)")
    p.add_argument("--shapes", type=Path, default=next((s for s in compare.SUITES if s.exists()), compare.SUITES[0]))
    p.add_argument("--every", type=int, default=7, help="re-measure every n-th shape of the suite")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    p.add_argument("--b-layout", default="col", choices=("col", "row"))
    args = p.parse_args()

    first = tuning.MeasurementLog(args.log)
    second = tuning.MeasurementLog(args.repeat)
    cands = tuning.candidates(args.dtype, args.b_layout)
    problems = [(args.dtype, args.b_layout, *s) for s in load_shapes(args.shapes)[::args.every]]
    for problem in tuning.progress(problems, "repeat"):
        second.measure(problem, [(c, "heuristic", 1) for c in cands])

    ratios, best_again = [], []
    for problem in problems:
        a, b = oracle(first.records, problem, cands), oracle(second.records, problem, cands)
        if a is None or b is None:
            raise SystemExit(f"{problem[2:]}: not every candidate is measured in {args.log}; run compare.py measure")
        pairs = [(second.get(problem, c), first.get(problem, c)) for c in cands]
        ratios += [t2 / t1 for t2, t1 in pairs if t1 and t2]
        first_best = next(c for c in cands if c.key == a[1])
        best_again.append(b[0] / second.get(problem, first_best))
    deciles = statistics.quantiles(ratios, n=10)
    summary = {
        "device": first.device["name"], "shapes": len(problems), "pairs": len(ratios),
        "second_over_first": {"p10": deciles[0], "median": statistics.median(ratios), "p90": deciles[-1]},
        "first_pass_best_in_second_pass": {"geomean": geomean(best_again), "worst": min(best_again)},
    }
    print(json.dumps(summary, indent=1))
    args.repeat.with_suffix(".summary.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""How well a table chooses, judged on measured latencies: every config of the table timed on every shape.

    # GPU, one interleaved profiler run (weights cold): every compiled config on each shape of both splits
    python benchmarks/shape_suite.py --split tune --count 120 > tune.json
    python -m wavetune tune --log h100.jsonl --exact tune.json --out /tmp/tables      # and the same for heldout
    # anywhere, no GPU and no compiled kernels needed
    python benchmarks/choice_quality.py --log h100.jsonl --table tables/nvidia-h100-80gb-hbm3.wtt --split heldout

Per shape of the split, the table's choice is evaluated as docs/tables.md states it (the Python reference,
wavetune.families.gemm.replay: exact records are not consulted, so the model is what is judged) and scored
as the fastest of the table's configs measured on the shape over the measured time of the choice, both at
default raster and swizzle. Also prints the prediction error over every (shape, config) pair.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import shape_suite
from wavetune.families.gemm.comparison import read_log
from wavetune.families.gemm.replay import judge, measured_by_shape
from wavetune.tuning.report import markdown_table, summarize


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--log", type=Path, required=True, help="tuning log with the split's shapes measured (--exact)")
    p.add_argument("--table", type=Path, required=True)
    p.add_argument("--split", choices=shape_suite.SPLITS, default="heldout")
    p.add_argument("--count", type=int, default=120)
    args = p.parse_args()
    header, records = read_log(args.log)
    shapes = [(s["m"], s["n"], s["k"]) for s in shape_suite.shapes(args.split, args.count)]
    judged = judge(measured_by_shape(records), args.table, header["sm_count"], shapes)
    print(f"{header['gpu_name']}, {args.table}, {args.split} split: {len(judged.ratios)} shapes "
          f"({judged.missing} not in the log), {judged.configs} configs")
    rows = [[name, str(r["shapes"]), f"{r['geomean']:.3f}", f"{r['worst']:.2f}"]
            for name, r in summarize(judged.ratios).items()]
    print(markdown_table(["M", "shapes", "choice / best", "worst"], rows))
    deciles = statistics.quantiles(judged.errors, n=10)
    print(f"prediction error over {len(judged.errors)} (shape, config) pairs: median "
          f"{statistics.median(judged.errors):.1%}, p90 {deciles[-1]:.1%}")


if __name__ == "__main__":
    main()

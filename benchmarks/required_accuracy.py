"""How accurate a latency model has to be before its choices reach a given ratio to the exhaustive best.

The model is replaced by the measurements themselves: every config's fastest measured launch on every
suite shape, multiplied by independent log-normal noise of log-standard-deviation sigma. Choices are then
made as wavetune's tables make them (the fastest prediction, unless the M-bucket prior is predicted within
``margin`` of it, docs/model.md section 7) and judged against the same measurements. The result is the
choice / oracle ratio a model with that error would reach on these shapes, averaged over noise draws
(wavetune.families.gemm.comparison.simulate).
Needs no GPU: the tuning log that `compare.py measure` filled, and a wavetune build with the [fallback]
variants (for the priors).

    python benchmarks/required_accuracy.py --log h100.jsonl --out results/
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

import numpy as np

import compare
from wavetune.families.gemm.comparison import (MARGINS, SIGMAS, bucket_choice, load_shapes, measured_times,
                                               read_log, simulate)
from wavetune.runtime import tables
from wavetune.tuning.report import markdown_table


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--log", required=True, type=Path, help="a tuning log with the suite measured (compare.py measure)")
    p.add_argument("--shapes", type=Path, default=next((s for s in compare.SUITES if s.exists()), compare.SUITES[0]))
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    p.add_argument("--b-layout", default="col", choices=("col", "row"))
    p.add_argument("--draws", type=int, default=20, help="noise draws per (sigma, margin)")
    p.add_argument("--out", type=Path, help="directory for required_accuracy_<gpu>.json")
    args = p.parse_args()

    header, records = read_log(args.log)
    shapes, configs, times = measured_times(records, load_shapes(args.shapes), args.dtype, args.b_layout)
    if not shapes:
        raise SystemExit(f"no shape of {args.shapes} has every config measured in {args.log}: run compare.py measure")
    prior = np.array([configs.index(bucket_choice(args.dtype, args.b_layout, *s)) for s in shapes])
    results = simulate(times, prior, draws=args.draws)

    print(f"{header['gpu_name']}: {len(shapes)} shapes x {len(configs)} configs, {args.draws} noise draws")
    rows = []
    for sigma in SIGMAS:
        of_sigma = [r for r in results if r["sigma"] == sigma]
        rows.append([f"{sigma:.3f}", f"{of_sigma[0]['error_median']:.1%} / {of_sigma[0]['error_p90']:.1%}",
                     *(f"{r['geomean']:.3f} ({r['worst']:.2f})" for r in of_sigma)])
    print(markdown_table(["log-sd of the error", "error median / p90",
                          *(f"margin {m:.2f}: geomean (worst)" for m in MARGINS)], rows))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"required_accuracy_{tables.table_slug(header['gpu_name'])}.json"
        path.write_text(json.dumps({
            "device": header["gpu_name"], "log": args.log.name, "shapes": len(shapes), "configs": len(configs),
            "draws": args.draws, "date": datetime.date.today().isoformat(), "results": results}, indent=1) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()

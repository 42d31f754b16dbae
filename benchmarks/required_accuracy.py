"""How accurate a latency model has to be before its choices reach a given ratio to the exhaustive best.

The model is replaced by the measurements themselves: every config's fastest measured launch on every
suite shape, multiplied by independent log-normal noise of log-standard-deviation sigma. Choices are then
made as wavetune's tables make them (the fastest prediction, unless the M-bucket prior is predicted within
``margin`` of it, docs/model.md section 7) and judged against the same measurements. The result is the
choice / oracle ratio a model with that error would reach on these shapes, averaged over noise draws.
Needs no GPU: the tuning log that `compare.py measure` filled, and a wavetune build with the [fallback]
variants (for the priors).

    python benchmarks/required_accuracy.py --log h100.jsonl --out results/
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
from pathlib import Path

import numpy as np

import compare
import methods
from wavetune.runtime import tables

SIGMAS = (0.0, 0.025, 0.05, 0.075, 0.1, 0.125, 0.15)
MARGINS = (0.0, 0.05, 0.1, 0.2)


def noisy_choices(times: np.ndarray, prior: np.ndarray, sigma: float, margin: float,
                  rng: np.random.Generator) -> np.ndarray:
    """Per shape (row of ``times``, us per config), the config a model with log-normal error ``sigma``
    chooses: the fastest prediction, unless the shape's prior is predicted within ``margin`` of it."""
    predicted = times * np.exp(rng.normal(0.0, sigma, times.shape))
    rows = np.arange(len(times))
    fastest = predicted.argmin(axis=1)
    keep_prior = predicted[rows, prior] <= (1 + margin) * predicted[rows, fastest]
    return np.where(keep_prior, prior, fastest)


def simulate(times: np.ndarray, prior: np.ndarray, sigmas=SIGMAS, margins=MARGINS, draws: int = 20,
             seed: int = 0) -> list[dict]:
    """For each (sigma, margin): the geomean and worst choice / oracle ratio over the shapes, each the mean
    over ``draws`` noise draws, and the relative error |predicted - measured| / measured the noise means
    (median, p90). ``times`` may hold inf where a config cannot run a shape."""
    rng = np.random.default_rng(seed)
    oracle = times.min(axis=1)
    rows = np.arange(len(times))
    z = rng.normal(0.0, 1.0, 100_000)
    results = []
    for sigma in sigmas:
        implied = np.abs(np.expm1(sigma * z))
        for margin in margins:
            geomeans, worsts = [], []
            for _ in range(draws if sigma > 0 else 1):
                ratio = oracle / times[rows, noisy_choices(times, prior, sigma, margin, rng)]
                geomeans.append(float(np.exp(np.log(ratio).mean())))
                worsts.append(float(ratio.min()))
            results.append({"sigma": sigma, "margin": margin, "geomean": float(np.mean(geomeans)),
                            "worst": float(np.mean(worsts)), "error_median": float(np.median(implied)),
                            "error_p90": float(np.percentile(implied, 90))})
    return results


def measured_times(records: dict, shapes: list[tuple], dtype: str, b_layout: str
                   ) -> tuple[list[tuple], list[str], np.ndarray]:
    """(shapes, config keys, us[shape, config]): each config's fastest measured launch (any raster and
    swizzle) on the shapes where every config of the log was measured at default micro parameters;
    inf where a config cannot run the shape."""
    wanted = set(shapes)
    by_shape: dict[tuple, dict[str, float]] = {}
    for (dt, layout, m, n, k, config, raster, swizzle), us in records.items():
        if (dt, layout) != (dtype, b_layout) or (m, n, k) not in wanted:
            continue
        launches = by_shape.setdefault((m, n, k), {})
        if (raster, swizzle) == ("heuristic", 1):
            launches.setdefault(config, math.inf)
        if us is not None:
            launches[config] = min(launches.get(config, math.inf), us)
    configs = sorted({c for launches in by_shape.values() for c in launches})
    judged = [s for s in shapes if s in by_shape and len(by_shape[s]) == len(configs)]
    return judged, configs, np.array([[by_shape[s][c] for c in configs] for s in judged])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--log", required=True, type=Path, help="a tuning log with the suite measured (compare.py measure)")
    p.add_argument("--shapes", type=Path, default=next((s for s in compare.SUITES if s.exists()), compare.SUITES[0]))
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    p.add_argument("--b-layout", default="col", choices=("col", "row"))
    p.add_argument("--draws", type=int, default=20, help="noise draws per (sigma, margin)")
    p.add_argument("--out", type=Path, help="directory for required_accuracy_<gpu>.json")
    args = p.parse_args()

    header, records = methods.read_log(args.log)
    shapes, configs, times = measured_times(records, methods.load_shapes(args.shapes), args.dtype, args.b_layout)
    if not shapes:
        raise SystemExit(f"no shape of {args.shapes} has every config measured in {args.log}: run compare.py measure")
    prior = np.array([configs.index(methods.bucket_choice(args.dtype, args.b_layout, *s)) for s in shapes])
    results = simulate(times, prior, draws=args.draws)

    print(f"{header['gpu_name']}: {len(shapes)} shapes x {len(configs)} configs, {args.draws} noise draws")
    rows = []
    for sigma in SIGMAS:
        of_sigma = [r for r in results if r["sigma"] == sigma]
        rows.append([f"{sigma:.3f}", f"{of_sigma[0]['error_median']:.1%} / {of_sigma[0]['error_p90']:.1%}",
                     *(f"{r['geomean']:.3f} ({r['worst']:.2f})" for r in of_sigma)])
    print(methods.markdown_table(["log-sd of the error", "error median / p90",
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

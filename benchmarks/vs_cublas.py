"""The catalog against cuBLAS: its exhaustive best and wavetune.gemm's own choice, per shape, in one run.

    python benchmarks/vs_cublas.py --suite public --out $OUT            # shared/benchmarks/llm_shapes.json
    python benchmarks/vs_cublas.py --suite heldout --count 150 --out $OUT   # benchmarks/shape_suite.py

bf16, out[M, N] = x[M, K] @ W[N, K]^T (nn.Linear), weights cold. Per shape:
1. Screen: every bf16 col candidate of the tables (tuning.candidates: persistent variants data-parallel,
   stream_k variants stream-K and, without a persistent twin, data-parallel; cuBLAS where it loads)
   through one interleaved call of the C++ profiler, timed as `tune` times anchors (weights cold, warm-up,
   median of replays; recorded per shape: the data for offline model studies).
2. Final, interleaved: torch.matmul (cuBLAS), wavetune.gemm with no config (the table's choice) and
   wavetune.gemm forced to each of the --finalists fastest screened configs and to cuBLAS (the library is
   in the catalog; a screen's ranking a percent off must not drop it). Each is checked first against a
   float32 reference into a NaN-poisoned output, then captured as a CUDA graph of launches that rotate
   through operand copies larger than twice the L2; the graphs are replayed round-robin --reps times and
   each method's median per-launch time is kept. The exhaustive best is the fastest finalist.
   `--compare-table T` adds T's choice (forced with its micro parameters) to the same rounds, and
   `--batch-invariant` wavetune.gemm in batch-invariant mode (docs/torch.md; records invariant_us).
Writes <out>/vs_cublas_<suite>.jsonl (one record per shape, resumable) and prints the summary by M bucket.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import torch

import shape_suite
import wavetune
from wavetune.families.gemm import tuning
from wavetune.families.gemm.comparison import load_shapes, pick_finalists, rotation
from wavetune.runtime import tables
from wavetune.tuning.report import M_RANGES, geomean, invariant_summary
from wavetune.tuning.timing import interleaved_us  # noqa: F401  (the benchmarks' timing, vs_cublas.interleaved_us)

REPO = Path(__file__).resolve().parents[1]
MAX_ERROR = 2e-2


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--suite", choices=("public", *shape_suite.SUITES), default="public")
    p.add_argument("--count", type=int, default=150, help="shapes of a generated split")
    p.add_argument("--m", help="comma-separated M values replacing the public suite's")
    p.add_argument("--finalists", type=int, default=3,
                   help="screened configs timed in the final; 0: no screen, cuBLAS against the choice alone")
    p.add_argument("--compare-table", type=Path,
                   help="another table whose choice is timed in the same run, interleaved (records other_us)")
    p.add_argument("--batch-invariant", action="store_true",
                   help="time wavetune.gemm(batch_invariant=True) in the same rounds (records invariant_us)")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or REPO / "benchmarks" / "results"))
    return p.parse_args()


def suite(args: argparse.Namespace) -> list[tuple[int, int, int]]:
    if args.suite == "public":
        path = next(p for p in shape_suite.PUBLIC_SUITES if p.exists())
        ms = [int(m) for m in args.m.split(",")] if args.m else None
        return load_shapes(path, None, ms)
    return [(s["m"], s["n"], s["k"]) for s in shape_suite.shapes(args.suite, args.count)]


def screen(m: int, n: int, k: int, cands: list[tuning.Candidate]) -> dict[str, float]:
    """Candidate key -> median us of one interleaved profiler call, fastest first (n/a configs excluded)."""
    times = tuning.profile(("bf16", "col", m, n, k), [c.launch() for c in cands], seed=m * 31 + n)
    return {cands[i].key: round(t, 3) for t, i in sorted((t, i) for i, t in enumerate(times) if not math.isnan(t))}


def check(launch, operands, reference) -> float:
    x, w, out = operands[0]
    out.fill_(float("nan"))
    result = launch(x, w, out).float()
    error = (torch.linalg.vector_norm(result - reference) / torch.linalg.vector_norm(reference)).item()
    if not error <= MAX_ERROR:  # NaN too
        raise RuntimeError(f"relative error {error} against the float32 reference")
    return error


def table_launch(selector, m: int, n: int, k: int):
    """gemm forced to a table's choice for the problem (a `--compare-table`), as a launch."""
    c = selector.select("bf16", "col", m, n, k)
    config = wavetune.LaunchConfig(c["name"], c["decomposition"], c["splits"], c["raster"], c["max_swizzle"])
    return lambda x, w, out: wavetune.gemm(x, w.t(), out=out, config=config)


def measure(m: int, n: int, k: int, cands: list[tuning.Candidate], args: argparse.Namespace,
            l2_bytes: int, other=None) -> dict:
    screened = screen(m, n, k, cands) if args.finalists else {}
    finalists = pick_finalists(screened, cands, args.finalists)
    copies, per_graph = rotation(m, n, k, l2_bytes, tuning.profile_options(m, n, k))
    opts = dict(device="cuda", dtype=torch.bfloat16)
    operands = [(torch.empty(m, k, **opts).uniform_(-1, 1), torch.empty(n, k, **opts).uniform_(-1, 1),
                 torch.empty(m, n, **opts)) for _ in range(copies)]
    launches = {"cublas": lambda x, w, out: torch.matmul(x, w.t(), out=out),
                "choice": lambda x, w, out: wavetune.gemm(x, w.t(), out=out)}
    if other is not None:
        launches["other"] = table_launch(other, m, n, k)
    if args.batch_invariant:
        launches["invariant"] = lambda x, w, out: wavetune.gemm(x, w.t(), out=out, batch_invariant=True)
    for c in finalists:
        config = wavetune.LaunchConfig(c.variant.name, c.decomposition, c.splits)
        launches[c.key] = lambda x, w, out, config=config: wavetune.gemm(x, w.t(), out=out, config=config)
    x, w, _ = operands[0]
    reference = x.float() @ w.float().t()
    errors = {name: check(launch, operands, reference) for name, launch in launches.items()}
    times = interleaved_us(launches, operands, max(per_graph, 4), args.reps)
    best = min(finalists, key=lambda c: times[c.key]).key if finalists else None
    return {"m": m, "n": n, "k": k, "cublas_us": times["cublas"], "choice_us": times["choice"],
            "best": best, "best_us": times[best] if best else None, "finalists": {c.key: times[c.key] for c in finalists},
            "screen": screened, "max_error": max(errors.values()),
            **({"other_us": times["other"]} if other is not None else {}),
            **({"invariant_us": times["invariant"]} if args.batch_invariant else {})}


def summary(rows: list[dict]) -> str:
    lines = ["| M | shapes | best / cuBLAS speed | worst | choice / cuBLAS | worst | choice / best |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for label, lo, hi in M_RANGES:
        rs = [r for r in rows if lo <= r["m"] <= hi]
        if not rs:
            continue
        with_best = [r for r in rs if r["best_us"]]  # none without a screen (--finalists 0)
        best = [r["cublas_us"] / r["best_us"] for r in with_best]
        choice = [r["cublas_us"] / r["choice_us"] for r in rs]
        quality = [r["best_us"] / r["choice_us"] for r in with_best]
        best_cells = f"{geomean(best):.3f}x | {min(best):.2f}x" if best else "- | -"
        quality_cell = f"{geomean(quality):.3f}" if quality else "-"
        lines.append(f"| {label} | {len(rs)} | {best_cells} | {geomean(choice):.3f}x | {min(choice):.2f}x | "
                     f"{quality_cell} |")
    others = [r["cublas_us"] / r["other_us"] for r in rows if "other_us" in r]
    if others:
        lines.append(f"\n--compare-table's choice / cuBLAS: {geomean(others):.3f}x, worst {min(others):.2f}x "
                     f"over {len(others)} shapes")
    invariant = [r for r in rows if "invariant_us" in r]
    if invariant:
        lines.append("\n" + invariant_summary([r["invariant_us"] for r in invariant],
                                               [r["choice_us"] for r in invariant], [r["cublas_us"] for r in invariant],
                                               "cuBLAS"))
    return "\n".join(lines)



def main() -> None:
    args = parse_args()
    props = wavetune.device_properties()
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / f"vs_cublas_{args.suite}.jsonl"
    done = {}
    if log.exists():
        done = {(r["m"], r["n"], r["k"]): r for r in map(json.loads, log.read_text().splitlines()[1:])}
    else:
        log.write_text(json.dumps({"gpu": props["name"], "torch": torch.__version__, "suite": args.suite,
                                   "build": wavetune.build_info()}) + "\n")
    cands = tuning.candidates("bf16", "col")
    other = tables.open_table(args.compare_table) if args.compare_table else None
    rows = list(done.values())
    for m, n, k in tuning.progress([s for s in suite(args) if s not in done], f"vs cuBLAS ({args.suite})"):
        row = measure(m, n, k, cands, args, props["l2_bytes"], other)
        rows.append(row)
        with log.open("a") as f:
            f.write(json.dumps(row) + "\n")
    table = summary(rows)
    (args.out / f"vs_cublas_{args.suite}.md").write_text(f"{props['name']}, {len(cands)} candidates\n\n{table}\n")
    print(f"{props['name']}: {len(rows)} shapes, {len(cands)} candidates, suite {args.suite}", file=sys.stderr)
    print(table)


if __name__ == "__main__":
    main()

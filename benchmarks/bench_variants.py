"""Time every compiled bf16 "col" wavetune variant against cuBLAS on LLM projection shapes.

    python benchmarks/bench_variants.py --out $OUT
    python benchmarks/bench_variants.py --m 1,16 --models llama3-8b --variants '*pingpong*'

Each shape is out[M, N] = x[M, K] @ W[N, K]^T in bf16, taken from the shape suite
(shared/benchmarks/llm_shapes.json). Every variant runs with its default micro parameters; stream_k
variants also run with split_k (2 and 4 splits) and stream_k decompositions. The baseline is
torch.matmul(x, W.t()) (cuBLAS).

Correctness first: the output is poisoned with NaN, the config runs once, the device is synchronized,
and ||out - ref|| / ||ref|| is compared to an fp32 reference. An error above 2e-2 or a NaN marks the
config WRONG; a ValueError (the variant cannot run the shape) marks it n/a. Both are excluded.

Timing: --warmup eager launches, then a CUDA graph of at least --iters launches (a whole number of
passes over the copies) is captured and replayed --reps times between CUDA events; the median
per-launch time over replays is reported. The graph keeps host launch cost out of the numbers. Weights are
cold in L2: enough independent copies of x, W and out (2 to 64) to exceed twice the L2 size are
rotated, launch i using copy i % ncopies, so every launch reads its weight from HBM as inference does.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import shlex
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import torch

import wavetune
from compare import torch_time_us

REPO = Path(__file__).resolve().parents[1]
SHAPES_CANDIDATES = (REPO / ".." / "shared" / "benchmarks" / "llm_shapes.json",
                     REPO / "shared" / "benchmarks" / "llm_shapes.json")
DEFAULT_VARIANT = "bf16_bcol_cooperative_128x128x64_1x1_persistent"
QUICK_MODELS, QUICK_M = ("llama3-8b", "llama3-70b"), (1, 16, 128, 1024, 8192)
M_RANGES = (("1-16", 1, 16), ("17-256", 17, 256), ("257-2048", 257, 2048), (">2048", 2049, math.inf))
MAX_ERROR = 2e-2
METHOD = ("CUDA graph of >= {iters} launches replayed {reps} times between CUDA events after {warmup} warm-up "
          "launches; median per-launch time; cold weights: copies of x/W/out rotated so they exceed 2x L2")

Launch = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], object]

try:
    from tqdm import tqdm
except ImportError:
    tqdm = None
try:
    from rich.console import Console
    from rich.table import Table
except ImportError:
    Console = None


def log(line: str) -> None:
    (tqdm.write if tqdm else print)(line)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", type=Path, help="shape suite JSON (default: shared/benchmarks/llm_shapes.json)")
    p.add_argument("--preset", choices=("quick", "full"), default="quick",
                   help="quick: llama3-8b/70b x M in 1,16,128,1024,8192; full: every model and M of the suite")
    p.add_argument("--m", help="comma-separated M values (overrides the preset)")
    p.add_argument("--models", help="comma-separated model names (overrides the preset)")
    p.add_argument("--variants", default="*", help="comma-separated fnmatch patterns over variant names")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or REPO / "benchmarks" / "results"))
    return p.parse_args()


def load_shapes(args: argparse.Namespace) -> list[tuple[int, int, int]]:
    """(M, N, K) triples: unique (N, K) of the chosen models crossed with the chosen M values."""
    path = args.shapes or next((p for p in SHAPES_CANDIDATES if p.exists()), SHAPES_CANDIDATES[0])
    suite = json.loads(path.read_text())
    full = args.preset == "full"
    models = args.models.split(",") if args.models else list(suite["models"]) if full else QUICK_MODELS
    ms = [int(m) for m in args.m.split(",")] if args.m else suite["M"] if full else QUICK_M
    nks = sorted({tuple(nk) for model in models for nk in suite["models"][model].values()})
    return [(m, n, k) for m in ms for n, k in nks]


def launch_configs(patterns: str) -> dict[str, wavetune.LaunchConfig]:
    """Label -> launch config for every bf16 col variant matching the patterns, with its micro variants."""
    globs = [p.strip() for p in patterns.split(",") if p.strip()]
    chosen = {}
    for c in wavetune.configs():
        if c.dtype != "bf16" or c.b_layout != "col" or not any(fnmatch.fnmatchcase(c.name, g) for g in globs):
            continue
        chosen[c.name] = wavetune.LaunchConfig(c.name)
        if c.scheduler == "stream_k":
            for splits in (2, 4):
                chosen[f"{c.name}+split_k{splits}"] = wavetune.LaunchConfig(c.name, "split_k", splits)
            chosen[f"{c.name}+stream_k"] = wavetune.LaunchConfig(c.name, "stream_k")
    if not chosen:
        sys.exit(f"no compiled bf16 col variant matches {patterns!r}")
    return chosen


def make_copies(m: int, n: int, k: int, l2_bytes: int) -> list[tuple[torch.Tensor, ...]]:
    """Independent (x, W^T, out) copies that together exceed twice the L2 size."""
    bytes_per_copy = 2 * (m * k + n * k + m * n)
    ncopies = min(max(math.ceil(2 * l2_bytes / bytes_per_copy), 2), 64)
    opts = dict(device="cuda", dtype=torch.bfloat16)
    return [(torch.randn(m, k, **opts), torch.randn(n, k, **opts).t(), torch.empty(m, n, **opts))
            for _ in range(ncopies)]


def rel_error(launch: Launch, copy: tuple[torch.Tensor, ...], ref: torch.Tensor) -> float:
    """Relative error of one launch into a NaN-poisoned output (NaN if any output is NaN)."""
    x, wt, out = copy
    out.fill_(float("nan"))
    launch(x, wt, out)
    torch.cuda.synchronize()
    result = out.float()
    if torch.isnan(result).any():
        return math.nan
    return (torch.linalg.vector_norm(result - ref) / torch.linalg.vector_norm(ref)).item()


def time_us(launch: Launch, copies: list[tuple[torch.Tensor, ...]], args: argparse.Namespace) -> float:
    """Median per-launch time (us) over CUDA-graph replays of launches that rotate through every copy.

    A graph removes the host's launch cost, which at decode sizes is as long as the kernel itself.
    """
    return torch_time_us(torch, launch, copies, {"warmup": args.warmup, "replays": args.reps, "min_launches": args.iters})


def bench_shape(m: int, n: int, k: int, configs: dict[str, wavetune.LaunchConfig],
                args: argparse.Namespace, l2_bytes: int) -> dict:
    """cuBLAS and every config on one shape: {"M", "N", "K", "ncopies", "cublas_us", "configs"}."""
    copies = make_copies(m, n, k, l2_bytes)
    ref = copies[0][0].float() @ copies[0][1].float()
    results = {}
    for label, config in configs.items():
        def launch(x, wt, out, config=config):
            return wavetune.gemm(x, wt, out=out, config=config)
        try:
            err = rel_error(launch, copies[0], ref)
        except ValueError:
            results[label] = {"us": "n/a", "error": None}
            continue
        if not err <= MAX_ERROR:  # also catches NaN
            results[label] = {"us": "WRONG", "error": err}
            continue
        results[label] = {"us": time_us(launch, copies, args), "error": err}
    cublas_us = time_us(lambda x, wt, out: torch.matmul(x, wt, out=out), copies, args)
    return {"M": m, "N": n, "K": k, "ncopies": len(copies), "cublas_us": cublas_us, "configs": results}


def best(row: dict) -> tuple[str, float] | None:
    timed = [(label, r["us"]) for label, r in row["configs"].items() if isinstance(r["us"], float)]
    return min(timed, key=lambda t: t[1]) if timed else None


def default_us(row: dict) -> float | None:
    us = row["configs"].get(DEFAULT_VARIANT, {}).get("us")
    return us if isinstance(us, float) else None


def shape_line(row: dict) -> str:
    m, n, k, cublas = row["M"], row["N"], row["K"], row["cublas_us"]
    head = f"M={m:<5d} N={n:<6d} K={k:<6d} cuBLAS {cublas:8.1f} us"
    if (b := best(row)) is None:
        return f"{head}  best: none (every config n/a or WRONG)"
    label, us = b
    tflops, gbs = 2 * m * n * k / us / 1e6, 2 * n * k / us / 1e3
    return f"{head}  best {label} {us:8.1f} us  x{cublas / us:.2f}  {tflops:6.1f} TFLOP/s  {gbs:6.0f} GB/s"


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def shape_rows(rows: list[dict], with_default: bool) -> tuple[list[str], list[list[str]]]:
    header = ["M", "N", "K", "cuBLAS us", "best variant", "best us", "cuBLAS/best"]
    header += ["default us", "cuBLAS/default"] if with_default else []
    table = []
    for r in rows:
        label, us = best(r) or ("-", None)
        cells = [str(r["M"]), str(r["N"]), str(r["K"]), f"{r['cublas_us']:.1f}", label, fmt(us, ".1f"),
                 fmt(us and r["cublas_us"] / us, ".2f")]
        if with_default:
            d = default_us(r)
            cells += [fmt(d, ".1f"), fmt(d and r["cublas_us"] / d, ".2f")]
        table.append(cells)
    return header, table


def geomean(values: list[float]) -> float | None:
    return math.exp(statistics.fmean(map(math.log, values))) if values else None


def summary_rows(rows: list[dict], with_default: bool) -> tuple[list[str], list[list[str]]]:
    """Geometric means of cuBLAS/best (oracle over variants) and cuBLAS/default, per M range and overall."""
    header = ["M range", "shapes", "cuBLAS/oracle (geomean)"] + (["cuBLAS/default (geomean)"] if with_default else [])
    table = []
    for name, lo, hi in (*M_RANGES, ("all", 1, math.inf)):
        group = [r for r in rows if lo <= r["M"] <= hi]
        if not group:
            continue
        oracle = geomean([r["cublas_us"] / b[1] for r in group if (b := best(r))])
        cells = [name, str(len(group)), fmt(oracle, ".3f")]
        if with_default:
            cells.append(fmt(geomean([r["cublas_us"] / d for r in group if (d := default_us(r))]), ".3f"))
        table.append(cells)
    return header, table


def markdown(header: list[str], table: list[list[str]]) -> str:
    lines = [header, ["---"] * len(header), *table]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def show(title: str, header: list[str], table: list[list[str]]) -> None:
    if Console is None:
        print(f"\n{title}\n{markdown(header, table)}")
        return
    t = Table(*header, title=title)
    for cells in table:
        t.add_row(*cells)
    Console().print(t)


def main() -> None:
    args = parse_args()
    props = torch.cuda.get_device_properties(0)
    shapes, configs = load_shapes(args), launch_configs(args.variants)
    with_default = DEFAULT_VARIANT in configs
    print(f"{props.name}: {len(shapes)} shapes x {len(configs)} configs")
    rows = []
    for m, n, k in tqdm(shapes, desc="shapes") if tqdm else shapes:
        rows.append(bench_shape(m, n, k, configs, args, props.L2_cache_size))
        log(shape_line(rows[-1]))
        torch.cuda.empty_cache()

    command, date = shlex.join(sys.orig_argv), datetime.now(timezone.utc).isoformat(timespec="seconds")
    copies = sorted({r["ncopies"] for r in rows})
    copies_text = str(copies[0]) if len(copies) == 1 else f"{copies[0]}-{copies[-1]}"
    shape_table, summary_table = shape_rows(rows, with_default), summary_rows(rows, with_default)
    show("wavetune variants vs cuBLAS", *shape_table)
    show("cuBLAS time / wavetune time, geometric mean", *summary_table)

    args.out.mkdir(parents=True, exist_ok=True)
    report = {
        "device": props.name, "sm_count": props.multi_processor_count, "l2_bytes": props.L2_cache_size,
        "torch_version": torch.__version__, "wavetune_build": wavetune.build_info(), "date": date,
        "command": command, "method": METHOD.format(warmup=args.warmup, reps=args.reps, iters=args.iters),
        "shapes": rows,
    }
    (args.out / "bench_variants.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "bench_variants.md").write_text(
        f"# wavetune variants vs cuBLAS\n\n{props.name}, {date}, cold weights: {copies_text} copies rotated "
        f"> 2x L2, command: `{command}`\n\n{markdown(*shape_table)}\n\n"
        f"## cuBLAS time / wavetune time (geometric mean; > 1: wavetune faster)\n\n{markdown(*summary_table)}\n"
    )
    print(f"wrote {args.out / 'bench_variants.json'} and {args.out / 'bench_variants.md'}")


if __name__ == "__main__":
    main()

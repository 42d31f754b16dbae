"""Decode GEMMs (M = 1-64) against cuBLAS, in one interleaved run:

    python benchmarks/decode_gemm.py --out $OUT                 # the held-out split
    python benchmarks/decode_gemm.py --split design --out $OUT  # the shapes design decisions may look at

Shapes are every projection of a decoder layer (qkv, o, gate_up, down) and the LM head of the split's
models at tensor-parallel degrees 1, 2, 4 and 8, each at --per-shape token counts drawn (seeded) from
1-16 and from 17-64, odd ones included. The held-out models are ones no design decision of wavetune
looked at; the design split is the public shape suite's models.

Per problem, one CUDA graph each of: torch.matmul (cuBLAS, what torch calls), wavetune (wavetune.gemm, the
table's choice) and every decode candidate of the table (each variant unsplit and at each split count),
replayed round-robin (--reps rounds, medians); weights cold (copies rotated past twice the L2 size).
Every candidate's output is checked against an fp32 reference first. Writes <out>/decode_gemm_<split>.jsonl
(one row per problem) and prints geomeans per M range, the worst case, and achieved TB/s of the weights.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
from pathlib import Path

import torch

import wavetune
from wavetune.families.gemm import tuning
from wavetune.families.gemm.cases import DECODE_MODELS, decode_problems
from wavetune.families.gemm.comparison import decode_summary
from wavetune.tuning.timing import interleaved_us

REPO = Path(__file__).resolve().parents[1]
NAMES: dict[int, str] = {}  # variant id -> name


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--split", choices=tuple(DECODE_MODELS), default="heldout")
    p.add_argument("--per-shape", type=int, default=1, help="token counts per shape and M range")
    p.add_argument("--limit", type=int, help="a seeded random sample of this many problems (a quick look)")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or REPO / "benchmarks" / "results"))
    return p.parse_args()


def decode_candidates() -> list[tuning.Candidate]:
    return [c for c in tuning.candidates("bf16", "col") if c.variant.schedule == "decode"]


def operands(m: int, n: int, k: int, l2_bytes: int) -> list[tuple]:
    """(x, W, out) copies, together past twice the L2 size: each launch reads its weights from DRAM."""
    copies = min(max(math.ceil(2 * l2_bytes / (2 * n * k)), 2), 32)
    opts = dict(device="cuda", dtype=torch.bfloat16)
    return [(torch.rand(m, k, **opts) * 2 - 1, torch.rand(n, k, **opts) * 2 - 1, torch.empty(m, n, **opts))
            for _ in range(copies)]


def launches(cands: list[tuning.Candidate]) -> dict:
    def cublas(x, w, out):
        torch.matmul(x, w.t(), out=out)

    def chosen(x, w, out):
        wavetune.gemm(x, w.t(), out=out)

    def config(c):
        return wavetune.LaunchConfig(c.variant.name, c.decomposition, c.splits)

    found = {"cublas": cublas, "wavetune": chosen}
    for c in cands:
        found[c.key] = lambda x, w, out, cfg=config(c): wavetune.gemm(x, w.t(), out=out, config=cfg)
    return found


def runnable(launch, ops: tuple) -> bool:
    """Whether ``launch`` runs the problem and matches the fp32 reference (poisoned output first)."""
    x, w, out = ops
    out.fill_(float("nan"))
    try:
        launch(x, w, out)
    except ValueError:
        return False
    torch.cuda.synchronize()
    ref = x.float() @ w.float().t()
    error = ((out.float() - ref).norm() / ref.norm()).item()
    if not error < 1e-2:
        raise AssertionError(f"error {error} (NaN: output not written)")
    return True


def measure(problem: dict, cands: list, reps: int, l2_bytes: int) -> dict:
    ops = operands(problem["m"], problem["n"], problem["k"], l2_bytes)
    methods = {name: fn for name, fn in launches(cands).items() if runnable(fn, ops[0])}
    us = interleaved_us(methods, ops, per_graph=max(len(ops), 8), reps=reps)
    weight_bytes = 2 * problem["n"] * problem["k"]
    decode = {name: t for name, t in us.items() if name not in ("cublas", "wavetune")}
    best = min(decode, key=decode.get)
    m, n, k = problem["m"], problem["n"], problem["k"]
    codes = (wavetune._C.DTYPES.index("bf16"), wavetune._C.B_LAYOUTS.index("col"), torch.cuda.current_device())
    chosen = NAMES[wavetune._C.PreparedGemm(m, n, k, k, k, n, *codes).variant]
    return {**problem, "us": us, "chosen": chosen, "best_decode": best, "weight_mb": weight_bytes / 1e6,
            "speedup": us["cublas"] / us["wavetune"], "best_speedup": us["cublas"] / us[best],
            "wavetune_tbps": weight_bytes / us["wavetune"] / 1e6, "cublas_tbps": weight_bytes / us["cublas"] / 1e6,
            "best_tbps": weight_bytes / us[best] / 1e6}


def main() -> None:
    args = parse_args()
    NAMES.update({c.id: c.name for c in wavetune.configs()})
    torch.manual_seed(args.seed)
    props = torch.cuda.get_device_properties(0)
    cands = decode_candidates()
    if not cands:
        raise SystemExit("this build has no decode variant")
    todo = decode_problems(args.split, args.per_shape, args.seed)
    if args.limit:
        todo = sorted(random.Random(args.seed).sample(todo, min(args.limit, len(todo))), key=todo.index)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"decode_gemm_{args.split}.jsonl"
    rows = []
    with path.open("w") as f:
        f.write(json.dumps({"device": props.name, "torch": torch.__version__, "wavetune": wavetune.__version__,
                            "pdl": wavetune._C.programmatic_launch(), "split": args.split, "reps": args.reps}) + "\n")
        for i, problem in enumerate(todo):
            row = measure(problem, cands, args.reps, props.L2_cache_size)
            rows.append(row)
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(f"[{i + 1}/{len(todo)}] {row['model']} tp{row['tp']} {row['layer']} M={row['m']} N={row['n']} "
                  f"K={row['k']}: cuBLAS {row['us']['cublas']:.1f} us ({row['cublas_tbps']:.2f} TB/s), wavetune "
                  f"{row['us']['wavetune']:.1f} ({row['speedup']:.3f}x, {row['chosen']}), best decode "
                  f"{row['us'][row['best_decode']]:.1f} ({row['best_decode']})", flush=True)
    print(decode_summary(rows))


if __name__ == "__main__":
    main()

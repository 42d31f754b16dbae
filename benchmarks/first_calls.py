"""A fresh install's first calls of every family against PyTorch's default, before and after the variants its
table (or built-in model) chooses have compiled in the background (docs/kernels.md, "Variants compiled when
needed"), in one run:

    WAVETUNE_CACHE_DIR=$(mktemp -d) python benchmarks/first_calls.py --out $OUT   # an empty kernel cache

1. First calls: each family's first call loads its table, which queues its variants for a background compile;
   right after, on held-out cases (dense GEMM: benchmarks/shape_suite.py; MoE layers: grouped_gemm.cases;
   attention: benchmarks/attention.py's held-out suite; FP8: the same layers quantized), wavetune's call with
   no config and PyTorch's default are checked against each other into NaN-poisoned outputs, then timed as
   CUDA graphs replayed round-robin over operand copies larger than twice the L2 (weights cold), medians of
   --reps rounds.
2. Wait (at most --wait-s) until no family's variants are compiling.
3. After: each family whose compile finished runs its table's choices; the same cases are timed again.
Writes <out>/first_calls.json and prints a table of PyTorch's time over wavetune's (geomean, worst) per family
and phase.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import time
from pathlib import Path
from typing import Callable

import torch

import shape_suite
from attention import heldout_cases
import wavetune
from wavetune.families.attention.cases import kv_bytes
from wavetune.families.grouped_gemm.cases import ROUTINGS, e4m3_cases, moe_cases
from wavetune.families.grouped_gemm.fp8 import dequantized_grouped_mm, torch_scaled_grouped_mm
from wavetune.families.grouped_gemm.measure import operand_sets as grouped_operand_sets, route
from wavetune.runtime import tables
from wavetune.tuning.report import geomean
from wavetune.tuning.timing import interleaved_us

REPO = Path(__file__).resolve().parents[1]
MAX_ERROR = 2e-2
PER_GRAPH = 20
MAX_KV_BYTES = 1 << 30  # attention cases: K and V of one copy


@dataclasses.dataclass
class Case:
    family: str  # as the tables name it: the family whose compile the case waits for
    label: str
    operands: list[tuple]  # rotated copies; each ends with the output wavetune writes
    wavetune: Callable
    torch: Callable
    scales: str = ""  # the scales mode of the family's tables (grouped_gemm: "", "row", "block128")

    @property
    def kind(self) -> str:
        """How the report names the case's family and scales mode."""
        return self.family + (f" ({self.scales} scales)" if self.scales else "")

    def compiling(self) -> bool:
        return tables.vendor_serves(self.family, self.scales)


def gemm_cases(count: int, l2_bytes: int) -> list[Case]:
    out = []
    for m, n, k in [(s["m"], s["n"], s["k"]) for s in shape_suite.shapes("heldout", count)]:
        copies = min(16, max(1, math.ceil(2 * l2_bytes / (2 * (m * k + n * k + m * n)))))
        sets = [(rand(m, k), rand(n, k), empty(m, n)) for _ in range(copies)]
        out.append(Case("gemm", f"{m}x{n}x{k}", sets, lambda x, w, o: wavetune.gemm(x, w.t(), out=o),
                        lambda x, w, o: torch.matmul(x, w.t(), out=o)))
    return out


def scaled_gemm_cases(count: int, l2_bytes: int) -> list[Case]:
    """FP8 with scales per token and channel, at 1-64 tokens (where wavetune's own kernels run) and beyond."""
    out = []
    rng = random.Random(7)
    layers = [s for s in shape_suite.shapes("heldout", 4 * count) if s["n"] % 16 == 0 and s["k"] % 16 == 0]
    for s in layers[:count]:  # torch._scaled_mm takes N and K in multiples of 16
        m, n, k = rng.choice((1, 3, 16, 37, 64, s["m"])), s["n"], s["k"]
        copies = min(16, max(1, math.ceil(2 * l2_bytes / (m * k + n * k + 2 * m * n))))
        sets = []
        for _ in range(copies):
            (xq, sx), (wq, sw) = wavetune.quantize_fp8(rand(m, k)), wavetune.quantize_fp8(rand(n, k))
            sets.append((xq, wq, sx, sw.reshape(1, n), empty(m, n)))
        out.append(Case("scaled_gemm", f"{m}x{n}x{k}", sets,
                        lambda x, w, sx, sw, o: wavetune.scaled_gemm(x, w.t(), sx, sw, out=o),
                        lambda x, w, sx, sw, o: torch._scaled_mm(x, w.t(), sx, sw, out_dtype=torch.bfloat16, out=o)))
    return out


def grouped_cases(count: int, l2_bytes: int, scales: str) -> list[Case]:
    """bf16 experts (``scales`` ""), or e4m3 ones with scales per row or per 128-block ("row", "block128")."""
    layers = moe_cases("heldout", count, ROUTINGS)
    layers = e4m3_cases(layers) if scales else layers
    generator = torch.Generator().manual_seed(11)
    out = []
    for c in layers:
        counts = route(c["tokens"], c["experts"], c["topk"], c["routing"], generator)
        sets = [(*s[:3], *s[5:], s[3]) for s in grouped_operand_sets(counts, c["n"], c["k"], l2_bytes, scales)]
        label = f"{c['model']}/{c['projection']}/t{c['tokens']}/{c['routing']}"
        if not scales:
            out.append(Case("grouped_gemm", label, sets, lambda x, w, offs, o: wavetune.grouped_gemm(x, w, offs),
                            lambda x, w, offs, o: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)))
            continue
        vendor = torch_scaled_grouped_mm if scales == "row" else dequantized_grouped_mm
        out.append(Case("grouped_gemm", label, sets,
                        lambda x, w, offs, sx, sw, o: wavetune.scaled_grouped_gemm(x, w, sx, sw, offs),
                        lambda x, w, offs, sx, sw, o, vendor=vendor: vendor(torch, x, w, sx, sw, offs, torch.bfloat16),
                        scales))
    return out


def attention_cases(count: int, l2_bytes: int) -> list[Case]:
    out = []
    for c in [c for c in heldout_cases(["prefill", "decode"], 4 * count, 3) if kv_bytes(c) <= MAX_KV_BYTES][:count]:
        q_shape = (c["batch"], c["seqlen_q"], c["heads_q"], c["head_dim"])
        kv_shape = (c["batch"], c["seqlen_k"], c["heads_kv"], c["head_dim"])
        copies = min(8, max(1, math.ceil(2 * l2_bytes / (4 * math.prod(kv_shape) + 4 * math.prod(q_shape)))))
        sets = [(randn(q_shape), randn(kv_shape), randn(kv_shape), empty(*q_shape)) for _ in range(copies)]
        causal = c["phase"] == "prefill"
        out.append(Case("attention", f"{c['phase']}/{c['model']}/b{c['batch']}/k{c['seqlen_k']}/d{c['head_dim']}",
                        sets, lambda q, k, v, o, causal=causal: wavetune.attention(q, k, v, causal=causal),
                        lambda q, k, v, o, causal=causal: torch.nn.functional.scaled_dot_product_attention(
                            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal,
                            enable_gqa=q.shape[2] != k.shape[2]).transpose(1, 2)))
    return out


def rand(*shape) -> torch.Tensor:
    return torch.empty(*shape, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)


def randn(shape) -> torch.Tensor:
    return torch.randn(shape, device="cuda", dtype=torch.bfloat16)


def empty(*shape) -> torch.Tensor:
    return torch.empty(*shape, device="cuda", dtype=torch.bfloat16)


def checked_error(case: Case) -> float:
    """wavetune's output (written into a NaN-poisoned one where it takes one: as PyTorch's call does) against
    PyTorch's, relative (Frobenius)."""
    *inputs, out = case.operands[0]
    out.fill_(float("nan"))
    ours = case.wavetune(*inputs, out)
    theirs = case.torch(*inputs, torch.empty_like(out)).float()
    error = ((ours.float() - theirs).norm() / theirs.norm().clamp(min=1e-30)).item()
    if not error <= MAX_ERROR:  # NaN fails too
        raise AssertionError(f"{case.family} {case.label}: relative error {error:.3g} against PyTorch")
    return error


def measure(case: Case, reps: int) -> dict:
    error = checked_error(case)
    us = interleaved_us({"torch": case.torch, "wavetune": case.wavetune}, case.operands, PER_GRAPH, reps)
    return {"family": case.kind, "case": case.label, "torch_us": us["torch"], "wavetune_us": us["wavetune"],
            "speedup": us["torch"] / us["wavetune"], "error": error}


def phase_rows(cases: list[Case], reps: int, phase: str, start: float) -> list[dict]:
    rows = []
    for case in cases:
        rows.append({**measure(case, reps), "phase": phase, "at_s": round(time.perf_counter() - start, 1),
                     "compiling": case.compiling()})
        print(f"{phase:<6} {case.kind:<30} {case.label:<60} {rows[-1]['speedup']:.3f}x", flush=True)
    return rows


def summary(rows: list[dict]) -> str:
    lines = ["| family | phase | cases | PyTorch / wavetune, geomean | worst |", "| --- | --- | --- | --- | --- |"]
    for family in dict.fromkeys(r["family"] for r in rows):
        for phase in ("first", "after"):
            mine = [r["speedup"] for r in rows if r["family"] == family and r["phase"] == phase]
            if mine:
                lines.append(f"| {family} | {phase} | {len(mine)} | {geomean(mine):.3f}x | {min(mine):.3f}x |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--count", type=int, default=8, help="held-out cases per family")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--wait-s", type=float, default=420, help="longest wait for the background compiles")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "."))
    args = p.parse_args()
    l2 = wavetune.device_properties()["l2_bytes"]
    start = time.perf_counter()
    cases = [*gemm_cases(args.count, l2), *grouped_cases(args.count, l2, ""), *attention_cases(args.count, l2),
             *scaled_gemm_cases(args.count, l2), *grouped_cases(args.count, l2, "row"),
             *grouped_cases(args.count, l2, "block128")]
    rows = phase_rows(cases, args.reps, "first", start)
    header = {"gpu": wavetune.device_properties()["name"], "date": time.strftime("%Y-%m-%d"),
              "cache": os.environ.get("WAVETUNE_CACHE_DIR"), "cores": os.cpu_count()}
    write(args.out, header, rows)
    print(f"first calls measured {time.perf_counter() - start:.0f} s after the first call", flush=True)
    waited = time.perf_counter()
    while any(c.compiling() for c in cases) and time.perf_counter() - waited < args.wait_s:
        time.sleep(2)
    compiled = [c for c in cases if not c.compiling()]
    print(f"compiles done for {list(dict.fromkeys(c.kind for c in compiled))} {time.perf_counter() - start:.0f} s "
          "after the first call", flush=True)
    rows += phase_rows(compiled, args.reps, "after", start)
    write(args.out, {**header, "compiled": compiled}, rows)
    print(summary(rows))


def write(out: Path, header: dict, rows: list[dict]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "first_calls.json").write_text(json.dumps({"header": header, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

"""Programmatic dependent launch (kernels.h, set_programmatic_launch) on chains of decode GEMMs, in one run:

    python benchmarks/pdl.py --out $OUT

A dense chain is 8 bf16 GEMMs that each read the one before (an MLP's up and down projections, 4 times, their
weights all distinct, so each is read from DRAM), for Llama-3-8B at TP 1 and 4 and Qwen2.5-7B at TP 4 and M 1,
16, 64. Per chain, one CUDA graph each of: torch.matmul (cuBLAS), and wavetune.gemm forced to one CUTLASS
variant (swap-AB for M <= 64 where the build has one) with programmatic dependent launch off and on.
An expert chain is the same on the grouped GEMM (each launch: the expert-argument kernel, then CUTLASS's
ptr-array kernel) of decode steps of Mixtral-8x7B at TP 8, Qwen3-30B-A3B at TP 4 and OLMoE (tokens 1, 16, 64
times the model's experts per token, routed at random), wavetune.grouped_gemm's own choice against
torch._grouped_mm. The graphs are replayed round-robin (--reps rounds, medians). Outputs are checked equal with
it off and on first. Writes <out>/pdl.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import torch

import wavetune
from wavetune import _C
from wavetune.tuning.timing import interleaved_us

REPO = Path(__file__).resolve().parents[1]
LAYERS = {"llama3-8b.tp1": (4096, 14336), "llama3-8b.tp4": (4096, 3584), "qwen2.5-7b.tp4": (3584, 4736)}
# experts, experts per token, hidden, expert FFN (split by TP)
EXPERT_LAYERS = {"mixtral-8x7b.tp8": (8, 2, 4096, 1792), "qwen3-30b-a3b.tp4": (128, 8, 2048, 192),
                 "olmoe-1b-7b": (64, 8, 2048, 1024)}
TOKENS = (1, 16, 64)
PAIRS = 4


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or REPO / "benchmarks" / "results"))
    return p.parse_args()


def cutlass_variant() -> str:
    """A compiled bf16 column-major persistent CUTLASS variant (one that waits after its prologue) for decode:
    swap-AB where the build has one."""
    found = [c for c in wavetune.configs()
             if (c.dtype, c.b_layout, c.scheduler) == ("bf16", "col", "persistent") and not c.from_library]
    if not found:
        raise SystemExit("no bf16 column-major CUTLASS variant in this build")
    return next((c for c in found if c.swap_ab), found[0]).name


def chain_launch(weights: list, gemm):
    def launch(x, out):
        for w in weights[:-1]:
            x = gemm(x, w)  # GEMM after GEMM: nothing between them in the stream
        gemm(x, weights[-1], out)
    return launch


def chain_weights(hidden: int, ffn: int, experts: tuple = ()) -> list:
    """Up and down projections, PAIRS times, scaled so that values stay near 1 along the chain."""
    opts = dict(device="cuda", dtype=torch.bfloat16)
    return [torch.empty(*experts, *(ffn, hidden) if i % 2 == 0 else (hidden, ffn), **opts).uniform_(-1, 1)
            .mul_(1.7 / math.sqrt(hidden if i % 2 == 0 else ffn)) for i in range(2 * PAIRS)]


def pdl_launches(weights: list, gemm) -> dict:
    """The chain on wavetune's ``gemm(a, w, result)`` with programmatic dependent launch off and on."""
    def forced(on: bool):
        def launch(a, w, result=None):
            _C.set_programmatic_launch(on)  # read at launch, so a captured graph keeps it
            return gemm(a, w, result)
        return chain_launch(weights, launch)
    return {"pdl_off": forced(False), "pdl_on": forced(True)}


def measure(hidden: int, ffn: int, tokens: int, variant: str, reps: int) -> dict:
    weights = chain_weights(hidden, ffn)
    config = wavetune.LaunchConfig(variant, "data_parallel")
    launches = {"torch": chain_launch(weights, lambda a, w, result=None: torch.matmul(a, w.t(), out=result)),
                **pdl_launches(weights, lambda a, w, result: wavetune.gemm(a, w.t(), out=result, config=config))}
    return compare(launches, tokens, hidden, reps)


def measure_experts(experts: int, top_k: int, hidden: int, ffn: int, tokens: int, reps: int) -> dict:
    weights = chain_weights(hidden, ffn, (experts,))
    routed = torch.stack([torch.randperm(experts, device="cuda")[:top_k] for _ in range(tokens)]).flatten()
    offsets = torch.bincount(routed, minlength=experts).cumsum(0).to(torch.int32)

    def grouped_mm(a, w, result=None):
        product = torch._grouped_mm(a, w.transpose(-2, -1), offs=offsets)
        return product if result is None else result.copy_(product)

    launches = {"torch": chain_launch(weights, grouped_mm),
                **pdl_launches(weights, lambda a, w, result: wavetune.grouped_gemm(a, w, offsets, out=result))}
    return compare(launches, tokens * top_k, hidden, reps)


def compare(launches: dict, rows: int, hidden: int, reps: int) -> dict:
    """The launches' results checked equal with PDL off and on, then their interleaved times."""
    x = torch.empty(rows, hidden, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
    out = torch.empty_like(x)
    results = {}
    for name in ("pdl_off", "pdl_on"):
        out.fill_(float("nan"))
        launches[name](x, out)
        results[name] = out.clone()
    assert torch.isfinite(results["pdl_on"]).all() and torch.equal(results["pdl_on"], results["pdl_off"])
    times = interleaved_us(launches, [(x, out)], 4, reps)
    return {name: round(us, 2) for name, us in times.items()}


def main() -> None:
    args = parse_args()
    variant = cutlass_variant()
    before = _C.programmatic_launch()
    rows = []
    try:
        for tokens in TOKENS:
            for layer, (hidden, ffn) in LAYERS.items():
                rows.append(row("dense", layer, tokens, measure(hidden, ffn, tokens, variant, args.reps)))
            if wavetune.grouped_configs():
                for layer, (experts, top_k, hidden, ffn) in EXPERT_LAYERS.items():
                    times = measure_experts(experts, top_k, hidden, ffn, tokens, args.reps)
                    rows.append(row("experts", layer, tokens, times))
    finally:
        _C.set_programmatic_launch(before)
    result = {"device": wavetune.device_properties()["name"], "date": time.strftime("%Y-%m-%d"), "variant": variant,
              "gemms_per_chain": 2 * PAIRS, "rows": rows}
    for chain in ("dense", "experts"):
        speedups = [r["pdl_speedup"] for r in rows if r["chain"] == chain]
        if speedups:
            geo = math.exp(sum(map(math.log, speedups)) / len(speedups))
            result[f"pdl_speedup_geomean_{chain}"] = round(geo, 4)
            print(f"{result['device']}: programmatic dependent launch {geo:.3f}x on {chain} chains "
                  f"(geomean over {len(speedups)})")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pdl.json").write_text(json.dumps(result, indent=1) + "\n")


def row(chain: str, layer: str, tokens: int, times: dict) -> dict:
    found = {"chain": chain, "layer": layer, "m": tokens, **times,
             "pdl_speedup": round(times["pdl_off"] / times["pdl_on"], 4)}
    print(found, flush=True)
    return found


if __name__ == "__main__":
    main()

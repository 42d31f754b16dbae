"""Programmatic dependent launch (kernels.h, set_programmatic_launch) on chains of decode GEMMs, in one run:

    python benchmarks/pdl.py --out $OUT

A chain is 8 dense bf16 GEMMs that each read the one before (an MLP's up and down projections, 4 times, their
weights all distinct, so each is read from DRAM), for Llama-3-8B at TP 1 and 4 and Qwen2.5-7B at TP 4 and M 1,
16, 64. Per chain, one CUDA graph each of: torch.matmul (cuBLAS), and wavetune.gemm forced to one CUTLASS
variant (swap-AB for M <= 64 where the build has one) with programmatic dependent launch off and on; the
graphs are replayed round-robin (--reps rounds, medians). Outputs are checked equal with it off and on first.
Writes <out>/pdl.json.
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
TOKENS = (1, 16, 64)
PAIRS = 4


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or REPO / "benchmarks" / "results"))
    return p.parse_args()


def cutlass_variant() -> str:
    """A compiled bf16 column-major persistent CUTLASS variant (stream-K ones launch without PDL) for decode:
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


def measure(hidden: int, ffn: int, tokens: int, variant: str, reps: int) -> dict:
    opts = dict(device="cuda", dtype=torch.bfloat16)
    # Scaled so that values stay near 1 along the chain (about 1 / sqrt(K) each).
    weights = [torch.empty(*(ffn, hidden) if i % 2 == 0 else (hidden, ffn), **opts).uniform_(-1, 1)
               .mul_(1.7 / math.sqrt(hidden if i % 2 == 0 else ffn)) for i in range(2 * PAIRS)]
    x = torch.empty(tokens, hidden, **opts).uniform_(-1, 1)
    out = torch.empty(tokens, hidden, **opts)
    config = wavetune.LaunchConfig(variant, "data_parallel")

    def forced(on: bool):
        def gemm(a, w, result=None):
            _C.set_programmatic_launch(on)  # read at launch, so a captured graph keeps it
            return wavetune.gemm(a, w.t(), out=result, config=config)
        return chain_launch(weights, gemm)

    launches = {"torch": chain_launch(weights, lambda a, w, result=None: torch.matmul(a, w.t(), out=result)),
                "pdl_off": forced(False), "pdl_on": forced(True)}
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
        for layer, (hidden, ffn) in LAYERS.items():
            for tokens in TOKENS:
                times = measure(hidden, ffn, tokens, variant, args.reps)
                rows.append({"layer": layer, "m": tokens, "hidden": hidden, "ffn": ffn, **times,
                             "pdl_speedup": round(times["pdl_off"] / times["pdl_on"], 4)})
                print(rows[-1], flush=True)
    finally:
        _C.set_programmatic_launch(before)
    geo = math.exp(sum(math.log(r["pdl_speedup"]) for r in rows) / len(rows))
    result = {"device": wavetune.device_properties()["name"], "date": time.strftime("%Y-%m-%d"), "variant": variant,
              "gemms_per_chain": 2 * PAIRS, "pdl_speedup_geomean": round(geo, 4), "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pdl.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['device']}, {variant}: programmatic dependent launch {geo:.3f}x (geomean over {len(rows)} chains)")


if __name__ == "__main__":
    main()

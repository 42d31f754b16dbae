"""The FP8 scaled GEMM benchmark's problems (benchmarks/scaled_gemm.py): the decoder-layer projections (qkv, o,
gate_up, down) of a split's models at tensor-parallel degrees 1-8, each at token counts drawn (seeded) from
each of M_RANGES, odd ones included. The held-out models are ones no design decision of the scaled GEMM
looked at. Standard library only.
"""

from __future__ import annotations

import random

from ..gemm.cases import DIMS, TP_SPLITS, layer_shapes

MODELS = {
    "heldout": ("qwen2.5-32b", "mistral-nemo-12b", "gemma-2-27b", "internlm2.5-20b"),
    # What the scaled GEMM's choice (its token limits and wave models) was decided on.
    "design": ("llama3-8b", "qwen2.5-7b", "llama3-70b", "qwen2.5-14b"),
}
M_RANGES = (("1-8", 1, 8), ("9-16", 9, 16), ("17-64", 17, 64), ("65-1024", 65, 1024), ("1025-16384", 1025, 16384))
VARIANT_M = 64  # the decode variants are measured up to this M, past the default choice's limit, to place it


def problems(split: str, max_m: int, seed: int) -> list[dict]:
    """The split's problems, in the M ranges that start at or below ``max_m`` (drawn up to it)."""
    rng = random.Random(seed)
    out = []
    for model in MODELS[split]:
        for tp in TP_SPLITS:
            for layer, (n, k) in layer_shapes(*DIMS[model], tp).items():
                if layer == "lm_head" or k % 16:
                    continue  # FP8 checkpoints keep the LM head in bf16
                for _, lo, hi in M_RANGES:
                    if lo <= max_m:
                        out.append(dict(model=model, tp=tp, layer=layer, m=rng.randint(lo, min(hi, max_m)), n=n, k=k))
    return out

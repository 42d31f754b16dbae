"""The attention cases attention tables are fitted to (``python -m wavetune tune --family attention``), the
named suite of benchmarks/attention.py: Llama-3-8B (32 query / 8 KV heads) and Llama-3-70B (64 / 8) at
head dim 128, TinyLlama-1.1B (32 / 4) at head dim 64 and Gemma-7B (16 / 16) at head dim 256, whole and split
by tensor parallelism 2-8 where the KV heads divide; prefill (causal, query length = KV length, 128-16384
tokens, batch 1-16) and decode (one query token, KV length 512-131072, batch 1-256). None of these models is
in the held-out splits (benchmarks/shape_suite.py). Standard library only.
"""

from __future__ import annotations

import random

# name: (query heads, KV heads, head dim).
NAMED_MODELS = {"llama3-8b": (32, 8, 128), "llama3-70b": (64, 8, 128), "tinyllama-1.1b": (32, 4, 64),
                "gemma-7b": (16, 16, 256)}
TP = (1, 2, 4, 8)
PREFILL = ((1, 16384), (1, 2048), (4, 4096), (16, 1024), (2, 8192), (8, 512), (1, 128), (16, 128))  # (batch, tokens)
DECODE = ((1, 131072), (64, 4096), (1, 4096), (256, 2048), (8, 32768), (32, 512), (4, 131072), (128, 8192), (1, 512))
PHASES = ("decode", "prefill")
SPLITS = (1, 2, 4, 8, 16, 32, 64, 128)  # KV split counts timed on decode cases
MAX_KV_BYTES = 8 << 30
SEED = 5  # the order cases are measured in (benchmarks/attention.py's default seed)


def tp_degrees(kv_heads: int) -> list[int]:
    """The tensor-parallel degrees that split ``kv_heads`` evenly."""
    return [tp for tp in TP if kv_heads % tp == 0]


def named_cases(phases: list[str] | tuple[str, ...] = PHASES) -> list[dict]:
    out = []
    for phase in phases:
        for batch, tokens in PREFILL if phase == "prefill" else DECODE:
            for model, (hq, hkv, head_dim) in NAMED_MODELS.items():
                for tp in tp_degrees(hkv):
                    seqlen_q = tokens if phase == "prefill" else 1
                    out.append(dict(phase=phase, model=f"{model}/tp{tp}", batch=batch, seqlen_q=seqlen_q,
                                    seqlen_k=tokens, heads_q=hq // tp, heads_kv=hkv // tp, head_dim=head_dim))
    return out


def kv_bytes(c: dict) -> int:
    return 4 * c["batch"] * c["seqlen_k"] * c["heads_kv"] * c["head_dim"]


def measurable(cases: list[dict], head_dims: set[int], seed: int = SEED) -> list[dict]:
    """The cases a build can run (its head dims, K and V within MAX_KV_BYTES), shuffled so that a cut budget
    still spans the phases, models and sizes."""
    out = [c for c in cases if kv_bytes(c) <= MAX_KV_BYTES and c["head_dim"] in head_dims]
    random.Random(seed).shuffle(out)
    return out


def case_key(case: dict) -> str:
    """What identifies a case in a measurement log."""
    return (f"{case['phase']}/{case['model']}/b{case['batch']}/q{case['seqlen_q']}/k{case['seqlen_k']}/"
            f"h{case['heads_q']}:{case['heads_kv']}/d{case['head_dim']}")


def tune_plan(head_dims: set[int], count: int | None = None) -> list[dict]:
    """The cases ``tune --family attention`` measures: the named suite's measurable cases in measuring
    order (the first ``count`` of them), keyed."""
    plan = measurable(named_cases(), head_dims)[:count]
    return [{**c, "case_key": case_key(c)} for c in plan]

"""Grouped-GEMM cases of mixture-of-experts layers that no named benchmark model holds: the tune split,
which grouped tables are fitted to (``python -m wavetune tune --family grouped_gemm``), and the held-out
split, looked at only for reports (benchmarks/grouped.py --suite heldout). Standard library only.

A case is an expert layer (gate_up: N = 2 x expert intermediate, K = hidden; down: N = hidden, K =
intermediate) of a model under an expert/tensor-parallel split, a token count (log-uniform over 1-16384)
and a routing (balanced: each token picks top-k distinct experts uniformly; skewed: with Zipf popularity
over the experts; hot: three experts are picked 30 times as often as the others).
"""

from __future__ import annotations

import random

from ...tuning.splits import HASHED_SPLITS, split_of, token_count

# Mixture-of-experts layers for grouped GEMM: name -> (experts, hidden, expert intermediate, top-k), from the
# models' published configs. The four of benchmarks/grouped.py's named models belong to neither split.
MOE_FAMILIES = {
    "mixtral-8x22b": (8, 6144, 16384, 2),
    "dbrx": (16, 6144, 10752, 4),
    "grok-1": (8, 6144, 32768, 2),
    "jamba-v0.1": (16, 4096, 14336, 2),
    "phi-3.5-moe": (16, 4096, 6400, 2),
    "llama4-scout": (16, 5120, 8192, 1),
    "olmoe-1b-7b": (64, 2048, 1024, 8),
    "qwen1.5-moe-a2.7b": (60, 2048, 1408, 4),
    "qwen2-57b-a14b": (64, 3584, 2560, 8),
    "deepseek-v2-lite": (64, 2048, 1408, 6),
    "deepseek-v2": (160, 5120, 1536, 6),
    "arctic": (128, 7168, 4864, 2),
    "gpt-oss-20b": (32, 2880, 2880, 4),
    "gpt-oss-120b": (128, 2880, 2880, 4),
    "granite3-3b-a800m": (40, 1536, 512, 8),
    "kimi-k2": (384, 7168, 2048, 8),
    "minimax-m1": (32, 6144, 9216, 2),
    "hunyuan-a13b": (64, 4096, 3072, 8),
}
# Expert parallelism divides the experts (and a token's top-k picks: a GPU gets about top-k / EP of them),
# tensor parallelism each expert's intermediate size.
MOE_SPLITS = ((1, 1), (1, 2), (1, 4), (4, 1), (8, 1), (2, 2))
MOE_TOKENS_MAX = 16384
# The splits' seeds (gemm.cases draws the dense splits from the same numbers, less one).
SEEDS = {"tune": 1234, "heldout": 98765}
ROUTINGS = ("balanced", "skewed", "hot")
# The cases of the tune split that tuning measures by default: what the shipped tables were fitted to.
TUNE_CASES = 600


def moe_layer_pool() -> list[dict]:
    """Every expert layer (gate_up and down) of MOE_FAMILIES under every expert/tensor-parallel split."""
    pool = {}
    for name, (experts, hidden, inter, topk) in MOE_FAMILIES.items():
        for ep, tp in MOE_SPLITS:
            e, i = experts // ep, inter // tp
            if experts % ep or inter % tp or i % 8 or e < 2:
                continue
            for layer, n, k in (("gate_up", 2 * i, hidden), ("down", hidden, i)):
                pool.setdefault((e, n, k), {"model": f"{name}.ep{ep}.tp{tp}", "projection": layer, "experts": e,
                                            "topk": min(e, max(1, topk // ep)), "n": n, "k": k})
    return [pool[key] for key in sorted(pool)]


def moe_cases(split: str, count: int, routings: tuple[str, ...]) -> list[dict]:
    """``count`` grouped-GEMM cases of a split: an expert layer, a token count log-uniform over 1-16384 and a
    routing; layers belong to one split by a hash of (experts, N, K), as dense shapes do."""
    if split not in HASHED_SPLITS:
        raise ValueError(f"split must be one of {HASHED_SPLITS}, got {split!r}")
    layers = [c for c in moe_layer_pool() if split_of(c["n"], c["k"] * 1000003 + c["experts"]) == split]
    rng = random.Random(SEEDS[split] + 1)
    out = []
    for i in range(count):
        layer = layers[i % len(layers)] if i < len(layers) else rng.choice(layers)
        tokens = token_count(rng, MOE_TOKENS_MAX)
        out.append({**layer, "tokens": tokens, "routing": rng.choice(routings)})
    rng.shuffle(out)
    return out


def case_key(case: dict, occurrence: int = 0) -> str:
    """What identifies a case in a measurement log: its layer, tokens and routing (and which repeat of them)."""
    key = f"{case['model']}/{case['projection']}/e{case['experts']}/top{case['topk']}/t{case['tokens']}/{case['routing']}"
    return f"{key}#{occurrence}" if occurrence else key


def keyed(cases: list[dict]) -> list[dict]:
    """The cases with their ``case_key`` (repeats of one case numbered in order)."""
    seen: dict[str, int] = {}
    out = []
    for case in cases:
        key = case_key(case)
        seen[key] = seen.get(key, -1) + 1
        out.append({**case, "case_key": case_key(case, seen[key])})
    return out


def tune_plan(count: int = TUNE_CASES) -> list[dict]:
    """The cases ``tune --family grouped_gemm`` measures: ``count`` of the tune split, keyed."""
    return keyed(moe_cases("tune", count, ROUTINGS))


def e4m3_cases(cases: list[dict]) -> list[dict]:
    """The cases the scaled modes (e4m3 operands) take: K fills 16-byte rows of e4m3 values."""
    return [case for case in cases if case["k"] % 16 == 0]

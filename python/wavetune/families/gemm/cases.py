"""Dense GEMM cases: LLM-like shapes that no table was fitted or judged on (the evaluation that cannot be
overfit by accident; ``python benchmarks/shape_suite.py`` prints them), and the decode benchmarks' layers.

Shapes are out[M, N] = x[M, K] @ W[N, K]^T of real model families' linear layers: attention qkv and o,
MLP gate_up and down, LM heads, and mixture-of-experts expert layers used as dense GEMMs, each under
tensor-parallel splits 1, 2, 4 and 8 (column-parallel layers split N, row-parallel ones K). (N, K) pairs
of the public suite (shared/benchmarks/llm_shapes.json) are left out. Each (N, K) pair belongs to one
split, by a hash of the pair, so the `tune` split (what design decisions may look at) and the `heldout`
split (looked at only for final reports) share no layer. The `fresh` split holds the layers of other
families (FRESH_FAMILIES), none of them in the first two pools: it was added once the held-out split had
been reported, to judge the design decisions made after that report. The `generic` suite holds no model's
layers: problems drawn as tuning's calibration shapes are (N and K log-uniform over 256-131072 and
128-32768, odd aspects included), with a seed of its own. In the splits, M is drawn per shape, log-uniform
over 1-16384, so most token counts are odd or otherwise unround, as a batcher produces them (LM heads:
1-512, one token per sequence).
"""

from __future__ import annotations

import random

from ...tuning.splits import HASHED_SPLITS, split_of, token_count

SPLITS = (*HASHED_SPLITS, "fresh")  # of model layers
SUITES = (*SPLITS, "generic")
SEEDS = {"tune": 1234, "heldout": 98765, "fresh": 20261124, "generic": 20261125}
M_MAX = 16384
# NOTES: serving engines run the LM head on the last token of each sequence only, so its M is a batch size.
LM_HEAD_M_MAX = 512
TP_SPLITS = (1, 2, 4, 8)

# name: (hidden, intermediate, query heads, kv heads, head dim, vocab), from the models' published configs.
DENSE_FAMILIES = {
    "llama2-7b": (4096, 11008, 32, 32, 128, 32000),
    "llama2-13b": (5120, 13824, 40, 40, 128, 32000),
    "llama3.2-1b": (2048, 8192, 32, 8, 64, 128256),
    "llama3.2-3b": (3072, 8192, 24, 8, 128, 128256),
    "mistral-nemo-12b": (5120, 14336, 32, 8, 128, 131072),
    "qwen2.5-1.5b": (1536, 8960, 12, 2, 128, 151936),
    "qwen2.5-14b": (5120, 13824, 40, 8, 128, 152064),
    "qwen2.5-32b": (5120, 27648, 40, 8, 128, 152064),
    "qwen3-8b": (4096, 12288, 32, 8, 128, 151936),
    "qwen3-32b": (5120, 25600, 64, 8, 128, 151936),
    "gemma2-9b": (3584, 14336, 16, 8, 256, 256000),
    "gemma2-27b": (4608, 36864, 32, 16, 128, 256000),
    "phi3-medium": (5120, 17920, 40, 10, 128, 32064),
    "yi-34b": (7168, 20480, 56, 8, 128, 64000),
    "falcon-40b": (8192, 32768, 128, 8, 64, 65024),
}
# name: (hidden, expert intermediate): experts run as dense GEMMs on their routed tokens.
MOE_EXPERTS = {
    "mixtral-8x7b": (4096, 14336),
    "qwen3-30b-a3b": (2048, 768),
    "qwen3-235b-a22b": (4096, 1536),
    "deepseek-v3": (7168, 2048),
}
# The fresh split's families, in the same formats (LM heads with vocabularies padded to a multiple of 128).
FRESH_FAMILIES = {
    "internlm2.5-20b": (6144, 16384, 48, 8, 128, 92544),
    "deepseek-llm-67b": (8192, 22016, 64, 8, 128, 102400),
    "command-r-35b": (8192, 22528, 64, 64, 128, 256000),
    "baichuan2-13b": (5120, 13696, 40, 40, 128, 125696),
    "glm4-9b": (4096, 13696, 32, 2, 128, 151552),
    "granite3.1-8b": (4096, 12800, 32, 8, 128, 49280),
    "exaone3.5-32b": (5120, 27392, 40, 8, 128, 102400),
    "gemma3-12b": (3840, 15360, 16, 8, 256, 262272),
    "gemma3-4b": (2560, 10240, 8, 4, 256, 262272),
    "mistral-small-24b": (5120, 32768, 32, 8, 128, 131072),
    "smollm2-1.7b": (2048, 8192, 32, 32, 64, 49152),
    "starcoder2-15b": (6144, 24576, 48, 4, 128, 49152),
}
FRESH_MOE_EXPERTS = {
    "gpt-oss-120b": (2880, 2880),
    "olmoe-1b-7b": (2048, 1024),
    "arctic": (7168, 4864),
    "deepseek-v2-lite": (2048, 1408),
}


def _layers(hidden: int, inter: int, heads: int, kv_heads: int, head_dim: int, vocab: int):
    """(layer, N, K, column-parallel) of one dense family."""
    yield "qkv", (heads + 2 * kv_heads) * head_dim, hidden, True
    yield "o", hidden, heads * head_dim, False
    yield "gate_up", 2 * inter, hidden, True
    yield "down", hidden, inter, False
    yield "lm_head", vocab, hidden, True


def _moe_layers(hidden: int, inter: int):
    yield "expert_gate_up", 2 * inter, hidden, True
    yield "expert_down", hidden, inter, False


def layer_pool(public: set[tuple[int, int]], dense: dict = DENSE_FAMILIES, moe: dict = MOE_EXPERTS
               ) -> dict[tuple[int, int], str]:
    """Every (N, K) of the families under every tensor-parallel split, with one name for each, less the
    public suite's (``public``)."""
    pool: dict[tuple[int, int], str] = {}
    families = [(name, _layers(*dims)) for name, dims in dense.items()]
    families += [(name, _moe_layers(*dims)) for name, dims in moe.items()]
    for family, layers in families:
        for layer, n, k, column_parallel in layers:
            for tp in TP_SPLITS:
                split_n, split_k = (n // tp, k) if column_parallel else (n, k // tp)
                if (n if column_parallel else k) % tp == 0 and split_n % 8 == 0 and split_k % 8 == 0:
                    pool.setdefault((split_n, split_k), f"{family}.{layer}.tp{tp}")
    return {nk: name for nk, name in pool.items() if nk not in public}


def split_pairs(split: str, public: set[tuple[int, int]]) -> list[tuple[tuple[int, int], str]]:
    """The split's ((N, K), layer name) pairs, sorted, the public suite's (``public``) left out."""
    if split == "fresh":
        seen = layer_pool(public)
        pool = {nk: name for nk, name in layer_pool(public, FRESH_FAMILIES, FRESH_MOE_EXPERTS).items()
                if nk not in seen}
        return sorted(pool.items())
    return sorted((nk, name) for nk, name in layer_pool(public).items() if split_of(*nk) == split)


def shapes(split: str, count: int, public: set[tuple[int, int]]) -> list[dict]:
    """``count`` shapes of a split: {"m", "n", "k", "layer"}, the same for the same arguments. ``public``: the
    (N, K) pairs of the public suite, which the splits leave out (benchmarks/shape_suite.py reads them)."""
    if split not in SUITES:
        raise ValueError(f"split must be one of {SUITES}, got {split!r}")
    if split == "generic":
        from . import tuning  # numpy: only this split needs it

        return [{"m": m, "n": n, "k": k, "layer": "generic"}
                for m, n, k in tuning.calibration_shapes(count, SEEDS["generic"])]
    pairs = split_pairs(split, public)
    rng = random.Random(SEEDS[split])
    out = []
    for i in range(count):
        (n, k), name = pairs[i % len(pairs)] if i < len(pairs) else rng.choice(pairs)
        m = token_count(rng, LM_HEAD_M_MAX if ".lm_head." in name else M_MAX)
        out.append({"m": m, "n": n, "k": k, "layer": name})
    rng.shuffle(out)
    return out


# ---- the decode benchmarks' layers (benchmarks/decode_gemm.py; benchmarks/scaled_gemm.py draws on them too) ----

# (hidden, intermediate, query heads, KV heads, head dim, vocabulary) of the models they draw their layers from.
DIMS = {
    "llama3-8b": (4096, 14336, 32, 8, 128, 128256),
    "qwen2.5-7b": (3584, 18944, 28, 4, 128, 152064),
    "llama3-70b": (8192, 28672, 64, 8, 128, 128256),
    "qwen2.5-14b": (5120, 13824, 40, 8, 128, 152064),
    "qwen2.5-32b": (5120, 27648, 40, 8, 128, 152064),
    "gemma-2-9b": (3584, 14336, 16, 8, 256, 256000),
    "gemma-2-27b": (4608, 36864, 32, 16, 128, 256000),
    "mistral-small-24b": (5120, 32768, 32, 8, 128, 131072),
    "mistral-nemo-12b": (5120, 14336, 32, 8, 128, 131072),
    "phi-3-medium": (5120, 17920, 40, 10, 128, 32064),
    "yi-1.5-34b": (7168, 20480, 56, 8, 128, 64000),
    "internlm2.5-20b": (6144, 16384, 48, 8, 128, 92544),
}
# The held-out models are ones no design decision of wavetune looked at; the design split is the public
# shape suite's models.
DECODE_MODELS = {
    "heldout": ("qwen2.5-14b", "gemma-2-9b", "mistral-small-24b", "phi-3-medium", "yi-1.5-34b"),
    "design": ("llama3-8b", "qwen2.5-7b", "llama3-70b"),
}
DECODE_M_RANGES = (("1-16", 1, 16), ("17-64", 17, 64))


def layer_shapes(hidden: int, inter: int, heads: int, kv_heads: int, head_dim: int, vocab: int, tp: int) -> dict:
    """(N, K) of each projection on one of ``tp`` GPUs (column-parallel qkv, gate_up, LM head; row-parallel
    o, down); None where the split is not whole."""
    kv = max(kv_heads // tp, 1)
    shapes = {"qkv": ((heads // tp + 2 * kv) * head_dim, hidden), "o": (hidden, heads * head_dim // tp),
              "gate_up": (2 * inter // tp, hidden), "down": (hidden, inter // tp), "lm_head": (vocab // tp, hidden)}
    return {name: nk for name, nk in shapes.items() if nk[0] % 8 == 0 and nk[1] % 8 == 0 and heads % tp == 0}


def decode_problems(split: str, per_shape: int, seed: int) -> list[dict]:
    """Every projection and LM head of the split's models at each tensor-parallel degree, each at ``per_shape``
    token counts drawn (seeded) from each of DECODE_M_RANGES."""
    rng = random.Random(seed)
    out = []
    for model in DECODE_MODELS[split]:
        dims = DIMS[model]
        for tp in TP_SPLITS:
            for layer, (n, k) in layer_shapes(*dims, tp).items():
                for _, lo, hi in DECODE_M_RANGES:
                    for m in rng.sample(range(lo, hi + 1), per_shape):
                        out.append(dict(model=model, tp=tp, layer=layer, m=m, n=n, k=k))
    return out

"""Block-scaled FP8 grouped GEMM for mixture-of-experts layers: ``block_scaled_grouped_gemm`` and its variant
listing (docs/grouped.md, "FP8").

torch is optional: this module never imports it. ``block_scaled_grouped_gemm`` takes torch tensors, so torch
is already loaded whenever a call can succeed.
"""

from __future__ import annotations

from ...runtime.configs import KernelConfig
from ..grouped_gemm.e4m3 import E4m3GroupedEntry, blocks, dequantized_grouped_mm

ENTRY = E4m3GroupedEntry(
    "block_scaled_grouped", "block_scaled_grouped_gemm", "block_scaled_grouped_configs",
    lambda rows, experts, n, k: ([(rows, blocks(k))], (experts, blocks(n), blocks(k)),
                                 "one scale per token and 128 values of K; per expert and 128x128 weight block"),
    dequantized_grouped_mm)


def block_scaled_grouped_configs() -> list[KernelConfig]:
    """The block-scaled FP8 grouped variants compiled into this build, by id (ids of their own; ``dtype`` is the
    output's)."""
    return ENTRY.configs()


def config_space_hash() -> str:
    """The hash of the block-scaled FP8 grouped config space compiled into this build."""
    return ENTRY.config_space_hash()


def check_operands(torch, x, w, scale_x, scale_w, offsets, out_dtype, out) -> None:
    """Every check that needs no GPU and no data pointer: types, shapes, dtypes, contiguity."""
    ENTRY.check(torch, x, w, scale_x, scale_w, offsets, out_dtype, out)


def block_scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, *, out_dtype=None, out=None, config=None):
    """FP8 mixture-of-experts grouped GEMM with 128-block scales, as FP8 checkpoints (DeepSeek-V3, Qwen3 FP8)
    store experts: for every expert e, ``out[rows of e] = sum over 128-wide k-blocks b of scale_x[rows of e, b]
    * (x[rows of e, b] @ w[e, :, b].T) * scale_w[e, n // 128, b]``, accumulated in float32.

    x: [rows, K] torch.float8_e4m3fn, its rows sorted by expert; scale_x: float32 [rows, ceil(K/128)], one
        scale per token and 128 values of K (``quantize_fp8(x, group_size=128)`` makes both).
    w: [experts, N, K] torch.float8_e4m3fn: one nn.Linear weight per expert; scale_w: float32 [experts,
        ceil(N/128), ceil(K/128)], one per 128x128 block (a checkpoint's ``weight_scale_inv``).
    offsets: int32 [experts], the cumulative row ends, as in ``grouped_gemm``.
    out_dtype: torch.bfloat16 (default) or torch.float16; out: optional [rows, N] output of that dtype.
    config: force a variant (id or name, ``block_scaled_grouped_configs()``); default: the choice of the GPU's
        block-scaled grouped table (``tables/<gpu>.block_scaled_grouped_gemm.wtt``, or
        $WAVETUNE_BLOCK_SCALED_GROUPED_TABLE), else of the grouped family's built-in heuristic for 1-byte
        operands, from the sizes alone (no wait for the GPU; CUDA-graph capture works).

    Runs on the current torch stream of x's device. K must be a multiple of 16 and N of 8; all tensors
    contiguous.
    """
    return ENTRY(x, w, scale_x, scale_w, offsets, out_dtype=out_dtype, out=out, config=config)


def size_error(p) -> str:
    return ENTRY.size_error(p)

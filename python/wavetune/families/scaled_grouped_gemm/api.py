"""FP8 grouped GEMM for mixture-of-experts layers: ``scaled_grouped_gemm`` and its variant listing
(docs/grouped.md, "FP8"). Scales per token and per expert channel run here; 128-block scales go to the
block-scaled family (``block_scaled_grouped_gemm``).

torch is optional: this module never imports it. ``scaled_grouped_gemm`` takes torch tensors, so torch is
already loaded whenever a call can succeed.
"""

from __future__ import annotations

from ...runtime.configs import KernelConfig
from ..block_scaled_grouped_gemm import api as block_api
from ..grouped_gemm.e4m3 import E4m3GroupedEntry



def torch_scaled_grouped_mm(torch, x, w, scale_x, scale_w, offsets, out_dtype):
    """The product as PyTorch computes it: torch._scaled_grouped_mm, which has bf16 outputs only and needs N and K
    divisible by 16; for the others, x and w dequantized to the output's dtype and torch._grouped_mm."""
    if out_dtype == torch.bfloat16 and w.shape[1] % 16 == 0 and w.shape[2] % 16 == 0:
        return torch._scaled_grouped_mm(x, w.transpose(-2, -1), scale_x.reshape(-1), scale_w, offs=offsets,
                                        out_dtype=out_dtype)
    x = x.to(out_dtype) * scale_x.reshape(-1, 1).to(out_dtype)
    return torch._grouped_mm(x, (w.to(out_dtype) * scale_w[..., None].to(out_dtype)).transpose(-2, -1), offs=offsets)


ENTRY = E4m3GroupedEntry(
    "scaled_grouped", "scaled_grouped_gemm", "scaled_grouped_configs",
    lambda rows, experts, n, k: ([(rows,), (rows, 1)], (experts, n), "one scale per token; per expert and channel"),
    torch_scaled_grouped_mm)


def scaled_grouped_configs() -> list[KernelConfig]:
    """The FP8 grouped variants (per-row scales) compiled into this build, by id (ids of their own; ``dtype``
    is the output's). ``block_scaled_grouped_configs()`` lists the 128-block ones."""
    return ENTRY.configs()


def config_space_hash() -> str:
    """The hash of the FP8 grouped config space compiled into this build."""
    return ENTRY.config_space_hash()


def block_scaled(scale_w) -> bool:
    """Whether the weight scales are per 128x128 block ([experts, N/128, K/128]) rather than per channel."""
    return getattr(scale_w, "dim", lambda: 0)() == 3


def check_operands(torch, x, w, scale_x, scale_w, offsets, out_dtype, out) -> None:
    """Every check that needs no GPU and no data pointer: types, shapes, dtypes, contiguity."""
    entry = block_api.ENTRY if block_scaled(scale_w) else ENTRY
    entry.check(torch, x, w, scale_x, scale_w, offsets, out_dtype, out)


def scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, *, out_dtype=None, out=None, config=None):
    """FP8 mixture-of-experts grouped GEMM: ``out[rows of e] = scale_x[rows of e] * (x[rows of e] @ w[e].T) *
    scale_w[e]`` for every expert e, accumulated in float32.

    x: [rows, K] torch.float8_e4m3fn, its rows sorted by expert (``quantize_fp8`` makes it and its scales).
    w: [experts, N, K] torch.float8_e4m3fn: one nn.Linear weight per expert.
    scale_x: float32 [rows] or [rows, 1], per token; scale_w: float32 [experts, N], per expert and channel.
        With 128-block scales instead (scale_x [rows, ceil(K/128)], scale_w [experts, ceil(N/128),
        ceil(K/128)], as FP8 checkpoints hold them) the call is ``block_scaled_grouped_gemm``'s.
    offsets: int32 [experts], the cumulative row ends, as in ``grouped_gemm``.
    out_dtype: torch.bfloat16 (default) or torch.float16; out: optional [rows, N] output of that dtype.
    config: force a variant (id or name, ``scaled_grouped_configs()``); default: the choice of the GPU's FP8
        grouped table (``tables/<gpu>.scaled_grouped_gemm.wtt``, or $WAVETUNE_SCALED_GROUPED_TABLE), else of the
        grouped family's built-in heuristic for 1-byte operands, from the sizes alone (the call never waits for
        the GPU to learn the rows per expert, and CUDA-graph capture works).

    The same product as ``torch._scaled_grouped_mm(x, w.transpose(-2, -1), scale_x, scale_w, offs=offsets,
    out_dtype=torch.bfloat16)``. Runs on the current torch stream of x's device. K must be a multiple of 16
    and N of 8; all tensors contiguous.
    """
    entry = block_api.block_scaled_grouped_gemm if block_scaled(scale_w) else ENTRY
    return entry(x, w, scale_x, scale_w, offsets, out_dtype=out_dtype, out=out, config=config)


def size_error(p) -> str:
    return ENTRY.size_error(p)

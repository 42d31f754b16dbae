"""The FP8 scales modes' operands (GroupedScales, csrc/include/wavetune/grouped.h; ``_C.GROUPED_SCALES``): the
shapes their scales take, read from the mode's layout, and PyTorch's ways with them, which the vendor routes run
and the benchmarks time.

torch is optional: this module never imports it.
"""

from __future__ import annotations

from ..scaled_gemm.api import BLOCK


def blocks(extent: int, block: int = BLOCK) -> int:
    """Scale blocks along an extent: ceil(extent / block)."""
    return -(-extent // block)


def scale_shapes(layout: dict, rows: int, experts: int, n: int, k: int) -> tuple[list[tuple], tuple, str]:
    """(the shapes scale_x may take, the shape scale_w must take, what they hold) of a scaled mode's ``layout``
    (a block size 0: all of K)."""
    x_k, w_n, w_k = layout["x_block_k"], layout["w_block_n"], layout["w_block_k"]
    x_shapes = [(rows, blocks(k, x_k))] if x_k else [(rows,), (rows, 1)]
    w_shape = (experts, blocks(n, w_n), *((blocks(k, w_k),) if w_k else ()))
    x_what = "one scale per token" + (f" and {x_k} values of K" if x_k else "")
    w_what = f"{w_n}x{w_k} weight block" if w_k else "channel" if w_n == 1 else f"{w_n} channels"
    return x_shapes, w_shape, f"{x_what}; per expert and {w_what}"


def torch_scaled_grouped_mm(torch, x, w, scale_x, scale_w, offsets, out_dtype):
    """Per-row scales as PyTorch computes them: torch._scaled_grouped_mm, which has bf16 outputs only and needs N
    and K divisible by 16; for the others, x and w dequantized to the output's dtype and torch._grouped_mm."""
    if out_dtype == torch.bfloat16 and w.shape[1] % 16 == 0 and w.shape[2] % 16 == 0:
        return torch._scaled_grouped_mm(x, w.transpose(-2, -1), scale_x.reshape(-1), scale_w, offs=offsets,
                                        out_dtype=out_dtype)
    x = x.to(out_dtype) * scale_x.reshape(-1, 1).to(out_dtype)
    return torch._grouped_mm(x, (w.to(out_dtype) * scale_w[..., None].to(out_dtype)).transpose(-2, -1), offs=offsets)


def dequantize_experts(q, scale, rows: int, dtype):
    """``q`` [..., R, K] in ``dtype`` with scales per block of ``rows`` x 128 (``quantize_blocks``), in torch ops
    as a PyTorch user would (a broadcast over whole blocks, else scales expanded to every element): PyTorch's
    way with block-scaled FP8 experts, which the vendor route runs and benchmarks time, and, in float32, the
    references of the checks."""
    *lead, r, k = q.shape
    if r % rows == 0 and k % BLOCK == 0:
        tiles = q.view(*lead, r // rows, rows, k // BLOCK, BLOCK).to(dtype)
        return (tiles * scale[..., :, None, :, None].to(dtype)).view(q.shape)
    full = scale.repeat_interleave(rows, dim=-2).repeat_interleave(BLOCK, dim=-1)[..., :r, :k]
    return q.to(dtype) * full.to(dtype)


def dequantized_grouped_mm(torch, x, w, scale_x, scale_w, offsets, out_dtype):
    """x and w dequantized to ``out_dtype`` with their 1x128 and 128x128 block scales, then torch._grouped_mm: what
    PyTorch offers for block-scaled FP8 experts, which it has no kernel for."""
    return torch._grouped_mm(dequantize_experts(x, scale_x, 1, out_dtype),
                             dequantize_experts(w, scale_w, BLOCK, out_dtype).transpose(-2, -1), offs=offsets)

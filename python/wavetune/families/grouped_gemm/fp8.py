"""The FP8 scales modes' operands (GroupedScales, csrc/include/wavetune/grouped.h; ``_C.GROUPED_SCALES``): the
shapes their scales take, read from the mode's layout, and PyTorch's ways with them, which the vendor routes run
and the benchmarks time.

A layout's blocks: x's scales cover x_block_m x x_block_k values of x, w's w_block_n x w_block_k values of each
w[e]; a block size 0 covers all of its extent (one block, and no dimension in the scale tensor's shape).

torch is optional: this module never imports it.
"""

from __future__ import annotations

import functools
from typing import Callable

from ...runtime.native import _C
from ..scaled_gemm.api import BLOCK

# Every scales mode's layout (grouped.h's GroupedScalesLayout) by name, "" for none, in enumerator order.
SCALES = {layout["name"]: layout for layout in _C.GROUPED_SCALES}


def blocks(extent: int, block: int = BLOCK) -> int:
    """Scale blocks along an extent: ceil(extent / block); one block of all of it for a block size 0."""
    return -(-extent // block) if block else 1


def operand_blocks(layout: dict, operand: str) -> tuple[int, int]:
    """(rows, columns) of an operand's scale block under a mode's ``layout``: "x" [rows, K] or "w" (each w[e],
    [N, K])."""
    return (layout["x_block_m"], layout["x_block_k"]) if operand == "x" else (layout["w_block_n"], layout["w_block_k"])


def scale_dims(rows: int, cols: int, block_rows: int, block_cols: int) -> tuple:
    """The dimensions of one matrix's scales: a block count per extent its blocks divide."""
    return (*((blocks(rows, block_rows),) if block_rows else ()), *((blocks(cols, block_cols),) if block_cols else ()))


def _covers(block: int, one: str, many: str) -> str:
    return one if block == 1 else f"{block} {many}"


def describe(layout: dict) -> str:
    """What a mode's scales hold, as the checks' messages say it."""
    x_m, x_k, w_n, w_k = (*operand_blocks(layout, "x"), *operand_blocks(layout, "w"))
    x_parts = [*([_covers(x_m, "token", "tokens")] if x_m else []), *([f"{x_k} values of K"] if x_k else [])]
    w_parts = [f"{w_n}x{w_k} weight block"] if w_k else [_covers(w_n, "channel", "channels")] if w_n else []
    x_what = f"one scale per {' and '.join(x_parts)}" if x_parts else "one scale for all of x"
    return f"{x_what}; per expert" + "".join(f" and {part}" for part in w_parts)


def scale_shapes(layout: dict, rows: int, experts: int, n: int, k: int) -> tuple[list[tuple], tuple, str]:
    """(the shapes scale_x may take, the shape scale_w must take, what they hold) of a scaled mode's ``layout``;
    scale_x may end in a dimension of 1 where its blocks span K."""
    x_shape = scale_dims(rows, k, *operand_blocks(layout, "x"))
    x_shapes = [x_shape] if layout["x_block_k"] else [x_shape, (*x_shape, 1)]
    return x_shapes, (experts, *scale_dims(n, k, *operand_blocks(layout, "w"))), describe(layout)


def weight_scales_rank(layout: dict) -> int:
    """The rank of a mode's scale_w: the experts, and a dimension per extent its blocks divide."""
    return 1 + bool(layout["w_block_n"]) + bool(layout["w_block_k"])


def dequantize_experts(q, scale, rows: int, dtype, cols: int = BLOCK):
    """``q`` [..., R, K] in ``dtype`` with scales per block of ``rows`` x ``cols`` values (0: all of that extent;
    ``scale`` in any shape holding its blocks in order), in torch ops as a PyTorch user would (a broadcast over
    whole blocks, else scales expanded to every element): PyTorch's way with scaled FP8 experts, which the vendor
    routes run and benchmarks time, and, in float32, the references of the checks."""
    *lead, r, k = q.shape
    if q.numel() == 0:
        return q.to(dtype)
    size_r, size_k = rows or r, cols or k
    scale = scale.reshape(*lead, blocks(r, rows), blocks(k, cols)).to(dtype)
    if r % size_r == 0 and k % size_k == 0:
        tiles = q.view(*lead, r // size_r, size_r, k // size_k, size_k).to(dtype)
        return (tiles * scale[..., :, None, :, None]).view(q.shape)
    full = scale.repeat_interleave(size_r, dim=-2).repeat_interleave(size_k, dim=-1)[..., :r, :k]
    return q.to(dtype) * full


def dequantize_operands(layout: dict, x, w, scale_x, scale_w, dtype) -> tuple:
    """x and w in ``dtype`` with a mode's scales applied."""
    (x_m, x_k), (w_n, w_k) = operand_blocks(layout, "x"), operand_blocks(layout, "w")
    return dequantize_experts(x, scale_x, x_m, dtype, x_k), dequantize_experts(w, scale_w, w_n, dtype, w_k)


def torch_scaled_grouped_mm(torch, x, w, scale_x, scale_w, offsets, out_dtype):
    """Per-row scales as PyTorch computes them: torch._scaled_grouped_mm, which has bf16 outputs only and needs N
    and K divisible by 16; for the others, x and w dequantized to the output's dtype and torch._grouped_mm."""
    if out_dtype == torch.bfloat16 and w.shape[1] % 16 == 0 and w.shape[2] % 16 == 0:
        return torch._scaled_grouped_mm(x, w.transpose(-2, -1), scale_x.reshape(-1), scale_w, offs=offsets,
                                        out_dtype=out_dtype)
    x = x.to(out_dtype) * scale_x.reshape(-1, 1).to(out_dtype)
    return torch._grouped_mm(x, (w.to(out_dtype) * scale_w[..., None].to(out_dtype)).transpose(-2, -1), offs=offsets)


def row_scales(layout: dict, x, w, scale_x, scale_w) -> tuple:
    """A mode's scales that span K as a scale per token [rows] and per expert channel [experts, N], what
    torch._scaled_grouped_mm takes."""
    rows, (experts, n, _) = x.shape[0], w.shape

    def expand(scale, lead, extent, block):
        per_row = scale.reshape(*lead, blocks(extent, block), 1).repeat_interleave(block or extent, dim=-2)
        return per_row[..., :extent, 0].contiguous()
    return (expand(scale_x, (), rows, layout["x_block_m"]), expand(scale_w, (experts,), n, layout["w_block_n"]))


def _row_scaled_grouped_mm(layout, torch, x, w, scale_x, scale_w, offsets, out_dtype):
    return torch_scaled_grouped_mm(torch, x, w, *row_scales(layout, x, w, scale_x, scale_w), offsets, out_dtype)


def _dequantized_mm(layout, torch, x, w, scale_x, scale_w, offsets, out_dtype):
    x, w = dequantize_operands(layout, x, w, scale_x, scale_w, out_dtype)
    return torch._grouped_mm(x, w.transpose(-2, -1), offs=offsets)


def dequantized_grouped_mm(torch, x, w, scale_x, scale_w, offsets, out_dtype):
    """x and w dequantized to ``out_dtype`` with their 1x128 and 128x128 block scales, then torch._grouped_mm: what
    PyTorch offers for block-scaled FP8 experts, which it has no kernel for."""
    return _dequantized_mm(SCALES["block128"], torch, x, w, scale_x, scale_w, offsets, out_dtype)


def vendor_route(layout: dict) -> Callable:
    """PyTorch's way with a scaled mode's operands, (torch, x, w, scale_x, scale_w, offsets, out_dtype) -> out:
    torch._scaled_grouped_mm where the mode's scales span K (expanded to a scale per token and per expert
    channel), else the operands dequantized for torch._grouped_mm."""
    if layout["x_block_k"] or layout["w_block_k"]:
        return functools.partial(_dequantized_mm, layout)
    return functools.partial(_row_scaled_grouped_mm, layout)

"""What the two FP8 grouped families' entry points share (``scaled_grouped_gemm``: scales per token and per
expert channel; ``block_scaled_grouped_gemm``: scales per 1x128 and 128x128 block): the variant listing, the
checks and the launch through their native functions, which are named alike (``_C.<prefix>_variants``, ...,
``_C.<prefix>_gemm``). Each family's ``api`` makes one ``E4m3GroupedEntry``.

torch is optional: this module never imports it.
"""

from __future__ import annotations

import functools
import sys
from typing import Callable

from ...runtime.configs import KernelConfig, family_variant_id
from ...runtime.device import dtype_codes, stream_getter
from ...runtime.native import _C
from ...runtime.tables import ensure_table, on_variants_added
from .. import NO_DATA
from ..scaled_gemm.api import BLOCK
from .api import (check_expert_operands, check_output, current, dtype_name, one_device, vendor_result,
                  vendor_runs)


class E4m3GroupedEntry:
    """An FP8 grouped family's entry point: its native functions (``prefix``), the family (``entry``: its name,
    its tables' and its entry point's, as wavetune exports it), its listing function, ``scale_shapes``:
    (rows, experts, N, K) -> (the shapes scale_x may take, the shape scale_w must take, what they hold), and
    ``vendor``: (torch, x, w, scale_x, scale_w, offsets, out_dtype) -> the product as PyTorch computes it."""

    def __init__(self, prefix: str, entry: str, listing: str,
                 scale_shapes: Callable[[int, int, int, int], tuple[list[tuple], tuple, str]], vendor: Callable):
        self.prefix, self.entry = prefix, entry
        self.scale_shapes, self.vendor = scale_shapes, vendor
        self.by_id = functools.cache(lambda: {v["id"]: KernelConfig(**v) for v in self.native("variants")()})
        self.compiled_dtypes = functools.cache(lambda: frozenset(c.dtype for c in self.by_id().values()))
        self.resolve = functools.lru_cache(maxsize=256)(
            lambda config: family_variant_id(config, self.by_id(), entry, listing))
        self.workspace_bytes = functools.lru_cache(maxsize=256)(self.native("workspace_bytes"))
        on_variants_added(self.by_id.cache_clear)
        on_variants_added(self.compiled_dtypes.cache_clear)
        on_variants_added(self.workspace_bytes.cache_clear)

    def native(self, name: str) -> Callable:
        return getattr(_C, f"{self.prefix}_{name}")

    def configs(self) -> list[KernelConfig]:
        return list(self.by_id().values())

    def size_error(self, p) -> str:
        """The entry point's checks of a problem's sizes (a ``families.SizeProblem``: M rows over ``groups``
        experts)."""
        return self.native("problem_error")(p.m, p.groups, p.n, p.k, *[NO_DATA] * 6, p.dtype)

    def config_space_hash(self) -> str:
        return self.native("config_space_hash")()

    def check(self, torch, x, w, scale_x, scale_w, offsets, out_dtype, out) -> None:
        """Every check that needs no GPU and no data pointer: types, shapes, dtypes, contiguity."""
        check_expert_operands(torch, self.entry, x, w, offsets, {"scale_x": scale_x, "scale_w": scale_w})
        fp8 = torch.float8_e4m3fn
        if x.dtype != fp8 or w.dtype != fp8:
            raise TypeError(f"x and w must be torch.float8_e4m3fn, got {x.dtype} and {w.dtype}")
        rows, (experts, n, k) = x.shape[0], w.shape
        x_shapes, w_shape, what = self.scale_shapes(rows, experts, n, k)
        if tuple(scale_x.shape) not in x_shapes or scale_x.dtype != torch.float32:
            raise ValueError(f"scale_x must be float32 {' or '.join(map(str, x_shapes))} ({what}), got "
                             f"{scale_x.dtype} {tuple(scale_x.shape)} for x {tuple(x.shape)}")
        if tuple(scale_w.shape) != w_shape or scale_w.dtype != torch.float32:
            raise ValueError(f"scale_w must be float32 {w_shape} ({what}), got {scale_w.dtype} "
                             f"{tuple(scale_w.shape)} for w {tuple(w.shape)}")
        if out_dtype not in (None, *dtype_codes(torch)):
            raise TypeError(f"out_dtype must be torch.bfloat16 or torch.float16, got {out_dtype}")
        tensors = {"x": x, "w": w, "scale_x": scale_x, "scale_w": scale_w, "offsets": offsets}
        check_output(torch, out, out_dtype or torch.bfloat16, (rows, n), tensors)

    def __call__(self, x, w, scale_x, scale_w, offsets, *, out_dtype=None, out=None, config=None):
        torch = sys.modules.get("torch")
        self.check(torch, x, w, scale_x, scale_w, offsets, out_dtype, out)
        variant = self.resolve(config)
        experts, n, k = w.shape
        rows = x.shape[0]
        out_dtype = out_dtype or torch.bfloat16
        tensors = [t for t in (x, w, scale_x, scale_w, offsets, out) if t is not None]
        given_out = out
        if out is None:
            out = torch.empty((rows, n), dtype=out_dtype, device=x.device)
        code = dtype_codes(torch)[out_dtype]
        pointers = (x.data_ptr(), w.data_ptr(), scale_x.data_ptr(), scale_w.data_ptr(), offsets.data_ptr(),
                    out.data_ptr())
        has_work = out.numel() > 0 and k > 0
        error = self.native("problem_error")(rows, experts, n, k, *pointers, code) if has_work else ""
        if error:
            raise ValueError(f"wavetune.{self.entry}: {error}")
        device = one_device(torch, self.entry, tensors)
        if not has_work:
            return out.zero_() if k == 0 else out
        with current(torch, device):
            if variant < 0:
                ensure_table(device, self.entry)
                if vendor_runs(self.entry, self.compiled_dtypes(), dtype_name(torch, out_dtype)):
                    result = self.vendor(torch, x, w, scale_x, scale_w, offsets, out_dtype)
                    return vendor_result(torch, result, given_out, offsets)
            # The workspace as in grouped_gemm: stream-ordered and CUDA-graph safe.
            workspace = torch.empty(self.workspace_bytes(experts), dtype=torch.uint8, device=x.device)
            self.native("gemm")(rows, experts, n, k, *pointers, code, variant, workspace.data_ptr(),
                                workspace.numel(), stream_getter(torch)(device), device)
        return out


def blocks(extent: int) -> int:
    """Scale blocks along an extent: ceil(extent / 128)."""
    return -(-extent // BLOCK)


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

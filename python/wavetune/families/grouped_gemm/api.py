"""Grouped GEMM for mixture-of-experts layers (docs/grouped.md): an entry point per scales mode of the family's
variants (GroupedScales, csrc/include/wavetune/grouped.h), each a ``GroupedEntry`` over the one native launch:
``grouped_gemm`` (16-bit x and w), ``scaled_grouped_gemm`` (e4m3 with scales per row, or per 128-block, which it
hands to ``block_scaled_grouped_gemm``), and the variant listings, ``grouped_configs(scales)`` and its thin names.

torch is optional: this module never imports it. The entry points take torch tensors, so torch is already loaded
whenever a call can succeed.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from ...runtime import invariance
from ...runtime.configs import KernelConfig, family_variant_id, runnable
from ...runtime.device import dtype_codes, stream_getter
from ...runtime.native import _C
from ...runtime.tables import ensure_table, on_variants_added, vendor_serves
from .. import NO_DATA
from . import FAMILY
from .fp8 import SCALES, scale_shapes, vendor_route, weight_scales_rank


def scales_code(scales: str) -> int:
    """A scales mode's enumerator value; a ValueError naming the modes otherwise."""
    if scales not in SCALES:
        raise ValueError(f"unknown grouped scales mode {scales!r} (one of {', '.join(map(repr, SCALES))})")
    return list(SCALES).index(scales)


@functools.cache
def _grouped_by_id() -> dict[int, KernelConfig]:
    return {v["id"]: KernelConfig(**v) for v in _C.grouped_variants()}


@functools.cache
def _scales_by_id() -> dict[int, str]:
    modes = list(SCALES)
    return {i: modes[_C.grouped_variant_scales(i)] for i in _grouped_by_id()}


@functools.lru_cache(maxsize=8)
def _compiled_dtypes(scales: str) -> frozenset[str]:
    return frozenset(c.dtype for c in grouped_configs(scales))


@functools.lru_cache(maxsize=256)
def _workspace_bytes(experts: int) -> int:
    return _C.grouped_workspace_bytes(experts)


# Variants added at run time join the listings and the workspace size (the largest any variant needs).
for _cache in (_grouped_by_id, _scales_by_id, _compiled_dtypes, _workspace_bytes):
    on_variants_added(_cache.cache_clear)


def grouped_configs(scales: str = "") -> list[KernelConfig]:
    """The grouped variants of a scales mode ("": 16-bit x and w; "row", "block128": e4m3 with those scales, their
    ``dtype`` the output's) compiled into this build that run on the current GPU (``runtime.configs.runnable``), by
    id (ids of their own, apart from ``configs()``)."""
    scales_code(scales)
    return runnable(c for i, c in _grouped_by_id().items() if _scales_by_id()[i] == scales)


def grouped_family_configs() -> list[KernelConfig]:
    """Every scales mode's compiled grouped variants that run on the current GPU, by id."""
    return runnable(_grouped_by_id().values())


def scaled_grouped_configs() -> list[KernelConfig]:
    """The FP8 grouped variants with scales per row compiled into this build: ``grouped_configs("row")``.
    ``block_scaled_grouped_configs()`` lists the 128-block ones."""
    return grouped_configs("row")


def block_scaled_grouped_configs() -> list[KernelConfig]:
    """The FP8 grouped variants with 128-block scales compiled into this build: ``grouped_configs("block128")``."""
    return grouped_configs("block128")


def config_space_hash() -> str:
    """The hash of the grouped config space compiled into this build (grouped tables are checked against it)."""
    return _C.grouped_config_space_hash()


def dtype_name(torch, dtype) -> str:
    """A torch dtype the kernels take as the variants name it: "bf16" or "fp16"."""
    return _C.DTYPES[dtype_codes(torch)[dtype]]


def vendor_result(torch, result, out, offsets):
    """The vendor route's ``result`` as the entry point returns it: into ``out`` where one was given, its rows
    from offsets[-1] on left as they were, as the kernels leave them (a mask on the GPU: no host sync)."""
    if out is None:
        return result
    written = torch.arange(out.shape[0], device=out.device).unsqueeze(1) < offsets[-1]
    return torch.where(written, result, out, out=out)


def check_expert_operands(torch, entry: str, x, w, offsets, extra: dict) -> None:
    """The checks every grouped entry point makes of x [rows, K], w [experts, N, K] and offsets [experts]:
    torch tensors (with the ``extra`` ones, by name), their shapes, the offsets' dtype."""
    tensors = {"x": x, "w": w, "offsets": offsets, **extra}
    if torch is None or not all(isinstance(t, torch.Tensor) for t in tensors.values()):
        names, got = list(tensors), ", ".join(type(t).__name__ for t in tensors.values())
        raise TypeError(f"wavetune.{entry} takes torch tensors {', '.join(names[:-1])} and {names[-1]}, got {got}")
    if x.dim() != 2 or w.dim() != 3 or offsets.dim() != 1:
        raise ValueError(f"expected x [rows, K], w [experts, N, K] and offsets [experts], got shapes "
                         f"{tuple(x.shape)}, {tuple(w.shape)} and {tuple(offsets.shape)}")
    experts, n, k = w.shape
    if x.shape[1] != k:
        raise ValueError(f"x {tuple(x.shape)} and w {tuple(w.shape)} differ in K ({x.shape[1]} != {k})")
    if offsets.shape[0] != experts:
        raise ValueError(f"offsets has {offsets.shape[0]} entries for {experts} experts (one cumulative row end each)")
    if offsets.dtype != torch.int32:
        raise TypeError(f"offsets must be int32 (torch._grouped_mm's offs convention), got {offsets.dtype}")


def check_output(torch, out, dtype, shape: tuple, tensors: dict) -> None:
    """``out`` (None or a tensor of ``dtype`` and ``shape``), then every tensor of ``tensors`` contiguous."""
    if out is not None and (not isinstance(out, torch.Tensor) or out.dtype != dtype or tuple(out.shape) != shape):
        got = f"{out.dtype} {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"out must be a {dtype} tensor of shape {shape}, got {got}")
    for name, t in {**tensors, "out": out}.items():
        if t is not None and not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous, got strides {t.stride()}; pass {name}.contiguous()")


def check_scales(torch, layout: dict, x, w, scale_x, scale_w) -> None:
    """The checks of a scaled mode's operands: e4m3 x and w, float32 scales of the mode's shapes."""
    fp8 = torch.float8_e4m3fn
    if x.dtype != fp8 or w.dtype != fp8:
        raise TypeError(f"x and w must be torch.float8_e4m3fn, got {x.dtype} and {w.dtype}")
    x_shapes, w_shape, what = scale_shapes(layout, x.shape[0], *w.shape)
    if tuple(scale_x.shape) not in x_shapes or scale_x.dtype != torch.float32:
        raise ValueError(f"scale_x must be float32 {' or '.join(map(str, x_shapes))} ({what}), got "
                         f"{scale_x.dtype} {tuple(scale_x.shape)} for x {tuple(x.shape)}")
    if tuple(scale_w.shape) != w_shape or scale_w.dtype != torch.float32:
        raise ValueError(f"scale_w must be float32 {w_shape} ({what}), got {scale_w.dtype} "
                         f"{tuple(scale_w.shape)} for w {tuple(w.shape)}")


def one_device(torch, entry: str, tensors: list) -> int:
    """The CUDA device every tensor is on; a ValueError naming them otherwise."""
    device = tensors[0].get_device()
    if not all(t.is_cuda and t.get_device() == device for t in tensors):
        devices = ", ".join(str(t.device) for t in tensors)
        raise ValueError(f"wavetune.{entry}: every tensor must be on one CUDA device, got {devices}")
    return device


def current(torch, device: int):
    """A context making ``device`` torch's current CUDA device (nothing to do when it is)."""
    return contextlib.nullcontext() if device == torch.cuda.current_device() else torch.cuda.device(device)


def grouped_mm(torch, x, w, scale_x, scale_w, offsets, out_dtype):
    """16-bit operands as PyTorch computes them: torch._grouped_mm."""
    return torch._grouped_mm(x, w.transpose(-2, -1), offs=offsets)


class GroupedEntry:
    """A scales mode's entry point: its checks, variants and launch. ``entry`` and ``listing``: the public names
    of its entry point and variant listing (messages); ``vendor``: (torch, x, w, scale_x, scale_w, offsets,
    out_dtype) -> the product as PyTorch computes it, what a call runs while the mode's variants compile (of
    the mode's layout, ``fp8.vendor_route``)."""

    def __init__(self, scales: str, entry: str, listing: str):
        self.scales, self.entry = scales, entry
        self.layout, self.code = SCALES[scales], scales_code(scales)
        self.vendor = vendor_route(self.layout) if self.layout["e4m3"] else grouped_mm
        what = entry if self.layout["e4m3"] else "grouped"  # how messages name its variants
        self.resolve = functools.lru_cache(maxsize=256)(
            lambda config: family_variant_id(config, {c.id: c for c in grouped_configs(scales)}, what, listing))
        on_variants_added(self.resolve.cache_clear)

    def check(self, torch, x, w, scale_x, scale_w, offsets, out_dtype, out) -> None:
        """Every check that needs no GPU and no data pointer: types, shapes, dtypes, contiguity."""
        scaled = self.layout["e4m3"]
        scales = {"scale_x": scale_x, "scale_w": scale_w} if scaled else {}
        check_expert_operands(torch, self.entry, x, w, offsets, scales)
        if scaled:
            check_scales(torch, self.layout, x, w, scale_x, scale_w)
            if out_dtype not in (None, *dtype_codes(torch)):
                raise TypeError(f"out_dtype must be torch.bfloat16 or torch.float16, got {out_dtype}")
        elif x.dtype not in dtype_codes(torch) or w.dtype != x.dtype:
            raise TypeError(f"x and w must both be bfloat16 or both float16, got {x.dtype} and {w.dtype}")
        tensors = {"x": x, "w": w, **scales, "offsets": offsets}
        check_output(torch, out, self.out_dtype(torch, x, out_dtype), (x.shape[0], w.shape[1]), tensors)

    def out_dtype(self, torch, x, out_dtype):
        """The output's dtype: the operands' without scales, else ``out_dtype`` (default bf16)."""
        return (out_dtype or torch.bfloat16) if self.layout["e4m3"] else x.dtype

    def size_error(self, p) -> str:
        """The entry point's checks of a problem's sizes (a ``families.SizeProblem``: M rows over ``groups``
        experts)."""
        return _C.grouped_problem_error(p.m, p.groups, p.n, p.k, *[NO_DATA] * 4, p.dtype, self.code, NO_DATA, NO_DATA)

    def __call__(self, x, w, scale_x, scale_w, offsets, *, out_dtype=None, out=None, config=None,
                 batch_invariant=None):
        torch = sys.modules.get("torch")
        self.check(torch, x, w, scale_x, scale_w, offsets, out_dtype, out)
        level = invariance.requested(batch_invariant)
        variant = self.resolve(config)
        experts, n, k = w.shape
        rows = x.shape[0]
        out_dtype = self.out_dtype(torch, x, out_dtype)
        tensors = [t for t in (x, w, scale_x, scale_w, offsets, out) if t is not None]
        given_out = out
        if out is None:
            out = torch.empty((rows, n), dtype=out_dtype, device=x.device)
        code = dtype_codes(torch)[out_dtype]
        # The native problem past its sizes: data pointers, the output's dtype, the scales mode and its pointers.
        problem = (x.data_ptr(), w.data_ptr(), offsets.data_ptr(), out.data_ptr(), code, self.code,
                   *((scale_x.data_ptr(), scale_w.data_ptr()) if self.layout["e4m3"] else (0, 0)))
        has_work = out.numel() > 0 and experts > 0 and k > 0
        error = _C.grouped_problem_error(rows, experts, n, k, *problem) if has_work else ""
        if error:
            raise ValueError(f"wavetune.{self.entry}: {error}")
        device = one_device(torch, self.entry, tensors)
        if not has_work:
            return out.zero_() if k == 0 and experts > 0 else out
        with current(torch, device):
            if variant < 0:
                ensure_table(device, FAMILY.name, self.scales)
                if self.vendor_runs(dtype_name(torch, out_dtype)):
                    result = self.vendor(torch, x, w, scale_x, scale_w, offsets, out_dtype)
                    return vendor_result(torch, result, given_out, offsets)
            # NOTES: the workspace comes from torch's caching allocator, so it is stream-ordered and CUDA-graph
            # safe (a capture gets memory from the graph's pool); it holds the per-expert arguments the launch
            # writes on the GPU from the offsets, and CUTLASS's TMA descriptors.
            workspace = torch.empty(_workspace_bytes(experts), dtype=torch.uint8, device=x.device)
            _C.grouped_gemm(rows, experts, n, k, *problem, variant, workspace.data_ptr(), workspace.numel(),
                            stream_getter(torch)(device), device, level)
        return out

    def vendor_runs(self, dtype: str) -> bool:
        """Whether a call that the mode's table would choose for runs the vendor candidate (PyTorch's grouped
        operators) instead: while the mode's variants compile in the background, and where no compiled variant
        that runs on the GPU takes ``dtype``. The grouped tables price no vendor candidate, so a table bound to a few compiled
        variants could choose one slower than PyTorch's own."""
        return vendor_serves(FAMILY.name, self.scales) or dtype not in _compiled_dtypes(self.scales)


# The public names of each scales mode's entry point and listing. NOTES: a mode without names of its own is
# reached through scaled_grouped_gemm (by its weight scales' rank, scales_of) and listed by grouped_configs(scales).
_NAMED = {"": ("grouped_gemm", "grouped_configs"), "row": ("scaled_grouped_gemm", "scaled_grouped_configs"),
          "block128": ("block_scaled_grouped_gemm", "block_scaled_grouped_configs")}
ENTRIES = {scales: GroupedEntry(scales, *_NAMED.get(scales, ("scaled_grouped_gemm", "grouped_configs")))
           for scales in SCALES}


def scales_of(scale_w) -> str:
    """The scales mode of FP8 operands, by their weight scales' rank: the first scaled mode whose scale_w has it
    ([experts]: "tensor"; [experts, N]: "row"; [experts, N/128, K/128]: "block128"), else the first scaled mode
    (whose checks say what is wrong)."""
    rank = getattr(scale_w, "dim", lambda: 0)()
    scaled = [name for name, layout in SCALES.items() if layout["e4m3"]]
    return next((name for name in scaled if weight_scales_rank(SCALES[name]) == rank), scaled[0])


def check_shapes(torch, x, w, offsets, out) -> None:
    """``grouped_gemm``'s checks that need no GPU and no data pointer: types, shapes, dtypes, contiguity."""
    ENTRIES[""].check(torch, x, w, None, None, offsets, None, out)


def check_operands(torch, x, w, scale_x, scale_w, offsets, out_dtype, out) -> None:
    """``scaled_grouped_gemm``'s checks that need no GPU and no data pointer (of the mode its scales say)."""
    ENTRIES[scales_of(scale_w)].check(torch, x, w, scale_x, scale_w, offsets, out_dtype, out)


def grouped_gemm(x, w, offsets, *, out=None, config=None, batch_invariant=None):
    """Mixture-of-experts grouped GEMM: ``out[rows of e] = x[rows of e] @ w[e].T`` for every expert e.

    x: [rows, K] CUDA tensor, bf16 or fp16, its rows sorted by expert (tokens times top-k in an MoE layer).
    w: [experts, N, K] of the same dtype: one nn.Linear weight per expert.
    offsets: int32 [experts] on the same device, the cumulative row ends (torch._grouped_mm's ``offs``):
        expert e owns rows offsets[e-1] to offsets[e] (from 0 for e = 0); experts may own no rows. Rows
        from offsets[-1] on are not written; offsets out of order or past the rows give experts no rows.
    out: optional [rows, N] tensor to write (same dtype and device, contiguous).
    config: force a grouped variant (id or name, ``grouped_configs()``); default: the choice of the GPU's
        grouped table (``tables/<gpu>.grouped_gemm.wtt``, or $WAVETUNE_GROUPED_TABLE), else of the built-in
        heuristic, from the sizes alone (rows, experts, N, K), which the host knows: the call never waits
        for the GPU to learn the rows per expert, and CUDA-graph capture works.
    batch_invariant: True, False or a level name: choose only variants whose rows do not depend on the tokens
        per expert (docs/torch.md, "Batch-invariant mode"); None: the process-wide setting.

    Runs on the current torch stream of x's device. K and N must be multiples of 8 (the kernels load
    with TMA; K = 0 writes zeros); all tensors contiguous.
    """
    return ENTRIES[""](x, w, None, None, offsets, out=out, config=config, batch_invariant=batch_invariant)


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
    config: force a variant (id or name, ``scaled_grouped_configs()``); default: the choice of the GPU's grouped
        table of row scales (``tables/<gpu>.grouped_gemm.row.wtt``, or $WAVETUNE_GROUPED_TABLE_ROW), else of the
        grouped family's built-in heuristic for 1-byte operands, from the sizes alone (the call never waits for
        the GPU to learn the rows per expert, and CUDA-graph capture works).

    The same product as ``torch._scaled_grouped_mm(x, w.transpose(-2, -1), scale_x, scale_w, offs=offsets,
    out_dtype=torch.bfloat16)``. Runs on the current torch stream of x's device. K must be a multiple of 16
    and N of 8; all tensors contiguous.
    """
    return ENTRIES[scales_of(scale_w)](x, w, scale_x, scale_w, offsets, out_dtype=out_dtype, out=out, config=config)


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
        grouped table of block128 scales (``tables/<gpu>.grouped_gemm.block128.wtt``, or
        $WAVETUNE_GROUPED_TABLE_BLOCK128), else of the grouped family's built-in heuristic for 1-byte operands,
        from the sizes alone (no wait for the GPU; CUDA-graph capture works).

    Runs on the current torch stream of x's device. K must be a multiple of 16 and N of 8; all tensors
    contiguous.
    """
    return ENTRIES["block128"](x, w, scale_x, scale_w, offsets, out_dtype=out_dtype, out=out, config=config)


def size_error(p) -> str:
    """The checks of a problem's sizes (a ``families.SizeProblem``: M rows over ``groups`` experts) by the entry
    point of its scales mode."""
    return ENTRIES[p.scales].size_error(p)

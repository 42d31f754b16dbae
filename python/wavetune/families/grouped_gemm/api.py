"""Grouped GEMM for mixture-of-experts layers: ``grouped_gemm`` and the grouped variant listing
(docs/grouped.md).

torch is optional: this module never imports it. ``grouped_gemm`` takes torch tensors, so torch is
already loaded whenever a call can succeed.
"""

from __future__ import annotations

import contextlib
import functools
import sys

from ...runtime.configs import KernelConfig, family_variant_id
from ...runtime.device import dtype_codes, stream_getter
from ...runtime.native import _C
from ...runtime.tables import ensure_table, on_variants_added, vendor_serves
from .. import NO_DATA


def grouped_configs() -> list[KernelConfig]:
    """The grouped variants compiled into this build, by id (ids of their own, apart from ``configs()``)."""
    return list(_grouped_by_id().values())


def config_space_hash() -> str:
    """The hash of the grouped config space compiled into this build (grouped tables are checked against it)."""
    return _C.grouped_config_space_hash()


@functools.cache
def _grouped_by_id() -> dict[int, KernelConfig]:
    return {v["id"]: KernelConfig(**v) for v in _C.grouped_variants()}


@functools.cache
def _compiled_dtypes() -> frozenset[str]:
    return frozenset(c.dtype for c in _grouped_by_id().values())


@functools.lru_cache(maxsize=256)
def _resolve(config) -> int:
    """The grouped variant id for a ``config`` argument; -1 for the built-in heuristic's choice."""
    return family_variant_id(config, _grouped_by_id(), "grouped", "grouped_configs")


@functools.lru_cache(maxsize=256)
def _workspace_bytes(experts: int) -> int:
    return _C.grouped_workspace_bytes(experts)


# Variants added at run time join the listing and the workspace size (the largest any variant needs).
on_variants_added(_grouped_by_id.cache_clear)
on_variants_added(_compiled_dtypes.cache_clear)
on_variants_added(_workspace_bytes.cache_clear)


def dtype_name(torch, dtype) -> str:
    """A torch dtype the kernels take as the variants name it: "bf16" or "fp16"."""
    return _C.DTYPES[dtype_codes(torch)[dtype]]


def vendor_runs(family: str, compiled_dtypes: frozenset[str], dtype: str) -> bool:
    """Whether a grouped family's call that its table would choose for runs the family's vendor candidate
    (PyTorch's grouped operators) instead: while the family's variants compile in the background, and where
    no compiled variant takes ``dtype``. The tables of the grouped families price no vendor candidate, so a
    table bound to a few compiled variants could choose one slower than PyTorch's own."""
    return vendor_serves(family) or dtype not in compiled_dtypes


def vendor_result(torch, result, out, offsets):
    """The vendor route's ``result`` as the entry point returns it: into ``out`` where one was given, its rows
    from offsets[-1] on left as they were, as the kernels leave them (a mask on the GPU: no host sync)."""
    if out is None:
        return result
    written = torch.arange(out.shape[0], device=out.device).unsqueeze(1) < offsets[-1]
    return torch.where(written, result, out, out=out)


def check_expert_operands(torch, entry: str, x, w, offsets, extra: dict) -> None:
    """The checks both grouped entry points make of x [rows, K], w [experts, N, K] and offsets [experts]:
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


def check_shapes(torch, x, w, offsets, out) -> None:
    """Every check that needs no GPU and no data pointer: types, shapes, dtypes, contiguity."""
    check_expert_operands(torch, "grouped_gemm", x, w, offsets, {})
    if x.dtype not in dtype_codes(torch) or w.dtype != x.dtype:
        raise TypeError(f"x and w must both be bfloat16 or both float16, got {x.dtype} and {w.dtype}")
    check_output(torch, out, x.dtype, (x.shape[0], w.shape[1]), {"x": x, "w": w, "offsets": offsets})


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


def grouped_gemm(x, w, offsets, *, out=None, config=None):
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

    Runs on the current torch stream of x's device. K and N must be multiples of 8 (the kernels load
    with TMA; K = 0 writes zeros); all tensors contiguous.
    """
    torch = sys.modules.get("torch")
    check_shapes(torch, x, w, offsets, out)
    variant = _resolve(config)
    experts, n, k = w.shape
    rows = x.shape[0]
    tensors = [t for t in (x, w, offsets, out) if t is not None]
    given_out = out
    if out is None:
        out = x.new_empty((rows, n))
    dtype_code = dtype_codes(torch)[x.dtype]
    pointers = (x.data_ptr(), w.data_ptr(), offsets.data_ptr(), out.data_ptr())
    has_work = out.numel() > 0 and experts > 0 and k > 0
    error = _C.grouped_problem_error(rows, experts, n, k, *pointers, dtype_code) if has_work else ""
    if error:
        raise ValueError(f"wavetune.grouped_gemm: {error}")
    device = one_device(torch, "grouped_gemm", tensors)
    if not has_work:
        return out.zero_() if k == 0 and experts > 0 else out
    with current(torch, device):
        if variant < 0:
            ensure_table(device, "grouped_gemm")
            if vendor_runs("grouped_gemm", _compiled_dtypes(), dtype_name(torch, x.dtype)):
                return vendor_result(torch, torch._grouped_mm(x, w.transpose(-2, -1), offs=offsets), given_out,
                                     offsets)
        # NOTES: the workspace comes from torch's caching allocator, so it is stream-ordered and CUDA-graph
        # safe (a capture gets memory from the graph's pool); it holds the per-expert arguments the launch
        # writes on the GPU from the offsets, and CUTLASS's TMA descriptors.
        workspace = torch.empty(_workspace_bytes(experts), dtype=torch.uint8, device=x.device)
        _C.grouped_gemm(rows, experts, n, k, *pointers, dtype_code, variant, workspace.data_ptr(),
                        workspace.numel(), stream_getter(torch)(device), device)
    return out


def size_error(p) -> str:
    """``grouped_gemm``'s checks of a problem's sizes (a ``families.SizeProblem``: M rows over ``groups`` experts)."""
    return _C.grouped_problem_error(p.m, p.groups, p.n, p.k, *[NO_DATA] * 4, p.dtype)

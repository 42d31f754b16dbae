"""FP8 grouped GEMM for mixture-of-experts layers: ``scaled_grouped_gemm`` and its variant listing
(docs/grouped.md, "FP8").

torch is optional: this module never imports it. ``scaled_grouped_gemm`` takes torch tensors, so torch is
already loaded whenever a call can succeed.
"""

from __future__ import annotations

import functools
import sys

from ...runtime.configs import KernelConfig, family_variant_id
from ...runtime.device import dtype_codes, stream_getter
from ...runtime.native import _C
from ...runtime.tables import ensure_table, on_variants_added
from ..grouped_gemm.api import check_expert_operands, check_output, current, one_device


def scaled_grouped_configs() -> list[KernelConfig]:
    """The FP8 grouped variants compiled into this build, by id (ids of their own; ``dtype`` is the output's)."""
    return list(_by_id().values())


def config_space_hash() -> str:
    """The hash of the FP8 grouped config space compiled into this build."""
    return _C.scaled_grouped_config_space_hash()


@functools.cache
def _by_id() -> dict[int, KernelConfig]:
    return {v["id"]: KernelConfig(**v) for v in _C.scaled_grouped_variants()}


@functools.lru_cache(maxsize=256)
def _resolve(config) -> int:
    return family_variant_id(config, _by_id(), "scaled_grouped_gemm", "scaled_grouped_configs")


@functools.lru_cache(maxsize=256)
def _workspace_bytes(experts: int) -> int:
    return _C.scaled_grouped_workspace_bytes(experts)


on_variants_added(_by_id.cache_clear)
on_variants_added(_workspace_bytes.cache_clear)


def check_operands(torch, x, w, scale_x, scale_w, offsets, out_dtype, out) -> None:
    """Every check that needs no GPU and no data pointer: types, shapes, dtypes, contiguity."""
    check_expert_operands(torch, "scaled_grouped_gemm", x, w, offsets, {"scale_x": scale_x, "scale_w": scale_w})
    fp8 = torch.float8_e4m3fn
    if x.dtype != fp8 or w.dtype != fp8:
        raise TypeError(f"x and w must be torch.float8_e4m3fn, got {x.dtype} and {w.dtype}")
    rows, (experts, n, _) = x.shape[0], w.shape
    if tuple(scale_x.shape) not in ((rows,), (rows, 1)) or scale_x.dtype != torch.float32:
        raise ValueError(f"scale_x must be float32 [rows] or [rows, 1] (one scale per token), got {scale_x.dtype} "
                         f"{tuple(scale_x.shape)} for {rows} rows")
    if tuple(scale_w.shape) != (experts, n) or scale_w.dtype != torch.float32:
        raise ValueError(f"scale_w must be float32 [experts, N] = {(experts, n)} (one scale per expert and output "
                         f"channel), got {scale_w.dtype} {tuple(scale_w.shape)}")
    if out_dtype not in (None, *dtype_codes(torch)):
        raise TypeError(f"out_dtype must be torch.bfloat16 or torch.float16, got {out_dtype}")
    tensors = {"x": x, "w": w, "scale_x": scale_x, "scale_w": scale_w, "offsets": offsets}
    check_output(torch, out, out_dtype or torch.bfloat16, (rows, n), tensors)


def scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, *, out_dtype=None, out=None, config=None):
    """FP8 mixture-of-experts grouped GEMM: ``out[rows of e] = scale_x[rows of e] * (x[rows of e] @ w[e].T) *
    scale_w[e]`` for every expert e, accumulated in float32.

    x: [rows, K] torch.float8_e4m3fn, its rows sorted by expert (``quantize_fp8`` makes it and its scales).
    w: [experts, N, K] torch.float8_e4m3fn: one nn.Linear weight per expert.
    scale_x: float32 [rows] or [rows, 1], per token; scale_w: float32 [experts, N], per expert and channel.
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
    torch = sys.modules.get("torch")
    check_operands(torch, x, w, scale_x, scale_w, offsets, out_dtype, out)
    variant = _resolve(config)
    experts, n, k = w.shape
    rows = x.shape[0]
    out_dtype = out_dtype or torch.bfloat16
    tensors = [t for t in (x, w, scale_x, scale_w, offsets, out) if t is not None]
    if out is None:
        out = torch.empty((rows, n), dtype=out_dtype, device=x.device)
    code = dtype_codes(torch)[out_dtype]
    pointers = (x.data_ptr(), w.data_ptr(), scale_x.data_ptr(), scale_w.data_ptr(), offsets.data_ptr(), out.data_ptr())
    has_work = out.numel() > 0 and k > 0
    error = _C.scaled_grouped_problem_error(rows, experts, n, k, *pointers, code) if has_work else ""
    if error:
        raise ValueError(f"wavetune.scaled_grouped_gemm: {error}")
    device = one_device(torch, "scaled_grouped_gemm", tensors)
    if not has_work:
        return out.zero_() if k == 0 else out
    with current(torch, device):
        if variant < 0:
            ensure_table(device, "scaled_grouped_gemm")
        # The workspace as in grouped_gemm: stream-ordered and CUDA-graph safe.
        workspace = torch.empty(_workspace_bytes(experts), dtype=torch.uint8, device=x.device)
        _C.scaled_grouped_gemm(rows, experts, n, k, *pointers, code, variant, workspace.data_ptr(), workspace.numel(),
                               stream_getter(torch)(device), device)
    return out

"""FP8 scaled GEMM: ``scaled_gemm``, ``quantize_fp8`` and the variant listing (docs/scaled_gemm.md).

torch is optional: this module never imports it. Both entry points take torch tensors, so torch is
already loaded whenever a call can succeed.
"""

from __future__ import annotations

import functools
import sys

from ...runtime import invariance
from ...runtime.configs import KernelConfig, family_variant_id, runnable
from ...runtime.device import dtype_codes, stream_getter
from ...runtime.native import _C
from ...runtime.tables import ensure_table, on_variants_added


def scaled_gemm_configs() -> list[KernelConfig]:
    """The scaled GEMM variants compiled into this build that run on the current GPU (``runtime.configs.runnable``),
    by id (ids of their own; ``dtype`` is the output's)."""
    return runnable(_by_id().values())


def config_space_hash() -> str:
    """Identifies the compiled scaled GEMM catalog."""
    return _C.scaled_gemm_config_space_hash()


@functools.cache
def _by_id() -> dict[int, KernelConfig]:
    return {v["id"]: KernelConfig(**v) for v in _C.scaled_gemm_variants()}


@functools.cache
def _needs_workspace(variant: int) -> bool:
    """Whether the variant is the cuBLASLt candidate, the only kind that needs a workspace."""
    return _by_id()[variant].schedule == "cublas"


@functools.lru_cache(maxsize=256)
def _resolve(config) -> int:
    return family_variant_id(config, _by_id(), "scaled_gemm", "scaled_gemm_configs")


BLOCK = 128  # the extent of a block scale along K (and along N for the weights)
TENSOR, ROW, BLOCK128 = (_C.scale_kinds().index(kind) for kind in ("tensor", "row", "block128"))  # ScaleKind codes


@functools.lru_cache(maxsize=4096)
def _choice(device: int, m: int, n: int, k: int, code: int, kind_a: int, kind_b: int, bias: bool) -> int:
    """The scaled GEMM's choose (scaled_gemm.h) on ``device`` (the current one), once per problem: the C++
    choice checks every variant."""
    return _C.scaled_gemm_chosen_variant(m, n, k, code, kind_a, kind_b, bias)


# Variants compiled at run time join the listing and the choice.
on_variants_added(_by_id.cache_clear)
on_variants_added(_choice.cache_clear)


def _check_float32(torch, scale, name: str) -> None:
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32:
        got = scale.dtype if isinstance(scale, torch.Tensor) else type(scale).__name__
        raise TypeError(f"{name} must be a float32 tensor (torch._scaled_mm's convention), got {got}")


def _scale_kind(torch, scale, row_shape: tuple, block_shape: tuple | None, name: str) -> int:
    """The ScaleKind of ``scale``: one value, ``row_shape`` or, with block scales, ``block_shape``; errors name
    the problem."""
    _check_float32(torch, scale, name)
    if block_shape is not None:
        if tuple(scale.shape) != block_shape or not scale.is_contiguous():
            raise ValueError(f"with block_scales, {name} must be a contiguous {block_shape} tensor (one scale per "
                             f"128-block), got shape {tuple(scale.shape)}")
        return BLOCK128
    if scale.numel() == 1:
        return TENSOR
    if tuple(scale.shape) != row_shape or not scale.is_contiguous():
        raise ValueError(f"{name} must hold one value (per tensor) or be a contiguous {row_shape} tensor (per row), "
                         f"got shape {tuple(scale.shape)}")
    return ROW


def check_operands(torch, a, b, scale_a, scale_b, out_dtype=None, bias=None, out=None,
                   block_scales: bool = False) -> tuple[int, int]:
    """Every check that needs no GPU and no data pointer; returns each scale's ScaleKind code."""
    if torch is None or not all(isinstance(t, torch.Tensor) for t in (a, b)):
        raise TypeError(f"wavetune.scaled_gemm takes torch tensors a and b, got {type(a).__name__} and "
                        f"{type(b).__name__}")
    fp8 = getattr(torch, "float8_e4m3fn", None)
    if a.dtype != fp8 or b.dtype != fp8:
        raise TypeError(f"a and b must be torch.float8_e4m3fn (quantize with wavetune.quantize_fp8), got {a.dtype} "
                        f"and {b.dtype}")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"expected a [M, K] and b [K, N], got {tuple(a.shape)} and {tuple(b.shape)}")
    m, k = a.shape
    n = b.shape[1]
    if a.stride(1) != 1 or (m > 1 and a.stride(0) < k):
        raise ValueError(f"a must be row-major, got strides {a.stride()}; pass a.contiguous()")
    if b.stride(0) != 1 or (n > 1 and b.stride(1) < k):
        raise ValueError(f"b must be column-major, as torch._scaled_mm takes it (b = weight.t() for an nn.Linear "
                         f"weight [N, K]), got strides {b.stride()}")
    out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
    if out_dtype not in dtype_codes(torch):
        raise TypeError(f"out_dtype must be torch.bfloat16 or torch.float16, got {out_dtype}")
    if bias is not None and (not isinstance(bias, torch.Tensor) or bias.dtype != out_dtype
                             or tuple(bias.shape) != (n,) or not bias.is_contiguous()):
        got = f"{bias.dtype} {tuple(bias.shape)}" if isinstance(bias, torch.Tensor) else type(bias).__name__
        raise ValueError(f"bias must be a contiguous {out_dtype} tensor of shape ({n},), got {got}")
    if out is not None and (not isinstance(out, torch.Tensor) or out.dtype != out_dtype or tuple(out.shape) != (m, n)
                            or out.stride(1) != 1):
        got = (f"{out.dtype} {tuple(out.shape)} strides {out.stride()}" if isinstance(out, torch.Tensor)
               else type(out).__name__)
        raise ValueError(f"out must be a row-major {out_dtype} tensor of shape ({m}, {n}), got {got}")
    blocks = -(-k // BLOCK)
    return (_scale_kind(torch, scale_a, (m, 1), (m, blocks) if block_scales else None, "scale_a"),
            _scale_kind(torch, scale_b, (1, n), (-(-n // BLOCK), blocks) if block_scales else None, "scale_b"))


def scaled_gemm(a, b, scale_a, scale_b, *, out_dtype=None, bias=None, out=None, block_scales: bool = False,
                config=None, splits: int = 0):
    """FP8 GEMM with scales: ``out = (a * scale_a) @ (b * scale_b) (+ bias)``, as ``torch._scaled_mm``.

    a: [M, K] torch.float8_e4m3fn, row-major (activations; ``quantize_fp8`` makes them from bf16/fp16).
    b: [K, N] torch.float8_e4m3fn, column-major: ``weight.t()`` for an nn.Linear weight [N, K] in e4m3.
    scale_a: float32, one value (per tensor) or [M, 1] (per token); scale_b: one value or [1, N] (per
        output channel). Any mix of the two kinds.
    block_scales: scales per 128-block instead, as block-quantized checkpoints (DeepSeek-V3, Qwen3 FP8) hold
        them: scale_a [M, ceil(K/128)] (``quantize_fp8(x, group_size=128)``), scale_b [ceil(N/128),
        ceil(K/128)] (the weight's ``weight_scale_inv``).
    out_dtype: torch.bfloat16 (default) or torch.float16; bias: optional [N] in out_dtype; out: optional
        [M, N] row-major output.
    config, splits: force a variant (id or name, ``scaled_gemm_configs()``) and its K splits (0: its own).
        Default: the variant a wave model of the launch picks from the sizes.

    Per-token or per-channel scales: up to ``wavetune._C.scaled_gemm_max_tokens()`` tokens (64) run wavetune's
    kernels, which read the weights once at the speed of HBM: CUTLASS FP8 kernels with the tokens along a narrow
    tile, picked by a wave model of the launch, or for up to 16 tokens on a layer too narrow to fill the GPU with
    them, split-K decode kernels. More tokens, or per-tensor scales on both sides, run cuBLASLt (the kernels
    ``torch._scaled_mm`` runs; with per-row scales and a bf16 output up to K / 8 tokens its faster per-tensor
    kernel and a second pass applying the scales; docs/scaled_gemm.md), or ``torch._scaled_mm`` itself (the same
    arguments, into ``out``) where cuBLASLt is absent or refuses the problem. Block
    scales choose the same way among block-scaled CUTLASS and decode kernels (in a build without the CUTLASS
    ones, the decode kernels up to ``scaled_gemm_max_tokens(True)`` tokens, 16); beyond them cuBLASLt's
    block-scaled kernels where it has one, else unswapped block-scaled CUTLASS kernels (bf16 output), else the
    grouped family's CUTLASS kernel with block128 scales and one expert
    (``block_scaled_grouped_gemm``; a dequantized bf16/fp16 GEMM in a build without its variants). K must be a
    multiple of 16.
    """
    torch = sys.modules.get("torch")
    kind_a, kind_b = check_operands(torch, a, b, scale_a, scale_b, out_dtype, bias, out, block_scales)
    out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
    m, k = a.shape
    n = b.shape[1]
    tensors = [t for t in (a, b, scale_a, scale_b, bias, out) if t is not None]
    device = a.get_device()
    if not all(t.is_cuda and t.get_device() == device for t in tensors):
        raise ValueError(f"a, b, the scales, bias and out must be on one CUDA device, got "
                         f"{', '.join(str(t.device) for t in tensors)}")
    variant = _resolve(config)
    if out is None:
        out = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if m == 0 or n == 0 or k == 0:
        return out.zero_() if k == 0 else out
    if device != torch.cuda.current_device():
        with torch.cuda.device(device):
            return scaled_gemm(a, b, scale_a, scale_b, out_dtype=out_dtype, bias=bias, out=out,
                               block_scales=block_scales, config=config, splits=splits)
    code = dtype_codes(torch)[out_dtype]
    if variant < 0 and invariance.batch_invariant_level() != "off":
        raise ValueError("wavetune.scaled_gemm has no batch-invariant choice: it moves between its decode kernels, "
                         "CUTLASS and cuBLASLt by M (force one with config=, or leave batch-invariant mode)")
    if variant < 0:
        ensure_table(device, "scaled_gemm")  # no table: the built-in model's variants compile in the background
        variant = _choice(device, m, n, k, code, kind_a, kind_b, bias is not None)
    if variant < 0 and block_scales:
        return _block_scaled_past_decode(torch, a, b, scale_a, scale_b, bias, out)
    if variant < 0 and n % 16:  # torch._scaled_mm takes N in multiples of 16 only
        return _dequantized_gemm(torch, a, b, scale_a, scale_b.reshape(-1, 1) if kind_b == ROW else scale_b, bias,
                                 out)
    if variant < 0:
        return _torch_scaled_mm(torch, a, b, scale_a, scale_b, ROW in (kind_a, kind_b), out_dtype, bias, out)
    args = (m, n, k, a.data_ptr(), a.stride(0) if m > 1 else k, b.data_ptr(), b.stride(1) if n > 1 else k,
            out.data_ptr(), out.stride(0) if m > 1 else n, code, scale_a.data_ptr(), kind_a, scale_b.data_ptr(),
            kind_b, bias.data_ptr() if bias is not None else 0)
    error = _C.scaled_gemm_problem_error(*args)
    if error:
        raise ValueError(f"wavetune.scaled_gemm: {error}")
    # NOTES: only the cuBLASLt candidate takes a workspace; it comes from torch's caching allocator on the current
    # stream (stream-ordered; under CUDA-graph capture from the graph's pool, kept for its replays).
    workspace_bytes = _C.scaled_gemm_workspace_bytes(*args, variant, splits) if _needs_workspace(variant) else 0
    workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=out.device) if workspace_bytes else None
    _C.scaled_gemm(*args, variant, splits, 0 if workspace is None else workspace.data_ptr(), workspace_bytes,
                   stream_getter(torch)(device))
    return out


def _torch_scaled_mm(torch, a, b, scale_a, scale_b, rowwise, out_dtype, bias, out):
    """Where the variants are not chosen: torch._scaled_mm into ``out``, with both scales per row if either is (what it
    takes)."""
    if rowwise:
        scale_a = scale_a.reshape(-1, 1).expand(a.shape[0], 1).contiguous()
        scale_b = scale_b.reshape(1, -1).expand(1, b.shape[1]).contiguous()
    else:
        scale_a, scale_b = scale_a.reshape(()), scale_b.reshape(())
    return torch._scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype, out=out)


def dequantize_fp8(q, scale, *, dtype=None):
    """An e4m3 matrix ``q`` [rows, cols] times its fp32 scales, in ``dtype`` (default bf16), computed in
    ``dtype``: one scale, one per row ([rows, 1]), or one per 128-block of a row ([rows, ceil(cols/128)],
    activations) or of the matrix ([ceil(rows/128), ceil(cols/128)], weights)."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(q, torch.Tensor) or q.dtype != torch.float8_e4m3fn or q.dim() != 2:
        got = f"{q.dtype} {tuple(q.shape)}" if torch is not None and isinstance(q, torch.Tensor) else type(q).__name__
        raise TypeError(f"dequantize_fp8 takes a 2-D torch.float8_e4m3fn tensor, got {got}")
    _check_float32(torch, scale, "scale")
    dtype = torch.bfloat16 if dtype is None else dtype
    rows, cols = q.shape
    row_blocks, col_blocks = -(-rows // BLOCK), -(-cols // BLOCK)
    shape = tuple(scale.shape)
    if scale.numel() > 1 and shape != (rows, 1):
        if shape == (row_blocks, col_blocks):
            scale = scale.repeat_interleave(BLOCK, dim=0)[:rows]
        elif shape != (rows, col_blocks):
            raise ValueError(f"scale must hold one value, or be ({rows}, 1) (per row), ({rows}, {col_blocks}) (per "
                             f"128-group of a row) or ({row_blocks}, {col_blocks}) (per 128x128 block) for q of "
                             f"shape {tuple(q.shape)}, got {shape}")
        scale = scale.repeat_interleave(BLOCK, dim=1)[:, :cols]
    return q.to(dtype) * scale.to(dtype)


def _block_scaled_past_decode(torch, a, b, scale_a, scale_b, bias, out):
    """Block scales beyond the tokens the decode variants take: the block-scaled grouped GEMM's CUTLASS kernel
    with one expert (the weight [N, K] as experts [1, N, K]), where one of its variants writes ``out``'s dtype
    and the operands are laid out as it reads them; else both operands dequantized and torch.matmul."""
    from ..grouped_gemm.api import block_scaled_grouped_configs, block_scaled_grouped_gemm

    dtype = {torch.bfloat16: "bf16", torch.float16: "fp16"}[out.dtype]
    w = b.t().unsqueeze(0)
    if not (any(c.dtype == dtype for c in block_scaled_grouped_configs()) and w.is_contiguous()
            and out.is_contiguous() and a.is_contiguous()):
        return _dequantized_gemm(torch, a, b, scale_a, scale_b, bias, out)
    offsets = torch.full((1,), a.shape[0], dtype=torch.int32, device=a.device)
    block_scaled_grouped_gemm(a, w, scale_a, scale_b.unsqueeze(0), offsets, out_dtype=out.dtype, out=out)
    return out.add_(bias) if bias is not None else out


def _dequantized_gemm(torch, a, b, scale_a, scale_b, bias, out):
    """Where no kernel of ours or torch's takes the problem (block scales without the block-scaled grouped
    variants, N not a multiple of 16 past our variants' tokens): both operands dequantized to ``out``'s dtype,
    then torch.matmul (cuBLAS) into ``out``. Scales of one value, per row of the operand, or per block."""
    x = dequantize_fp8(a, scale_a, dtype=out.dtype)
    torch.matmul(x, dequantize_fp8(b.t(), scale_b, dtype=out.dtype).t(), out=out)
    return out.add_(bias) if bias is not None else out


def quantize_fp8(x, scale=None, *, group_size=None):
    """``x`` (bf16 or fp16, [..., K], K a multiple of 8) to e4m3 for ``scaled_gemm``: returns ``(q, scale)``.

    scale None: per row (token), ``scale = max|row| / 448`` as float32 [..., 1], one kernel that reads x
    once from HBM; with ``group_size=128``, per group of 128 elements of a row, scales [..., ceil(K/128)]
    (for ``scaled_gemm(..., block_scales=True)``). scale given (a float32 tensor of one value, a static
    activation scale): ``x / scale``. A zero row or group gets scale 1. Values beyond the e4m3 range
    saturate to +-448.
    """
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor) or x.dtype not in dtype_codes(torch):
        got = x.dtype if torch is not None and isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"wavetune.quantize_fp8 takes a bf16 or fp16 torch tensor, got {got}")
    if x.dim() < 1 or x.stride(-1) != 1:
        raise ValueError(f"x must have a contiguous last dimension, got shape {tuple(x.shape)} strides {x.stride()}")
    if scale is not None and (not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32
                              or scale.numel() != 1 or scale.device != x.device):
        raise ValueError("scale must be a float32 tensor of one value on x's device (a static activation scale)")
    if group_size not in (None, BLOCK) or (group_size and scale is not None):
        raise ValueError(f"group_size must be None (per row) or {BLOCK} (block scales), with no static scale; "
                         f"got {group_size}")
    if not x.is_cuda:
        raise ValueError(f"x must be a CUDA tensor, got {x.device}")
    k = x.shape[-1]
    rows = x.reshape(-1, k) if x.numel() else x.new_empty((0, k))
    q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    scales_per_row = -(-k // BLOCK) if group_size else 1
    out_scale = scale if scale is not None else torch.empty((*x.shape[:-1], scales_per_row), dtype=torch.float32,
                                                             device=x.device)
    if rows.shape[0] == 0 or k == 0:
        return q, out_scale.fill_(1.0) if scale is None else out_scale
    device = x.get_device()
    with torch.cuda.device(device):
        _C.quantize_fp8(rows.data_ptr(), rows.stride(0), dtype_codes(torch)[x.dtype], rows.shape[0], k,
                        group_size or 0, q.data_ptr(),
                        0 if scale is not None else out_scale.data_ptr(), scale.data_ptr() if scale is not None else 0,
                        stream_getter(torch)(device))
    return q, out_scale

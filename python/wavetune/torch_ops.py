"""wavetune's GEMM as PyTorch operators: ``torch.ops.wavetune.gemm(a, b)`` and
``torch.ops.wavetune.linear(x, weight, bias=None)``.

Importing this module imports torch and registers both operators, with fake (meta) implementations, so
``torch.compile(fullgraph=True)`` traces them without a graph break and CUDA graphs capture them.
They are inference-only: there is no backward.

The tuned table for a device is loaded by the first call there outside CUDA-graph capture; a call under
capture on a device with no table looked for yet raises (capture must not read files): run one eager
call first (the warm-up that capture needs anyway) or call ``wavetune.load_table()``.
"""

from __future__ import annotations

import torch

from . import api

# NOTES: a plain torch.library.Library with per-backend kernels, not torch.library.custom_op: custom_op
# wraps each call in Python layers that cost several times the dispatch itself (measured on a CPU host:
# about 15-20 us against 2-4 us per call), and this path is paid on every eager call. The exact-strides
# tag keeps Inductor from handing the kernels re-laid-out inputs that the TMA loads cannot take.
_STRIDES_TAG = getattr(torch.Tag, "needs_exact_strides", torch.Tag.needs_fixed_stride_order)
_LIBRARY = torch.library.Library("wavetune", "DEF")
_LIBRARY.define("gemm(Tensor a, Tensor b) -> Tensor", tags=(_STRIDES_TAG,))
_LIBRARY.define("linear(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor", tags=(_STRIDES_TAG,))


def _prepare_device(t: torch.Tensor, op: str) -> None:
    """Refuse CPU tensors; on a CUDA device's first call, refuse CUDA-graph capture before gemm loads its table."""
    device = t.get_device()
    if device in api._table_checked:
        return
    if device < 0:
        raise ValueError(f"wavetune.{op} runs on CUDA tensors (a Hopper GPU), got one on {t.device}; "
                         "leave a model that runs on the CPU unpatched (wavetune.unpatch)")
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError(f"wavetune.{op}: first call on cuda:{device} is under CUDA-graph capture, where the "
                           "tuned table cannot be loaded (file I/O); run one eager call first (the usual warm-up) "
                           "or call wavetune.load_table() before capturing")


def _check_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """What gemm does not check itself: weight is [N, K], bias is [N] of x's dtype and device."""
    if weight.dim() != 2:
        raise ValueError(f"weight must be [N, K] (nn.Linear layout), got shape {tuple(weight.shape)}")
    if bias is not None and (bias.shape != weight.shape[:1] or bias.dtype != x.dtype
                             or bias.get_device() != x.get_device()):
        raise ValueError(f"bias must be a {x.dtype} tensor of shape ({weight.shape[0]},) on {x.device}, "
                         f"got {bias.dtype} {tuple(bias.shape)} on {bias.device}")


def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.gemm: ``wavetune.gemm(a, b)`` with the table's choice."""
    _prepare_device(a, "gemm")
    return api.gemm(a, b)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.linear: ``F.linear(x, weight, bias)`` on wavetune's GEMM."""
    _check_linear(x, weight, bias)
    _prepare_device(x, "linear")
    out = api.gemm(x, weight.t())
    if bias is not None:
        # NOTES: one add after the GEMM: the CUTLASS variants have no bias epilogue.
        out.add_(bias)
    return out


@torch.library.register_fake("wavetune::gemm", lib=_LIBRARY)
def _gemm_fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dim() < 1 or b.dim() != 2:
        raise ValueError(f"expected a of shape [..., K] and b of shape [K, N], got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[-1] != b.shape[0]:
        raise ValueError(f"shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be multiplied ({a.shape[-1]} != {b.shape[0]})")
    if b.dtype != a.dtype:
        raise TypeError(f"a and b must both be bfloat16 or both float16, got {a.dtype} and {b.dtype}")
    return a.new_empty((*a.shape[:-1], b.shape[1]))  # contiguous, like gemm's own output


@torch.library.register_fake("wavetune::linear", lib=_LIBRARY)
def _linear_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    _check_linear(x, weight, bias)
    return _gemm_fake(x, weight.t())


# NOTES: the CPU kernels exist to refuse with wavetune's message (_prepare_device) instead of the
# dispatcher's "could not run ... with arguments from the 'CPU' backend".
for _backend in ("CUDA", "CPU"):
    _LIBRARY.impl("gemm", gemm, _backend)
    _LIBRARY.impl("linear", linear, _backend)

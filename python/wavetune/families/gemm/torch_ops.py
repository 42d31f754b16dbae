"""wavetune's GEMM as PyTorch operators (``wavetune.torch_ops`` imports this module):

- ``torch.ops.wavetune.gemm(a, b)``, ``torch.ops.wavetune.linear(x, weight, bias=None)``
- ``torch.ops.wavetune.linear_silu_and_mul(x, weight, bias=None)``: ``silu_and_mul(linear(x, weight, bias))`` for a
  merged gate and up weight (gate rows first), and ``torch.ops.wavetune.linear_residual(x, weight, residual,
  bias=None)``: ``residual + linear(x, weight, bias)``. Where the table chooses the decode GEMM, it runs the
  epilogue in its store (the residual added in fp32 and rounded once); elsewhere the GEMM runs and then the
  addition or the silu_and_mul kernel.

Importing this module imports torch and registers the operators, with fake (meta) implementations, so
``torch.compile(fullgraph=True)`` traces them without a graph break and CUDA graphs capture them.
They are inference-only: there is no backward.

A device's tuned table is looked for once, by ``ensure_table`` (``wavetune.patch`` calls it for a model
already on the GPU) or by the first call there. A first call under CUDA-graph capture raises (capture
must not read files): run one eager call first (the warm-up capture needs anyway) or patch the model
on the GPU. Workspace (split-K and stream-K partials) comes from torch's caching allocator on the
current stream, so any capture pattern works: warm-up on a side stream, a dedicated capture stream,
pools shared between graphs. Where the table chooses cuBLAS, torch's own operator runs it (the same
kernel, handle and workspace as ``torch.matmul`` and ``F.linear``, so the results are theirs bit for bit).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from ...runtime import invariance, tables
from ...runtime.device import stream_getter
from ...runtime.native import _C
from ...torch_library import LIBRARY, STRIDES_TAG
from . import api

# batch_invariance: a level's name (wavetune.runtime.invariance); None: the process-wide level when the call runs.
LIBRARY.define("gemm(Tensor a, Tensor b, str? batch_invariance=None) -> Tensor", tags=(STRIDES_TAG,))
LIBRARY.define("linear(Tensor x, Tensor weight, Tensor? bias=None, str? batch_invariance=None) -> Tensor",
               tags=(STRIDES_TAG,))
LIBRARY.define("linear_silu_and_mul(Tensor x, Tensor weight, Tensor? bias=None, str? batch_invariance=None) -> Tensor",
               tags=(STRIDES_TAG,))
LIBRARY.define("linear_residual(Tensor x, Tensor weight, Tensor residual, Tensor? bias=None, "
               "str? batch_invariance=None) -> Tensor", tags=(STRIDES_TAG,))

# The device index without torch.cuda.current_device()'s Python wrapper (public API where absent).
_current_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)


class _Plan(NamedTuple):
    """How to run a GEMM whose operands have the metadata of an earlier call."""

    device: int
    # (a, b's data pointer, bias or None, residual or None) -> a new output; None where the table chose cuBLAS,
    # which torch's own operator runs, or, with an epilogue, a variant that does not run it.
    launch: Callable[..., torch.Tensor] | None


# Operand metadata (shapes, strides, dtypes, devices) -> _Plan. Eager calls are the hot path of a decode
# step run outside CUDA graphs: a known shape skips the Python-level checks and goes straight to the
# native launch, which still checks sizes and the 16-byte alignment of every pointer itself.
_plans: dict[tuple, _Plan] = {}
_MAX_PLANS = 4096  # one per (op, shape): a server sees many prompt lengths; start over rather than grow
tables.on_table_change(_plans.clear)  # a plan holds its table's choice


def ensure_table(device: int) -> None:
    """Look for ``device``'s tuned gemm table now (once per device) so that no later call has to."""
    tables.ensure_table(device)


def _prepare_device(t: torch.Tensor, op: str) -> None:
    """Refuse CPU tensors; on a CUDA device's first call, refuse CUDA-graph capture before gemm loads its table."""
    device = t.get_device()
    if tables.table_checked(device):
        return
    if device < 0:
        raise ValueError(f"wavetune.{op} runs on CUDA tensors (a Hopper GPU), got one on {t.device}; "
                         "leave a model that runs on the CPU unpatched (wavetune.unpatch)")
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError(f"wavetune.{op}: first call on cuda:{device} is under CUDA-graph capture, where the "
                           "tuned table cannot be loaded (file I/O); run one eager call first (the usual warm-up), "
                           "patch the model once it is on the GPU, or call wavetune.load_table() before capturing")


def _native_launch(prepared, out_shape: torch.Size) -> Callable:
    """A plan's launch into a new output of ``out_shape``, with a workspace where the choice needs one."""
    stream = stream_getter(torch)
    device = prepared.device
    workspace_bytes = prepared.workspace_bytes

    def launch(a: torch.Tensor, b_ptr: int, bias: torch.Tensor | None,
               residual: torch.Tensor | None = None) -> torch.Tensor:
        result = a.new_empty(out_shape)  # a's dtype and device, without parsing them (host time per call)
        # NOTES: from torch's caching allocator, so a captured graph keeps it in its own pool for replays.
        workspace = a.new_empty(workspace_bytes, dtype=torch.uint8).data_ptr() if workspace_bytes else 0
        prepared(a.data_ptr(), b_ptr, 0 if bias is None else bias.data_ptr(), result.data_ptr(), workspace,
                 stream(device), 0 if residual is None else residual.data_ptr())
        return result

    return launch


def _new_plan(key: tuple, op: str, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, level: str,
              residual: torch.Tensor | None = None, silu_and_mul: bool = False) -> _Plan:
    """The plan for operands of ``key`` after all of ``api.gemm``'s checks, at batch-invariance ``level``;
    remembered unless the problem is empty (nothing to launch) or on another device than the current one."""
    _prepare_device(a, op)
    ops = api.check_operands(a, b, bias, residual=residual, silu_and_mul=silu_and_mul)
    if not (ops.m and ops.n and ops.k) or ops.device != _current_device():
        return _Plan(ops.device, lambda a, b_ptr, bias, residual=None: api.gemm(
            a, b, bias=bias, residual=residual, silu_and_mul=silu_and_mul, batch_invariant=level))
    tables.ensure_table(ops.device)
    prepared = _C.PreparedGemm(ops.m, ops.n, ops.k, ops.lda, ops.ldb, ops.n, ops.dtype, ops.b_layout, ops.device,
                               batch_invariance=level)
    out_shape = (*a.shape[:-1], ops.n // 2 if silu_and_mul else ops.n)
    if ops.epilogue != "none":  # None where the chosen variant does not run it
        prepared = prepared.with_epilogue(ops.epilogue, out_shape[-1], ops.ldr)
    plan = _Plan(ops.device, None if prepared is None or prepared.from_library else _native_launch(prepared, out_shape))
    if tables.table_swap_pending(ops.device):
        return plan  # made under capture from a table about to be replaced: a later call takes the new one
    if len(_plans) >= _MAX_PLANS:
        _plans.clear()
    _plans[key] = plan
    return plan


def _check_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """What gemm does not check itself: weight is [N, K], bias is [N] of x's dtype and device."""
    if weight.dim() != 2:
        raise ValueError(f"weight must be [N, K] (nn.Linear layout), got shape {tuple(weight.shape)}")
    if bias is not None and (bias.shape != weight.shape[:1] or bias.dtype != x.dtype
                             or bias.get_device() != x.get_device()):
        raise ValueError(f"bias must be a {x.dtype} tensor of shape ({weight.shape[0]},) on {x.device}, "
                         f"got {bias.dtype} {tuple(bias.shape)} on {bias.device}")


def _linear_key(op: str, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, level: str) -> tuple:
    """The plan key of a linear operator's operands."""
    return (op, x.shape, x.stride(), weight.shape, weight.stride(), x.dtype, weight.dtype, x.get_device(),
            weight.get_device(), None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.get_device()),
            level)


def gemm(a: torch.Tensor, b: torch.Tensor, batch_invariance: str | None = None) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.gemm: ``wavetune.gemm(a, b)`` with the table's choice."""
    level = invariance.requested(batch_invariance)
    key = ("gemm", a.shape, a.stride(), b.shape, b.stride(), a.dtype, b.dtype, a.get_device(), b.get_device(), level)
    plan = _plans.get(key)
    if plan is None or plan.device != _current_device():
        plan = _new_plan(key, "gemm", a, b, None, level)
    return plan.launch(a, b.data_ptr(), None) if plan.launch else torch.matmul(a, b)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           batch_invariance: str | None = None) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.linear: ``F.linear(x, weight, bias)`` on wavetune's GEMM, the bias
    added in the GEMM's epilogue (fp32, one rounding)."""
    level = invariance.requested(batch_invariance)
    key = _linear_key("linear", x, weight, bias, level)
    plan = _plans.get(key)
    if plan is None or plan.device != _current_device():
        _check_linear(x, weight, bias)
        plan = _new_plan(key, "linear", x, weight.t(), bias, level)
    if plan.launch is None:
        return torch.nn.functional.linear(x, weight, bias)
    return plan.launch(x, weight.data_ptr(), bias)  # weight's pointer is weight.t()'s


def linear_silu_and_mul(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                        batch_invariance: str | None = None) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.linear_silu_and_mul: ``silu_and_mul(linear(x, weight, bias))``, weight
    [N, K] a gate projection's rows and then an up projection's (N a multiple of 16); [..., N / 2]."""
    level = invariance.requested(batch_invariance)
    key = _linear_key("linear_silu_and_mul", x, weight, bias, level)
    plan = _plans.get(key)
    if plan is None or plan.device != _current_device():
        _check_linear(x, weight, bias)
        plan = _new_plan(key, "linear_silu_and_mul", x, weight.t(), bias, level, silu_and_mul=True)
    if plan.launch is None:
        return api.finish_epilogue(linear(x, weight, bias, level), "silu_and_mul")
    return plan.launch(x, weight.data_ptr(), bias)


def linear_residual(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor, bias: torch.Tensor | None = None,
                    batch_invariance: str | None = None) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.linear_residual: ``residual + linear(x, weight, bias)``, residual
    [..., N] of x's dtype; a new tensor."""
    level = invariance.requested(batch_invariance)
    key = (*_linear_key("linear_residual", x, weight, bias, level), residual.shape, residual.stride(),
           residual.dtype, residual.get_device())
    plan = _plans.get(key)
    if plan is None or plan.device != _current_device():
        _check_linear(x, weight, bias)
        plan = _new_plan(key, "linear_residual", x, weight.t(), bias, level, residual=residual)
    if plan.launch is None:
        return api.finish_epilogue(linear(x, weight, bias, level), "residual", residual)
    return plan.launch(x, weight.data_ptr(), bias, residual)


@torch.library.register_fake("wavetune::gemm", lib=LIBRARY)
def _gemm_fake(a: torch.Tensor, b: torch.Tensor, batch_invariance: str | None = None) -> torch.Tensor:
    invariance.requested(batch_invariance)  # a bad level fails as the kernel does
    if a.dim() < 1 or b.dim() != 2:
        raise ValueError(f"expected a of shape [..., K] and b of shape [K, N], got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[-1] != b.shape[0]:
        raise ValueError(f"shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be multiplied ({a.shape[-1]} != {b.shape[0]})")
    if b.dtype != a.dtype:
        raise TypeError(f"a and b must both be bfloat16 or both float16, got {a.dtype} and {b.dtype}")
    return a.new_empty((*a.shape[:-1], b.shape[1]))  # contiguous, like gemm's own output


@torch.library.register_fake("wavetune::linear", lib=LIBRARY)
def _linear_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                 batch_invariance: str | None = None) -> torch.Tensor:
    _check_linear(x, weight, bias)
    return _gemm_fake(x, weight.t(), batch_invariance)


@torch.library.register_fake("wavetune::linear_silu_and_mul", lib=LIBRARY)
def _linear_silu_and_mul_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                              batch_invariance: str | None = None) -> torch.Tensor:
    product = _linear_fake(x, weight, bias, batch_invariance)
    api.check_epilogue(x, weight.shape[0], silu_and_mul=True)
    return product.new_empty((*product.shape[:-1], weight.shape[0] // 2))


@torch.library.register_fake("wavetune::linear_residual", lib=LIBRARY)
def _linear_residual_fake(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor,
                          bias: torch.Tensor | None = None, batch_invariance: str | None = None) -> torch.Tensor:
    product = _linear_fake(x, weight, bias, batch_invariance)
    api.check_epilogue(x, weight.shape[0], residual)
    return product


# NOTES: the CPU kernels exist to refuse with wavetune's message (_prepare_device) instead of the
# dispatcher's "could not run ... with arguments from the 'CPU' backend".
for _backend in ("CUDA", "CPU"):
    LIBRARY.impl("gemm", gemm, _backend)
    LIBRARY.impl("linear", linear, _backend)
    LIBRARY.impl("linear_silu_and_mul", linear_silu_and_mul, _backend)
    LIBRARY.impl("linear_residual", linear_residual, _backend)

"""The layer ops as PyTorch operators (docs/torch.md, "Layer ops"); importing ``wavetune.torch_ops`` registers
them:

- ``torch.ops.wavetune.rms_norm(x, weight, eps)``, ``add_rms_norm(x, residual, weight, eps) -> (sum, out)``
- ``torch.ops.wavetune.silu_and_mul(x)``
- ``torch.ops.wavetune.rotary_embedding(q, k, cos, sin) -> (q_out, k_out)``
- ``torch.ops.wavetune.rotary_cache_write(q, k, v, cos, sin, q_out, key_cache, value_cache, length, arrivals)``
  (writes q_out, the caches, ``length`` and ``arrivals`` in place)
- ``torch.ops.wavetune.moe_align(top_k_index, experts) -> (offsets, positions)``, ``moe_gather(x, positions,
  top_k)``, ``moe_combine(rows, positions, top_k_index, experts, weights)``

Fake implementations let ``torch.compile(fullgraph=True)`` trace them; CUDA graphs capture them. Inference-only.
"""

from __future__ import annotations

import torch

from ...torch_library import LIBRARY
from . import api

LIBRARY.define("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor")
LIBRARY.define("add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)")
LIBRARY.define("silu_and_mul(Tensor x) -> Tensor")
LIBRARY.define("rotary_embedding(Tensor q, Tensor k, Tensor cos, Tensor sin) -> (Tensor, Tensor)")
LIBRARY.define("rotary_cache_write(Tensor q, Tensor k, Tensor v, Tensor cos, Tensor sin, Tensor(a!) q_out, "
               "Tensor(b!) key_cache, Tensor(c!) value_cache, Tensor(d!) length, Tensor(e!) arrivals) -> ()")
LIBRARY.define("moe_align(Tensor top_k_index, int experts) -> (Tensor, Tensor)")
LIBRARY.define("moe_gather(Tensor x, Tensor positions, int top_k) -> Tensor")
LIBRARY.define("moe_combine(Tensor rows, Tensor positions, Tensor top_k_index, int experts, Tensor weights) -> Tensor")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.rms_norm: ``wavetune.rms_norm``."""
    return api.rms_norm(x, weight, eps)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel behind torch.ops.wavetune.add_rms_norm: ``wavetune.add_rms_norm``."""
    return api.add_rms_norm(x, residual, weight, eps)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.silu_and_mul: ``wavetune.silu_and_mul``."""
    return api.silu_and_mul(x)


def rotary_embedding(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                     sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel behind torch.ops.wavetune.rotary_embedding: ``wavetune.rotary_embedding``."""
    return api.rotary_embedding(q, k, cos, sin)


def rotary_cache_write(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                       q_out: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, length: torch.Tensor,
                       arrivals: torch.Tensor) -> None:
    """The kernel behind torch.ops.wavetune.rotary_cache_write: ``wavetune.rotary_cache_write`` into q_out."""
    api.rotary_cache_write(q, k, v, cos, sin, key_cache, value_cache, length, arrivals, out=q_out)


def moe_align(top_k_index: torch.Tensor, experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel behind torch.ops.wavetune.moe_align: ``wavetune.moe_align``."""
    return api.moe_align(top_k_index, experts)


def moe_gather(x: torch.Tensor, positions: torch.Tensor, top_k: int) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.moe_gather: ``wavetune.moe_gather``."""
    return api.moe_gather(x, positions, top_k)


def moe_combine(rows: torch.Tensor, positions: torch.Tensor, top_k_index: torch.Tensor, experts: int,
                weights: torch.Tensor) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.moe_combine: ``wavetune.moe_combine``."""
    return api.moe_combine(rows, positions, top_k_index, experts, weights)


@torch.library.register_fake("wavetune::moe_align", lib=LIBRARY)
def _moe_align_fake(top_k_index, experts):
    api.check_routing(torch, top_k_index, experts)
    return (top_k_index.new_empty((experts,), dtype=torch.int32),
            top_k_index.new_empty((top_k_index.numel(),), dtype=torch.int32))


@torch.library.register_fake("wavetune::moe_gather", lib=LIBRARY)
def _moe_gather_fake(x, positions, top_k):
    api.check_rows(torch, x)
    return x.new_empty((positions.shape[0], x.shape[-1]))


@torch.library.register_fake("wavetune::moe_combine", lib=LIBRARY)
def _moe_combine_fake(rows, positions, top_k_index, experts, weights):
    api.check_routing(torch, top_k_index, experts)
    return rows.new_empty((top_k_index.shape[0], rows.shape[-1]))


@torch.library.register_fake("wavetune::rms_norm", lib=LIBRARY)
def _rms_norm_fake(x, weight, eps):
    api.check_rows(torch, x, weight)
    return x.new_empty(x.shape)


@torch.library.register_fake("wavetune::add_rms_norm", lib=LIBRARY)
def _add_rms_norm_fake(x, residual, weight, eps):
    api.check_residual(torch, x, residual, weight)
    return x.new_empty(x.shape), x.new_empty(x.shape)


@torch.library.register_fake("wavetune::silu_and_mul", lib=LIBRARY)
def _silu_and_mul_fake(x):
    api.check_rows(torch, x, width=x.shape[-1] // 2)
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


@torch.library.register_fake("wavetune::rotary_embedding", lib=LIBRARY)
def _rotary_embedding_fake(q, k, cos, sin):
    api.check_rotary(torch, q, k, cos, sin)
    return api.rotary_output(torch, q), api.rotary_output(torch, k)


@torch.library.register_fake("wavetune::rotary_cache_write", lib=LIBRARY)
def _rotary_cache_write_fake(q, k, v, cos, sin, q_out, key_cache, value_cache, length, arrivals):
    api.check_cache_write(torch, q, k, v, cos, sin, q_out, key_cache, value_cache, length, arrivals)


# The CPU kernels refuse with wavetune's message instead of the dispatcher's.
for _backend in ("CUDA", "CPU"):
    LIBRARY.impl("rms_norm", rms_norm, _backend)
    LIBRARY.impl("add_rms_norm", add_rms_norm, _backend)
    LIBRARY.impl("silu_and_mul", silu_and_mul, _backend)
    LIBRARY.impl("rotary_embedding", rotary_embedding, _backend)
    LIBRARY.impl("rotary_cache_write", rotary_cache_write, _backend)
    LIBRARY.impl("moe_align", moe_align, _backend)
    LIBRARY.impl("moe_gather", moe_gather, _backend)
    LIBRARY.impl("moe_combine", moe_combine, _backend)

"""The layer ops as PyTorch operators (docs/torch.md, "Layer ops"); importing ``wavetune.torch_ops`` registers
them:

- ``torch.ops.wavetune.rms_norm(x, weight, eps)``
- ``torch.ops.wavetune.silu_and_mul(x)``
- ``torch.ops.wavetune.rotary_embedding(q, k, cos, sin) -> (q_out, k_out)``

Fake implementations let ``torch.compile(fullgraph=True)`` trace them; CUDA graphs capture them. Inference-only.
"""

from __future__ import annotations

import torch

from ...torch_library import LIBRARY
from . import api

LIBRARY.define("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor")
LIBRARY.define("silu_and_mul(Tensor x) -> Tensor")
LIBRARY.define("rotary_embedding(Tensor q, Tensor k, Tensor cos, Tensor sin) -> (Tensor, Tensor)")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.rms_norm: ``wavetune.rms_norm``."""
    return api.rms_norm(x, weight, eps)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.silu_and_mul: ``wavetune.silu_and_mul``."""
    return api.silu_and_mul(x)


def rotary_embedding(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                     sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel behind torch.ops.wavetune.rotary_embedding: ``wavetune.rotary_embedding``."""
    return api.rotary_embedding(q, k, cos, sin)


@torch.library.register_fake("wavetune::rms_norm", lib=LIBRARY)
def _rms_norm_fake(x, weight, eps):
    api.check_rows(torch, x, weight)
    return x.new_empty(x.shape)


@torch.library.register_fake("wavetune::silu_and_mul", lib=LIBRARY)
def _silu_and_mul_fake(x):
    api.check_rows(torch, x, width=x.shape[-1] // 2)
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


@torch.library.register_fake("wavetune::rotary_embedding", lib=LIBRARY)
def _rotary_embedding_fake(q, k, cos, sin):
    api.check_rotary(torch, q, k, cos, sin)
    return api.rotary_operands(torch, q, k)[2:]


# The CPU kernels refuse with wavetune's message instead of the dispatcher's.
for _backend in ("CUDA", "CPU"):
    LIBRARY.impl("rms_norm", rms_norm, _backend)
    LIBRARY.impl("silu_and_mul", silu_and_mul, _backend)
    LIBRARY.impl("rotary_embedding", rotary_embedding, _backend)

"""wavetune's attention as a PyTorch operator: ``torch.ops.wavetune.attention(q, k, v, causal, scale)``
(docs/attention.md), beside the dense GEMM's gemm and linear; importing ``wavetune.torch_ops`` registers it.

The fake implementation lets ``torch.compile(fullgraph=True)`` trace it; CUDA graphs capture it (the
choice reads sizes only and the workspace comes from the caching allocator). Inference-only.
"""

from __future__ import annotations

import torch

from ...torch_library import LIBRARY, STRIDES_TAG
from . import api

LIBRARY.define("attention(Tensor q, Tensor k, Tensor v, bool causal=False, float? scale=None) -> Tensor",
               tags=(STRIDES_TAG,))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.attention: ``wavetune.attention(q, k, v, causal=, scale=)``."""
    return api.attention(q, k, v, causal=causal, scale=scale)


@torch.library.register_fake("wavetune::attention", lib=LIBRARY)
def _attention_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    scale: float | None = None) -> torch.Tensor:
    api.check_shapes(torch, q, k, v, None)
    return torch.empty_like(q, memory_format=torch.contiguous_format)


# The CPU kernel refuses with wavetune's message instead of the dispatcher's.
for _backend in ("CUDA", "CPU"):
    LIBRARY.impl("attention", attention, _backend)

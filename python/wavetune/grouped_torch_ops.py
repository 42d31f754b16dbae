"""wavetune's grouped GEMM as a PyTorch operator: ``torch.ops.wavetune.grouped_gemm(x, w, offsets)``
(docs/grouped.md), beside torch_ops's gemm and linear; importing ``wavetune.torch_ops`` registers it.

The fake implementation lets ``torch.compile(fullgraph=True)`` trace it; CUDA graphs capture it (the
choice reads sizes only and the workspace comes from the caching allocator). Inference-only.
"""

from __future__ import annotations

import torch

from . import grouped
from .torch_library import STRIDES_TAG

_LIBRARY = torch.library.Library("wavetune", "FRAGMENT")
_LIBRARY.define("grouped_gemm(Tensor x, Tensor w, Tensor offsets) -> Tensor", tags=(STRIDES_TAG,))


def grouped_gemm(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.grouped_gemm: ``wavetune.grouped_gemm(x, w, offsets)``."""
    return grouped.grouped_gemm(x, w, offsets)


@torch.library.register_fake("wavetune::grouped_gemm", lib=_LIBRARY)
def _grouped_gemm_fake(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    grouped.check_shapes(torch, x, w, offsets, None)
    return x.new_empty((x.shape[0], w.shape[1]))  # contiguous, like grouped_gemm's own output


# The CPU kernel refuses with wavetune's message instead of the dispatcher's.
for _backend in ("CUDA", "CPU"):
    _LIBRARY.impl("grouped_gemm", grouped_gemm, _backend)

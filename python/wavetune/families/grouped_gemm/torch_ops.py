"""wavetune's grouped GEMM as a PyTorch operator: ``torch.ops.wavetune.grouped_gemm(x, w, offsets)``
(docs/api.md), beside the dense GEMM's gemm and linear; importing ``wavetune.torch_ops`` registers it.

The fake implementation lets ``torch.compile(fullgraph=True)`` trace it; CUDA graphs capture it (the
choice reads sizes only and the workspace comes from the caching allocator). Inference-only.
"""

from __future__ import annotations

import torch

from ...torch_library import LIBRARY, STRIDES_TAG
from . import api

LIBRARY.define("grouped_gemm(Tensor x, Tensor w, Tensor offsets) -> Tensor", tags=(STRIDES_TAG,))


def grouped_gemm(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.grouped_gemm: ``wavetune.grouped_gemm(x, w, offsets)``."""
    return api.grouped_gemm(x, w, offsets)


@torch.library.register_fake("wavetune::grouped_gemm", lib=LIBRARY)
def _grouped_gemm_fake(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    api.check_shapes(torch, x, w, offsets, None)
    return x.new_empty((x.shape[0], w.shape[1]))  # contiguous, like grouped_gemm's own output


# The CPU kernel refuses with wavetune's message instead of the dispatcher's.
for _backend in ("CUDA", "CPU"):
    LIBRARY.impl("grouped_gemm", grouped_gemm, _backend)

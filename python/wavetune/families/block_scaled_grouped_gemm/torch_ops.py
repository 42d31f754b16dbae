"""wavetune's block-scaled FP8 grouped GEMM as a PyTorch operator: ``torch.ops.wavetune.block_scaled_grouped_gemm(
x, w, scale_x, scale_w, offsets, out_dtype=None)`` (docs/grouped.md); importing ``wavetune.torch_ops`` registers
it. ``torch.ops.wavetune.scaled_grouped_gemm`` takes block scales too.

The fake implementation lets ``torch.compile(fullgraph=True)`` trace it; CUDA graphs capture it (the choice
reads sizes only and the workspace comes from the caching allocator). Inference-only.
"""

from __future__ import annotations

import torch

from ...torch_library import LIBRARY, STRIDES_TAG
from . import api

LIBRARY.define("block_scaled_grouped_gemm(Tensor x, Tensor w, Tensor scale_x, Tensor scale_w, Tensor offsets, "
               "ScalarType? out_dtype=None) -> Tensor", tags=(STRIDES_TAG,))


def block_scaled_grouped_gemm(x: torch.Tensor, w: torch.Tensor, scale_x: torch.Tensor, scale_w: torch.Tensor,
                              offsets: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.block_scaled_grouped_gemm: ``wavetune.block_scaled_grouped_gemm``."""
    return api.block_scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, out_dtype=out_dtype)


@torch.library.register_fake("wavetune::block_scaled_grouped_gemm", lib=LIBRARY)
def _block_scaled_grouped_gemm_fake(x, w, scale_x, scale_w, offsets, out_dtype=None):
    api.check_operands(torch, x, w, scale_x, scale_w, offsets, out_dtype, None)
    return x.new_empty((x.shape[0], w.shape[1]), dtype=out_dtype or torch.bfloat16)


# The CPU kernel refuses with wavetune's message instead of the dispatcher's.
for _backend in ("CUDA", "CPU"):
    LIBRARY.impl("block_scaled_grouped_gemm", block_scaled_grouped_gemm, _backend)

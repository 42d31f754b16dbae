"""wavetune's FP8 scaled GEMM as PyTorch operators: ``torch.ops.wavetune.scaled_gemm(a, b, scale_a, scale_b,
bias=None, out_dtype=None)`` and ``torch.ops.wavetune.quantize_fp8(x, scale=None)`` (docs/scaled_gemm.md);
importing ``wavetune.torch_ops`` registers them.

Fake implementations let ``torch.compile(fullgraph=True)`` trace them; CUDA graphs capture them (the choice
reads sizes only, and nothing is allocated outside torch's caching allocator). Inference-only.
"""

from __future__ import annotations

import torch

from ...torch_library import LIBRARY, STRIDES_TAG
from . import api

LIBRARY.define("scaled_gemm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
               "ScalarType? out_dtype=None, bool block_scales=False) -> Tensor", tags=(STRIDES_TAG,))
LIBRARY.define("quantize_fp8(Tensor x, Tensor? scale=None, int? group_size=None) -> (Tensor, Tensor)")


def scaled_gemm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
                block_scales: bool = False) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.scaled_gemm: ``wavetune.scaled_gemm``."""
    return api.scaled_gemm(a, b, scale_a, scale_b, out_dtype=out_dtype, bias=bias, block_scales=block_scales)


def quantize_fp8(x: torch.Tensor, scale: torch.Tensor | None = None,
                 group_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel behind torch.ops.wavetune.quantize_fp8: ``wavetune.quantize_fp8``. A given scale is
    returned as a new tensor (an operator's outputs may not alias its inputs)."""
    q, out_scale = api.quantize_fp8(x, scale, group_size=group_size)
    return q, out_scale.clone() if scale is not None else out_scale


@torch.library.register_fake("wavetune::scaled_gemm", lib=LIBRARY)
def _scaled_gemm_fake(a, b, scale_a, scale_b, bias=None, out_dtype=None, block_scales=False):
    api.check_operands(torch, a, b, scale_a, scale_b, out_dtype, bias, None, block_scales)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype or torch.bfloat16)


@torch.library.register_fake("wavetune::quantize_fp8", lib=LIBRARY)
def _quantize_fp8_fake(x, scale=None, group_size=None):
    q = x.new_empty(x.shape, dtype=torch.float8_e4m3fn)
    if scale is not None:
        return q, scale.new_empty(scale.shape)
    per_row = -(-x.shape[-1] // api.BLOCK) if group_size else 1
    return q, x.new_empty((*x.shape[:-1], per_row), dtype=torch.float32)


# The CPU kernels refuse with wavetune's message instead of the dispatcher's.
for _backend in ("CUDA", "CPU"):
    LIBRARY.impl("scaled_gemm", scaled_gemm, _backend)
    LIBRARY.impl("quantize_fp8", quantize_fp8, _backend)

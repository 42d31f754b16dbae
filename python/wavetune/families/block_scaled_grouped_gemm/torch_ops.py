"""wavetune's block-scaled FP8 grouped GEMM as a PyTorch operator:
``torch.ops.wavetune.block_scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, out_dtype=None)``
(docs/grouped.md); importing ``wavetune.torch_ops`` registers it (``grouped_gemm.e4m3_ops``)."""

from __future__ import annotations

from ..grouped_gemm.e4m3_ops import define_e4m3_grouped_op
from . import api

block_scaled_grouped_gemm = define_e4m3_grouped_op("block_scaled_grouped_gemm", api.block_scaled_grouped_gemm,
                                                   api.check_operands)

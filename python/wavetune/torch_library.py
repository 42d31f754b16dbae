"""What the PyTorch operators of every kernel family share (``torch_ops``, ``grouped_torch_ops``,
``attention_torch_ops``): importing this module imports torch."""

from __future__ import annotations

import torch

# NOTES: the exact-strides tag keeps Inductor from handing the kernels re-laid-out inputs that the TMA loads
# cannot take (older torch: the fixed-stride-order tag).
STRIDES_TAG = getattr(torch.Tag, "needs_exact_strides", torch.Tag.needs_fixed_stride_order)

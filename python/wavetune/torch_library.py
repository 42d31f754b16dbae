"""What the PyTorch operators of every kernel family share: the ``wavetune`` operator library (its
operators are ``torch.ops.wavetune.*``) and the tag they are defined with. Importing this module imports
torch; ``wavetune.torch_ops`` registers the operators."""

from __future__ import annotations

import torch

# NOTES: a plain torch.library.Library with per-backend kernels, not torch.library.custom_op: custom_op
# wraps each call in Python layers that cost several times the dispatch itself (measured on a CPU host:
# about 15-20 us against 2-4 us per call), and this path is paid on every eager call.
LIBRARY = torch.library.Library("wavetune", "DEF")

# NOTES: the exact-strides tag keeps Inductor from handing the kernels re-laid-out inputs that the TMA loads
# cannot take (older torch: the fixed-stride-order tag).
STRIDES_TAG = getattr(torch.Tag, "needs_exact_strides", torch.Tag.needs_fixed_stride_order)

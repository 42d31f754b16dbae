"""wavetune's paged decode attention as a PyTorch operator: ``torch.ops.wavetune.paged_attention(q, k_cache,
v_cache, block_table=None, seq_lens=None, max_seq_len=None, scale=None)`` (docs/attention.md); importing
``wavetune.torch_ops`` registers it.

The fake implementation lets ``torch.compile(fullgraph=True)`` trace it; CUDA graphs capture it (the split
count reads sizes only and the workspace comes from the caching allocator). Inference-only.
"""

from __future__ import annotations

import torch

from ...torch_library import LIBRARY, STRIDES_TAG
from . import api

LIBRARY.define("paged_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor? block_table=None, "
               "Tensor? seq_lens=None, int? max_seq_len=None, float? scale=None) -> Tensor", tags=(STRIDES_TAG,))


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    block_table: torch.Tensor | None = None, seq_lens: torch.Tensor | None = None,
                    max_seq_len: int | None = None, scale: float | None = None) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.paged_attention: ``wavetune.paged_attention``."""
    return api.paged_attention(q, k_cache, v_cache, block_table, seq_lens, max_seq_len=max_seq_len, scale=scale)


@torch.library.register_fake("wavetune::paged_attention", lib=LIBRARY)
def _paged_attention_fake(q, k_cache, v_cache, block_table=None, seq_lens=None, max_seq_len=None, scale=None):
    api.check_inputs(torch, q, k_cache, v_cache, block_table, seq_lens, max_seq_len, None)
    return torch.empty_like(q, memory_format=torch.contiguous_format)


# The CPU kernel refuses with wavetune's message instead of the dispatcher's.
for _backend in ("CUDA", "CPU"):
    LIBRARY.impl("paged_attention", paged_attention, _backend)

"""wavetune's attention family as PyTorch operators (docs/attention.md), beside the dense GEMM's gemm and linear;
importing ``wavetune.torch_ops`` registers them:

- ``torch.ops.wavetune.attention(q, k, v, causal=False, scale=None)``
- ``torch.ops.wavetune.paged_attention(q, k_cache, v_cache, block_table=None, seq_lens=None, max_seq_len=None,
  scale=None, cu_seqlens_q=None, max_seqlen_q=None, causal=True, total_keys=None)``
- ``torch.ops.wavetune.varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None,
  max_seqlen_k=None, causal=False, scale=None)``

The fake implementations let ``torch.compile(fullgraph=True)`` trace them; CUDA graphs capture them (the
choices read sizes only and the workspace comes from the caching allocator). Inference-only.
"""

from __future__ import annotations

import torch

from ...runtime import invariance
from ...torch_library import LIBRARY, STRIDES_TAG
from . import api, paged

# batch_invariance: a level's name (wavetune.runtime.invariance); None: the process-wide level when the call runs.
LIBRARY.define("attention(Tensor q, Tensor k, Tensor v, bool causal=False, float? scale=None, "
               "str? batch_invariance=None) -> Tensor", tags=(STRIDES_TAG,))
LIBRARY.define("paged_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor? block_table=None, "
               "Tensor? seq_lens=None, int? max_seq_len=None, float? scale=None, Tensor? cu_seqlens_q=None, "
               "int? max_seqlen_q=None, bool causal=True, int? total_keys=None, str? batch_invariance=None) -> Tensor",
               tags=(STRIDES_TAG,))
LIBRARY.define("varlen_attention(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
               "int? max_seqlen_q=None, int? max_seqlen_k=None, bool causal=False, float? scale=None) -> Tensor",
               tags=(STRIDES_TAG,))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None, batch_invariance: str | None = None) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.attention: ``wavetune.attention(q, k, v, causal=, scale=)``."""
    return api.attention(q, k, v, causal=causal, scale=scale, batch_invariant=batch_invariance)


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    block_table: torch.Tensor | None = None, seq_lens: torch.Tensor | None = None,
                    max_seq_len: int | None = None, scale: float | None = None,
                    cu_seqlens_q: torch.Tensor | None = None, max_seqlen_q: int | None = None,
                    causal: bool = True, total_keys: int | None = None,
                    batch_invariance: str | None = None) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.paged_attention: ``wavetune.paged_attention``."""
    return api.paged_attention(q, k_cache, v_cache, block_table, seq_lens, max_seq_len=max_seq_len,
                               cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q, causal=causal,
                               total_keys=total_keys, scale=scale, batch_invariant=batch_invariance)


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_k: torch.Tensor, max_seqlen_q: int | None = None, max_seqlen_k: int | None = None,
                     causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.varlen_attention: ``wavetune.varlen_attention``."""
    return api.varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=causal,
                                scale=scale)


@torch.library.register_fake("wavetune::attention", lib=LIBRARY)
def _attention_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    scale: float | None = None, batch_invariance: str | None = None) -> torch.Tensor:
    invariance.requested(batch_invariance)  # a bad level fails as the kernel does
    api.check_shapes(torch, q, k, v, None)
    return torch.empty_like(q, memory_format=torch.contiguous_format)


@torch.library.register_fake("wavetune::paged_attention", lib=LIBRARY)
def _paged_attention_fake(q, k_cache, v_cache, block_table=None, seq_lens=None, max_seq_len=None, scale=None,
                          cu_seqlens_q=None, max_seqlen_q=None, causal=True, total_keys=None, batch_invariance=None):
    invariance.requested(batch_invariance)
    paged.check_inputs(torch, q, k_cache, v_cache, block_table, seq_lens, max_seq_len, None, cu_seqlens_q,
                       max_seqlen_q)
    return torch.empty_like(q, memory_format=torch.contiguous_format)


@torch.library.register_fake("wavetune::varlen_attention", lib=LIBRARY)
def _varlen_attention_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, causal=False,
                           scale=None):
    paged.check_varlen_inputs(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    return torch.empty_like(q, memory_format=torch.contiguous_format)


# The CPU kernels refuse with wavetune's message instead of the dispatcher's.
for _backend in ("CUDA", "CPU"):
    for _name, _kernel in (("attention", attention), ("paged_attention", paged_attention),
                           ("varlen_attention", varlen_attention)):
        LIBRARY.impl(_name, _kernel, _backend)

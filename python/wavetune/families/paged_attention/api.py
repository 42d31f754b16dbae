"""Decode attention over a paged KV cache: ``paged_attention`` and the kernel listing (docs/attention.md,
"Paged decode").

torch is optional: this module never imports it. The entry point takes torch tensors, so torch is already
loaded whenever a call can succeed.
"""

from __future__ import annotations

import functools
import math
import sys

from ...runtime.configs import KernelConfig, family_variant_id
from ...runtime.device import dtype_codes, stream_getter
from ...runtime.native import _C


def paged_attention_configs() -> list[KernelConfig]:
    """The paged attention kernels compiled into this build, by id: two per dtype and head dim (``tile[2]``),
    one at head dim 256; ``tile[1]`` is the keys a CTA step reads (16 per warp)."""
    return list(_by_id().values())


@functools.cache
def _by_id() -> dict[int, KernelConfig]:
    return {v["id"]: KernelConfig(**v) for v in _C.paged_attention_variants()}


@functools.lru_cache(maxsize=256)
def _resolve(config) -> int:
    return family_variant_id(config, _by_id(), "paged_attention", "paged_attention_configs")


def config_space_hash() -> str:
    """Identifies the compiled paged attention catalog."""
    return _C.paged_attention_config_space_hash()


_choices: dict[tuple, tuple[int, int]] = {}
MAX_CACHED_CHOICES = 4096


def _choice(device: int, sizes: tuple, dtype_code: int, args: tuple) -> tuple[int, int]:
    """paged_attention_choice on ``device`` (the current one), once per size: the wave model reads sizes only,
    so the pointers and strides in ``args`` (which it validates) are not part of the key."""
    key = (device, sizes, dtype_code)
    if key not in _choices:
        if len(_choices) >= MAX_CACHED_CHOICES:
            _choices.clear()
        _choices[key] = _C.paged_attention_choice(sizes, *args, dtype_code)
    return _choices[key]


def _describe(t) -> str:
    return f"{t.dtype} {tuple(t.shape)}" if hasattr(t, "shape") else type(t).__name__


def check_inputs(torch, q, k_cache, v_cache, block_table=None, seq_lens=None, max_seq_len=None, out=None) -> int:
    """Every check that needs no GPU and no data pointer; returns max_seq_len (given, or what the cache holds)."""
    if torch is None or not all(isinstance(t, torch.Tensor) for t in (q, k_cache, v_cache)):
        raise TypeError(f"wavetune.paged_attention takes torch tensors q, k_cache and v_cache, got "
                        f"{', '.join(type(t).__name__ for t in (q, k_cache, v_cache))}")
    if q.dim() != 3 or k_cache.dim() != 4:
        raise ValueError(f"q must be [batch, heads_q, head_dim] and the caches [pages, page_size, heads_kv, head_dim] "
                         f"(or [batch, seq, heads_kv, head_dim] without a block table), got {tuple(q.shape)} and "
                         f"{tuple(k_cache.shape)}")
    if tuple(k_cache.shape) != tuple(v_cache.shape) or k_cache.stride() != v_cache.stride():
        raise ValueError(f"k_cache and v_cache must have one shape and one set of strides, got {tuple(k_cache.shape)} "
                         f"{k_cache.stride()} and {tuple(v_cache.shape)} {v_cache.stride()}")
    batch, heads_q, head_dim = q.shape
    pages, page_size, heads_kv, cache_dim = k_cache.shape
    if cache_dim != head_dim or heads_kv == 0 or heads_q % heads_kv:
        raise ValueError(f"q {tuple(q.shape)} and the caches {tuple(k_cache.shape)} must share head_dim, and q's heads "
                         f"must be a multiple of the caches' (grouped-query attention)")
    if q.dtype not in dtype_codes(torch) or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise TypeError(f"q and the caches must all be bfloat16 or all float16, got {q.dtype}, {k_cache.dtype} and "
                        f"{v_cache.dtype}")
    for name, t in (("q", q), ("k_cache", k_cache), ("out", out)):
        if t is not None and t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(f"{name} must have a contiguous head_dim (stride 1), got strides {t.stride()}")
    if out is not None and (not isinstance(out, torch.Tensor) or out.dtype != q.dtype or out.shape != q.shape):
        raise ValueError(f"out must be a {q.dtype} tensor of shape {tuple(q.shape)}, got {_describe(out)}")
    if block_table is None:
        if pages != batch:
            raise ValueError(f"without a block table the caches are dense [batch, seq, heads_kv, head_dim]: their "
                             f"first dim {pages} must be q's batch {batch}")
        held = page_size
    else:
        if (not isinstance(block_table, torch.Tensor) or block_table.dtype != torch.int32 or block_table.dim() != 2
                or block_table.shape[0] != batch or (block_table.shape[1] > 1 and block_table.stride(1) != 1)):
            raise ValueError(f"block_table must be an int32 [batch={batch}, pages per sequence] tensor with contiguous "
                             f"rows, got {_describe(block_table)}")
        held = block_table.shape[1] * page_size
    if seq_lens is not None and (not isinstance(seq_lens, torch.Tensor) or seq_lens.dtype != torch.int32
                                 or tuple(seq_lens.shape) != (batch,) or not seq_lens.is_contiguous()):
        raise ValueError(f"seq_lens must be a contiguous int32 [batch={batch}] tensor, got {_describe(seq_lens)}")
    if max_seq_len is None:
        return held
    if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) or not 0 <= max_seq_len <= held:
        raise ValueError(f"max_seq_len must be an int in [0, {held}] (the keys the cache can hold per sequence), "
                         f"got {max_seq_len!r}")
    return max_seq_len


def paged_attention(q, k_cache, v_cache, block_table=None, seq_lens=None, *, max_seq_len=None, scale=None, out=None,
                    config=None, splits=None):
    """Decode attention: each sequence's one new query token against its cached keys and values,
    ``softmax(scale * q k^T) v`` per query head.

    q: [batch, heads_q, head_dim] CUDA tensor, bf16 or fp16; head_dim 64, 128 or 256.
    k_cache, v_cache: [pages, page_size, heads_kv, head_dim] (vLLM's and FlashInfer's NHD layout; any strides
        with a contiguous head_dim, one set for both, e.g. the two halves of one [pages, 2, ...] tensor), with
        ``block_table``: int32 [batch, pages per sequence], key j of sequence b in row j % page_size of page
        block_table[b, j // page_size] (pages in any order, any page size). Without a block table the caches
        are dense: [batch, seq, heads_kv, head_dim].
    seq_lens: int32 [batch] on the GPU, the keys each sequence attends to (at most max_seq_len; 0 gives
        zeros); default: max_seq_len each. Read by the kernel, so the call never waits for the GPU.
    max_seq_len: a host-side bound on seq_lens; the KV split count is chosen for it (default: what a row of
        the block table can hold, or the dense cache's length). Passing the batch's real maximum, as serving
        engines know it, keeps short batches from launching empty splits.
    scale: of q.k, default 1 / sqrt(head_dim). out: optional [batch, heads_q, head_dim] output.
    config, splits: force the kernel (id or name, ``paged_attention_configs()``) and the KV split count
        (1-256); default: both from a wave model of the launch (``paged_attention.h``).

    The query heads of one KV head are one tile's rows, so every KV byte is read once. Runs on the current
    torch stream of q's device; CUDA graphs capture it (the workspace comes from torch's caching allocator).
    """
    torch = sys.modules.get("torch")
    max_seq_len = check_inputs(torch, q, k_cache, v_cache, block_table, seq_lens, max_seq_len, out)
    tensors = [t for t in (q, k_cache, v_cache, block_table, seq_lens, out) if t is not None]
    device = q.get_device()
    if not all(t.is_cuda and t.get_device() == device for t in tensors):
        raise ValueError(f"q, the caches, block_table, seq_lens and out must be on one CUDA device, got "
                         f"{', '.join(str(t.device) for t in tensors)}")
    if device != torch.cuda.current_device():
        with torch.cuda.device(device):
            return paged_attention(q, k_cache, v_cache, block_table, seq_lens, max_seq_len=max_seq_len, scale=scale,
                                   out=out, config=config, splits=splits)
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    batch, heads_q, head_dim = q.shape
    page_size, heads_kv = k_cache.shape[1], k_cache.shape[2]
    sizes = (batch, heads_q, heads_kv, head_dim, page_size, max_seq_len)
    args = ((q.data_ptr(), q.stride(0), q.stride(1)),
            (k_cache.data_ptr(), v_cache.data_ptr(), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2)),
            (block_table.data_ptr(), block_table.stride(0)) if block_table is not None else (0, 0),
            seq_lens.data_ptr() if seq_lens is not None else 0, (out.data_ptr(), out.stride(0), out.stride(1)),
            1.0 / math.sqrt(head_dim) if scale is None else float(scale))
    code = dtype_codes(torch)[q.dtype]
    if out.numel() == 0:
        return out
    error = _C.paged_attention_problem_error(sizes, *args, code)
    if error:
        raise ValueError(f"wavetune.paged_attention: {error}")
    variant = _resolve(config)
    if splits is not None and (isinstance(splits, bool) or not isinstance(splits, int)
                               or not 1 <= splits <= _C.paged_attention_max_splits()):
        raise ValueError(f"splits must be an int in [1, {_C.paged_attention_max_splits()}], got {splits!r}")
    if variant < 0 or splits is None:
        chosen, chosen_splits = _choice(device, sizes, code, args)
        variant = chosen if variant < 0 else variant
        splits = chosen_splits if splits is None else splits
    workspace = torch.empty(_C.paged_attention_workspace_bytes(sizes, variant, splits), dtype=torch.uint8,
                            device=q.device)
    _C.paged_attention(sizes, *args, code, variant, splits, workspace.data_ptr(), workspace.numel(),
                       stream_getter(torch)(device))
    return out

"""The attention family's paged kernels: ``paged_attention`` (attention of new query tokens over a paged KV
cache, vLLM's and FlashInfer's layout, or over a dense cache: decode, prefill after a cached prefix),
``varlen_attention`` (packed sequences of different lengths, FlashAttention's variable-length layout) and the
kernel listing (docs/attention.md, "Paged and variable-length attention"); ``api`` exports them.

The kernels are built in (several per dtype and head dim, nothing compiled on demand), with ids of their own
(``paged_attention_configs``); their kernel and KV split count come from a wave model of the launch
(``paged_replay`` replays it offline), not from a table. torch is optional: this module never imports it. The
entry points take torch tensors, so torch is already loaded whenever a call can succeed.
"""

from __future__ import annotations

import functools
import math
import sys

from ...runtime import invariance
from ...runtime.configs import KernelConfig, family_variant_id, runnable
from ...runtime.device import dtype_codes, stream_getter
from ...runtime.native import _C


def paged_attention_configs() -> list[KernelConfig]:
    """The paged attention kernels compiled into this build that run on the current GPU
    (``runtime.configs.runnable``), by id, per dtype and head dim (``tile[2]``): two at
    head dim 256, more at 64 and 128; ``tile[0]`` is the (token, query head) rows of a CTA (16: its warps split
    the keys; 16 per warp: they split the rows; 64 per computing warpgroup: the warp-specialized kernels, schedule
    ``cooperative``), ``tile[1]`` the keys a CTA step reads."""
    return runnable(_by_id().values())


@functools.cache
def _by_id() -> dict[int, KernelConfig]:
    return {v["id"]: KernelConfig(**v) for v in _C.paged_attention_variants()}


@functools.lru_cache(maxsize=256)
def _resolve(config) -> int:
    return family_variant_id(config, _by_id(), "paged_attention", "paged_attention_configs")


_choices: dict[tuple, tuple[int, int]] = {}
MAX_CACHED_CHOICES = 4096


def _choice(device: int, sizes: tuple, dtype_code: int, args: tuple, level: str = "off") -> tuple[int, int]:
    """The paged kernels' choose (attention.h) on ``device`` (the current one) at batch-invariance ``level``, once
    per size: the wave model reads sizes (and the queries' bound, rows and mask) only, so the pointers and strides
    in ``args`` (which it validates) are not part of the key."""
    _, max_q_len, q_tokens, causal = args[5]
    key = (device, sizes, max_q_len, q_tokens, causal, args[2][3], dtype_code, level)
    if key not in _choices:
        if len(_choices) >= MAX_CACHED_CHOICES:
            _choices.clear()
        _choices[key] = _C.paged_attention_chosen_launch(sizes, *args, dtype_code, level)
    return _choices[key]


def _describe(t) -> str:
    return f"{t.dtype} {tuple(t.shape)}" if hasattr(t, "shape") else type(t).__name__


def _check_starts(torch, name: str, starts, batch: int | None = None) -> int:
    """A cumulative-length tensor (FlashAttention's cu_seqlens): int32 [batch + 1], contiguous; returns batch."""
    if (not isinstance(starts, torch.Tensor) or starts.dtype != torch.int32 or starts.dim() != 1
            or starts.shape[0] < 2 or not starts.is_contiguous() or (batch is not None and starts.shape[0] != batch + 1)):
        want = f"[batch + 1 = {batch + 1}]" if batch is not None else "[batch + 1] (at least 2)"
        raise ValueError(f"{name} must be a contiguous int32 {want} tensor of cumulative lengths, got "
                         f"{_describe(starts)}")
    return starts.shape[0] - 1


def _check_bound(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an int in [{low}, {high}], got {value!r}")
    return value


def _check_tensors(torch, q, k_cache, v_cache, out, k_rank: int, what: str):
    """Types, dtypes, head counts and strides shared by both entry points (q 3-d, k and v ``k_rank``-d)."""
    if torch is None or not all(isinstance(t, torch.Tensor) for t in (q, k_cache, v_cache)):
        raise TypeError(f"wavetune.{what} takes torch tensors q, k and v, got "
                        f"{', '.join(type(t).__name__ for t in (q, k_cache, v_cache))}")
    if tuple(k_cache.shape) != tuple(v_cache.shape) or k_cache.stride() != v_cache.stride():
        raise ValueError(f"k and v must have one shape and one set of strides, got {tuple(k_cache.shape)} "
                         f"{k_cache.stride()} and {tuple(v_cache.shape)} {v_cache.stride()}")
    if q.dim() == 3 and k_cache.dim() == k_rank:
        heads_q, head_dim = q.shape[1:]
        heads_kv, cache_dim = k_cache.shape[-2:]
        if cache_dim != head_dim or heads_kv == 0 or heads_q % heads_kv:
            raise ValueError(f"q {tuple(q.shape)} and k/v {tuple(k_cache.shape)} must share head_dim, and q's heads "
                             f"must be a multiple of k's (grouped-query attention)")
    if q.dtype not in dtype_codes(torch) or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise TypeError(f"q, k and v must all be bfloat16 or all float16, got {q.dtype}, {k_cache.dtype} and "
                        f"{v_cache.dtype}")
    for name, t in (("q", q), ("k", k_cache), ("out", out)):
        if t is not None and t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(f"{name} must have a contiguous head_dim (stride 1), got strides {t.stride()}")
    if out is not None and (not isinstance(out, torch.Tensor) or out.dtype != q.dtype or out.shape != q.shape):
        raise ValueError(f"out must be a {q.dtype} tensor of shape {tuple(q.shape)}, got {_describe(out)}")


def check_inputs(torch, q, k_cache, v_cache, block_table=None, seq_lens=None, max_seq_len=None, out=None,
                 cu_seqlens_q=None, max_seqlen_q=None) -> tuple[int, int]:
    """Every check of paged_attention that needs no GPU and no data pointer; returns (max_seq_len, max_q_len):
    given, or what the cache and q hold."""
    _check_tensors(torch, q, k_cache, v_cache, out, 4, "paged_attention")
    if q.dim() != 3 or k_cache.dim() != 4:
        raise ValueError(f"q must be [batch, heads_q, head_dim] ([tokens, heads_q, head_dim] with cu_seqlens_q) and "
                         f"the caches [pages, page_size, heads_kv, head_dim] (or [batch, seq, heads_kv, head_dim] "
                         f"without a block table), got {tuple(q.shape)} and {tuple(k_cache.shape)}")
    if cu_seqlens_q is None:
        batch, max_q_len = q.shape[0], 1
        if max_seqlen_q not in (None, 1):
            raise ValueError(f"max_seqlen_q={max_seqlen_q!r} needs cu_seqlens_q (without it q holds one token per "
                             f"sequence)")
    else:
        batch = _check_starts(torch, "cu_seqlens_q", cu_seqlens_q)
        max_q_len = q.shape[0] if max_seqlen_q is None else _check_bound("max_seqlen_q", max_seqlen_q, 1, 2**31 - 1)
    pages, page_size = k_cache.shape[:2]
    if block_table is None:
        if pages != batch:
            raise ValueError(f"without a block table the caches are dense [batch, seq, heads_kv, head_dim]: their "
                             f"first dim {pages} must be the batch {batch}")
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
        return held, max_q_len
    return _check_bound("max_seq_len", max_seq_len, 0, held), max_q_len


def check_varlen_inputs(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                        out=None) -> tuple[int, int]:
    """Every check of varlen_attention that needs no GPU and no data pointer; returns (max_seqlen_q,
    max_seqlen_k): given, or the tokens q and k hold."""
    _check_tensors(torch, q, k, v, out, 3, "varlen_attention")
    if q.dim() != 3 or k.dim() != 3:
        raise ValueError(f"q must be [total_q, heads_q, head_dim] and k, v [total_k, heads_kv, head_dim], got "
                         f"{tuple(q.shape)} and {tuple(k.shape)}")
    batch = _check_starts(torch, "cu_seqlens_q", cu_seqlens_q)
    _check_starts(torch, "cu_seqlens_k", cu_seqlens_k, batch)
    max_q = q.shape[0] if max_seqlen_q is None else _check_bound("max_seqlen_q", max_seqlen_q, 1, 2**31 - 1)
    max_k = k.shape[0] if max_seqlen_k is None else _check_bound("max_seqlen_k", max_seqlen_k, 0, k.shape[0])
    return max_q, max_k


def _problem(torch, q, k_cache, v_cache, keys: tuple, seq_lens, out, queries: tuple, sizes: tuple, scale,
             what: str) -> tuple:
    """The native problem's arguments (validated) and dtype code, for an ``out`` already made."""
    pointer = lambda t: t.data_ptr() if t is not None else 0  # noqa: E731
    table, key_starts, total_keys = keys
    q_starts, max_q_len, causal = queries
    batch, max_seq_len = sizes[0], sizes[5]
    if total_keys and max_seq_len:
        # The wave model reads the batch's fill in sixteenths, so that nearby totals share one cached choice.
        sixteenths = min(16, max(1, -(-16 * total_keys // (batch * max_seq_len))))
        total_keys = -(-sixteenths * batch * max_seq_len // 16)
    args = ((q.data_ptr(), q.stride(0), q.stride(1)),
            (k_cache.data_ptr(), v_cache.data_ptr(), k_cache.stride(0) if k_cache.dim() == 4 else 0,
             k_cache.stride(-3), k_cache.stride(-2)),
            (pointer(table), table.stride(0) if table is not None else 0, pointer(key_starts), int(total_keys or 0)),
            pointer(seq_lens), (out.data_ptr(), out.stride(0), out.stride(1)),
            (pointer(q_starts), max_q_len, q.shape[0], bool(causal)),
            1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale))
    code = dtype_codes(torch)[q.dtype]
    error = _C.paged_attention_problem_error(sizes, *args, code)
    if error:
        raise ValueError(f"wavetune.{what}: {error}")
    return args, code


def _launch(torch, q, k_cache, v_cache, keys: tuple, seq_lens, out, queries: tuple, sizes: tuple, scale, config,
            splits, what: str, level: str):
    """Validates the problem natively, picks the kernel and split count (unless forced; at batch-invariance
    ``level``) and launches."""
    tensors = [t for t in (q, k_cache, v_cache, seq_lens, out, *keys[:2], queries[0]) if isinstance(t, torch.Tensor)]
    device = q.get_device()
    if not all(t.is_cuda and t.get_device() == device for t in tensors):
        raise ValueError(f"q, k, v and every index tensor (tables, lengths, starts) and out must be on one CUDA "
                         f"device, got {', '.join(str(t.device) for t in tensors)}")
    if device != torch.cuda.current_device():
        with torch.cuda.device(device):
            return _launch(torch, q, k_cache, v_cache, keys, seq_lens, out, queries, sizes, scale, config, splits, what,
                           level)
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if out.numel() == 0:
        return out
    args, code = _problem(torch, q, k_cache, v_cache, keys, seq_lens, out, queries, sizes, scale, what)
    variant = _resolve(config)
    if splits is not None:
        _check_bound("splits", splits, 1, _C.paged_attention_max_splits())
    if variant < 0 or splits is None:
        chosen, chosen_splits = _choice(device, sizes, code, args, level)
        variant = chosen if variant < 0 else variant
        splits = chosen_splits if splits is None else splits
    workspace = torch.empty(_C.paged_attention_workspace_bytes(sizes, variant, splits, q.shape[0]), dtype=torch.uint8,
                            device=q.device)
    _C.paged_attention(sizes, *args, code, variant, splits, workspace.data_ptr(), workspace.numel(),
                       stream_getter(torch)(device))
    return out


def paged_attention(q, k_cache, v_cache, block_table=None, seq_lens=None, *, max_seq_len=None, cu_seqlens_q=None,
                    max_seqlen_q=None, causal=True, total_keys=None, scale=None, out=None, config=None, splits=None,
                    batch_invariant=None):
    """Attention of each sequence's new query tokens against its cached keys and values,
    ``softmax(scale * q k^T) v`` per query head.

    q: [batch, heads_q, head_dim] CUDA tensor, bf16 or fp16, one query per sequence (decode); or with
        ``cu_seqlens_q`` (int32 [batch + 1] on the GPU, cumulative query counts) [tokens, heads_q, head_dim],
        sequence b's queries in rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 (prefill, a chunk after a
        cached prefix, speculative tokens). head_dim 64, 128 or 256.
    k_cache, v_cache: [pages, page_size, heads_kv, head_dim] (vLLM's and FlashInfer's NHD layout; any strides
        with a contiguous head_dim, one set for both, e.g. the two halves of one [pages, 2, ...] tensor), with
        ``block_table``: int32 [batch, pages per sequence], key j of sequence b in row j % page_size of page
        block_table[b, j // page_size] (pages in any order, any page size). Without a block table the caches
        are dense: [batch, seq, heads_kv, head_dim].
    seq_lens: int32 [batch] on the GPU, the keys each sequence attends to, its new tokens' included (at most
        max_seq_len; 0 gives zeros); default: max_seq_len each. Read by the kernel, so the call never waits for
        the GPU.
    max_seq_len: a host-side bound on seq_lens; the KV split count is chosen for it (default: what a row of
        the block table can hold, or the dense cache's length). Passing the batch's real maximum, as serving
        engines know it, keeps short batches from launching empty splits.
    max_seqlen_q: a host-side bound on each sequence's queries (default: all of q's rows); queries past it are
        neither computed nor written.
    causal: query t of a sequence's n sees keys up to seq_len - n + t (its own position: the queries are the
        sequence's newest tokens); False: every key. One query sees every key either way.
    total_keys: a host-side count of all sequences' keys together (the sum of seq_lens, as serving engines
        know it); default: batch x max_seq_len. With it the split count suits a batch of mixed lengths.
    scale: of q.k, default 1 / sqrt(head_dim). out: optional output shaped as q.
    config, splits: force the kernel (id or name, ``paged_attention_configs()``) and the KV split count
        (1-256); default: both from a wave model of the launch (``attention.h``, choose).
    batch_invariant: True, False or a level name: a kernel and split count that do not depend on the batch or the
        other sequences (docs/torch.md, "Batch-invariant mode"); None: the process-wide setting.

    The query heads of one KV head are rows of one tile, so every KV byte is read once per tile. Runs on the
    current torch stream of q's device; CUDA graphs capture it (the workspace comes from torch's caching
    allocator).
    """
    torch = sys.modules.get("torch")
    max_seq_len, max_q_len = check_inputs(torch, q, k_cache, v_cache, block_table, seq_lens, max_seq_len, out,
                                          cu_seqlens_q, max_seqlen_q)
    batch = q.shape[0] if cu_seqlens_q is None else cu_seqlens_q.shape[0] - 1
    sizes = (batch, q.shape[1], k_cache.shape[2], q.shape[2], k_cache.shape[1], max_seq_len)
    if total_keys is not None:
        _check_bound("total_keys", total_keys, 0, 2**62)
    return _launch(torch, q, k_cache, v_cache, (block_table, None, total_keys), seq_lens, out,
                   (cu_seqlens_q, max_q_len, causal), sizes, scale, config, splits, "paged_attention",
                   invariance.requested(batch_invariant))


_flash_refused: set[tuple] = set()  # problems PyTorch's FlashAttention-2 refused once (shapes, dtype, causal)


def _flash_varlen(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, max_q: int, max_k: int, causal: bool, scale, out):
    """``out`` (or a new tensor) from PyTorch's variable-length FlashAttention-2 (what torch.nn.attention.varlen
    calls); None where it refuses the problem (remembered, so it is asked once).

    NOTES: see _prompts_prefer_flash for the problems sent here."""
    key = (q.shape, k.shape, q.stride(), k.stride(), v.stride(), q.dtype, causal)
    if key in _flash_refused:
        return None
    try:
        result = torch.ops.aten._flash_attention_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max(max_q, 1),
                                                         max(max_k, 1), 0.0, causal, False, scale=scale)[0]
    except (RuntimeError, TypeError):
        _flash_refused.add(key)
        return None
    return result if out is None else out.copy_(result)


def _prompts_prefer_flash(q, k) -> bool:
    """Whether a varlen batch goes to PyTorch's FlashAttention-2 first: packed prompts (the queries are at least
    half the keys) of head dim 256, which no wgmma kernel takes.

    NOTES: long prefill is tensor-core bound. Up to head dim 128 the warp-specialized wgmma kernel, at the wave
    model's choice, ran 1.35-2.4x FlashAttention-2's speed on 21 of 22 prompt batches of the design and held-out
    sweeps (docs/attention.md, "Paged and variable-length attention"; H100), the other a 39-token prompt (1.5 us
    behind); at head dim 256 the mma.sync kernels ran 0.78-0.84x. Few queries per key (chunks after a prefix,
    speculative steps) stay on these kernels, which ran 2-15x faster there."""
    return 2 * q.shape[0] >= k.shape[0] and q.shape[2] > 128


def _varlen_sizes(q, k, cu_seqlens_q, max_k: int) -> tuple:
    """The native sizes of packed sequences: each sequence's keys are rows of one tensor (page size unused)."""
    return (cu_seqlens_q.shape[0] - 1, q.shape[1], k.shape[1], q.shape[2], max(max_k, 1), max_k)


def varlen_kernel_choice(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, *,
                         causal=False) -> tuple[int, int]:
    """(kernel id, KV splits) the wave model picks for ``varlen_attention``'s problem on these kernels, whether
    or not the call would run them (benchmarks time it forced)."""
    torch = sys.modules.get("torch")
    max_q, max_k = check_varlen_inputs(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    sizes = _varlen_sizes(q, k, cu_seqlens_q, max_k)
    args, code = _problem(torch, q, k, v, (None, cu_seqlens_k, k.shape[0]), None, q, (cu_seqlens_q, max_q, causal),
                          sizes, None, "varlen_attention")
    return _choice(q.get_device(), sizes, code, args)


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, *, causal=False,
                     scale=None, out=None, config=None, splits=None, batch_invariant=None):
    """Attention over a batch of sequences of different lengths packed without padding (FlashAttention's
    ``flash_attn_varlen_func`` layout): sequence b's queries are rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1
    of q, its keys and values rows cu_seqlens_k[b] .. cu_seqlens_k[b + 1] - 1 of k and v.

    q: [total_q, heads_q, head_dim]; k, v: [total_k, heads_kv, head_dim] (one set of strides, contiguous
        head_dim); bf16 or fp16 CUDA tensors, head_dim 64, 128 or 256, heads_q a multiple of heads_kv.
    cu_seqlens_q, cu_seqlens_k: int32 [batch + 1] on the GPU, cumulative lengths (never read on the host).
    max_seqlen_q, max_seqlen_k: host-side bounds on the lengths (default: q's and k's rows); the kernel and
        split count are chosen for them, and queries or keys past them are not computed.
    causal: the bottom-right mask (query t of a sequence with n queries and m keys sees keys up to m - n + t),
        as FlashAttention's; a prefill (n == m) is the usual causal mask.
    scale, out, config, splits, batch_invariant: as ``paged_attention``.

    Without config or splits, a batch of head dim 256 whose queries are at least half its keys (prompts without
    a cached prefix) runs PyTorch's variable-length FlashAttention-2 (faster there), except batch-invariant calls;
    others run these kernels.
    """
    torch = sys.modules.get("torch")
    max_q, max_k = check_varlen_inputs(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, out)
    level = invariance.requested(batch_invariant)
    routable = all(t.is_cuda for t in (q, k, v, cu_seqlens_q, cu_seqlens_k)) and q.numel() and level == "off"
    if config is None and splits is None and _prompts_prefer_flash(q, k) and routable:
        done = _flash_varlen(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, causal, scale, out)
        if done is not None:
            return done
    sizes = _varlen_sizes(q, k, cu_seqlens_q, max_k)
    return _launch(torch, q, k, v, (None, cu_seqlens_k, k.shape[0]), None, out, (cu_seqlens_q, max_q, causal), sizes,
                   scale, config, splits, "varlen_attention", level)

"""Several query tokens per sequence on the paged attention kernels: wavetune.varlen_attention (packed
sequences of different lengths, FlashAttention's layout) and wavetune.paged_attention with cu_seqlens_q
(prefill after a cached prefix on a paged cache). CPU tier: input checks and the fake kernels. GPU tier:
every kernel, forced and chosen, split and unsplit, against fp32 attention (random data, odd lengths, empty
sequences, more queries than keys, grouped-query heads of 1-24 per KV head, pages out of order, poisoned
outputs, padding rows left alone), with and without programmatic dependent launch, CUDA graphs replayed on
new lengths, and torch.compile."""

from __future__ import annotations

import math

import pytest

import wavetune
from wavetune import _C

torch = pytest.importorskip("torch")


def starts(lengths, device="cpu"):
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=torch.int32, device=device)


def cpu_varlen(heads_q=8, heads_kv=2, head_dim=64):
    q = torch.randn(10, heads_q, head_dim, dtype=torch.bfloat16)
    k = torch.randn(12, heads_kv, head_dim, dtype=torch.bfloat16)
    return q, k, k.clone(), starts([4, 6]), starts([5, 7])


@pytest.mark.parametrize("tokens_q, tokens_k, heads_q, heads_kv, head_dim, flash", [
    (100, 100, 32, 32, 128, False),   # prompts, multi-head: the wgmma kernel
    (100, 100, 32, 8, 64, False),
    (100, 100, 32, 8, 256, True),     # head dim 256: no wgmma kernel
    (100, 100, 32, 32, 256, True),
    (100, 200, 32, 32, 256, True),    # queries half the keys
    (100, 201, 32, 32, 256, False),   # fewer: a chunk after a prefix
])
def test_which_batches_go_to_flash_attention(tokens_q, tokens_k, heads_q, heads_kv, head_dim, flash):
    from wavetune.families.attention.paged import _prompts_prefer_flash

    q = torch.empty(tokens_q, heads_q, head_dim, dtype=torch.bfloat16)
    k = torch.empty(tokens_k, heads_kv, head_dim, dtype=torch.bfloat16)
    assert _prompts_prefer_flash(q, k) == flash


@pytest.mark.parametrize("change, error, match", [
    (lambda q, k, v, cq, ck: (q.float(), k, v, cq, ck), TypeError, "must all be bfloat16 or all float16"),
    (lambda q, k, v, cq, ck: (q[:, :5], k, v, cq, ck), ValueError, "multiple of k's"),
    (lambda q, k, v, cq, ck: (q, k, v[:6], cq, ck), ValueError, "one shape and one set of strides"),
    (lambda q, k, v, cq, ck: (q.unsqueeze(0), k, v, cq, ck), ValueError, r"q must be \[total_q, heads_q, head_dim\]"),
    (lambda q, k, v, cq, ck: (q, k, v, cq.long(), ck), ValueError, "cu_seqlens_q must be a contiguous int32"),
    (lambda q, k, v, cq, ck: (q, k, v, cq[:1], ck), ValueError, "cu_seqlens_q must be"),
    (lambda q, k, v, cq, ck: (q, k, v, cq, ck[:2]), ValueError, r"cu_seqlens_k must be a contiguous int32 \[batch \+ 1 = 3\]"),
    (lambda q, k, v, cq, ck: (q, k, v, cq, ck), ValueError, "on one CUDA device"),
])
def test_bad_varlen_inputs_name_the_problem(change, error, match):
    with pytest.raises(error, match=match):
        wavetune.varlen_attention(*change(*cpu_varlen()))


def test_varlen_bounds_are_checked():
    q, k, v, cq, ck = cpu_varlen()
    with pytest.raises(ValueError, match=r"max_seqlen_k must be an int in \[0, 12\]"):
        wavetune.varlen_attention(q, k, v, cq, ck, 6, 13)
    with pytest.raises(ValueError, match=r"max_seqlen_q must be an int in \[1, "):
        wavetune.varlen_attention(q, k, v, cq, ck, 0, 7)


def test_paged_queries_need_their_starts():
    q = torch.randn(2, 8, 64, dtype=torch.bfloat16)
    k = torch.randn(4, 16, 2, 64, dtype=torch.bfloat16)
    table = torch.zeros(2, 2, dtype=torch.int32)
    with pytest.raises(ValueError, match="max_seqlen_q=4 needs cu_seqlens_q"):
        wavetune.paged_attention(q, k, k, table, max_seqlen_q=4)
    with pytest.raises(ValueError, match=r"block_table must be an int32 \[batch=3"):
        wavetune.paged_attention(q, k, k, table, cu_seqlens_q=starts([1, 0, 1]))


def test_the_native_checks_want_the_rows_of_q_with_its_starts():
    sizes = (2, 8, 2, 64, 16, 32)  # batch, heads_q, heads_kv, head_dim, page_size, max_seq_len
    rows, caches, keys = (16, 512, 64), (16, 16, 2048, 128, 64), (16, 2, 0, 0)
    queries = (16, 4, 0, True)  # q_starts given, max_q_len 4, q_tokens missing
    error = _C.paged_attention_problem_error(sizes, rows, caches, keys, 0, rows, queries, 0.125, 0)
    assert "q_tokens must give the rows of q" in error
    assert _C.paged_attention_problem_error(sizes, rows, caches, keys, 0, rows, (16, 4, 7, True), 0.125, 0) == ""


def test_the_fake_kernels_check_and_shape():
    import wavetune.torch_ops  # noqa: F401
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q, k, v, cq, ck = cpu_varlen()
        out = torch.ops.wavetune.varlen_attention(q, k, v, cq, ck, 6, 7, True)
        assert out.shape == q.shape and out.dtype == q.dtype
        with pytest.raises(ValueError, match="cu_seqlens_k must be"):
            torch.ops.wavetune.varlen_attention(q, k, v, cq, ck.float())
        cache = torch.randn(4, 16, 2, 64, dtype=torch.bfloat16)
        out = torch.ops.wavetune.paged_attention(q, cache, cache, torch.zeros(2, 2, dtype=torch.int32), None, None,
                                                 None, cq, 6)
        assert out.shape == q.shape


def test_workspace_counts_query_tokens():
    sizes = (3, 32, 8, 128, 16, 1000)
    config = wavetune.paged_attention_configs()
    for c in config:
        steps = -(-1000 // c.tile[1])
        assert _C.paged_attention_workspace_bytes(sizes, c.id, 200, 50) == 50 * 32 * steps * (128 + 1) * 4 + 3 * 4


# ---- GPU tier -----------------------------------------------------------------------------------------

def reference(q, keys, values, q_lengths, k_lengths, causal, scale=None):
    """fp32 attention per sequence: q [total_q, hq, d]; keys/values lists of [m, hkv, d]; bottom-right mask;
    rows that see no key are zeros."""
    heads_q, head_dim = q.shape[1:]
    scale = 1 / math.sqrt(head_dim) if scale is None else scale
    out = torch.zeros(q.shape, device=q.device)
    row = 0
    for n, m, k, v in zip(q_lengths, k_lengths, keys, values):
        if n == 0:
            continue
        group = heads_q // k.shape[1]
        qs = q[row:row + n].float()
        kk = k.float().repeat_interleave(group, dim=1)
        vv = v.float().repeat_interleave(group, dim=1)
        scores = torch.einsum("nhd,mhd->hnm", qs, kk) * scale
        if causal:
            visible = torch.arange(m, device=q.device)[None] <= (m - n + torch.arange(n, device=q.device))[:, None]
            scores = scores.masked_fill(~visible, float("-inf"))
        weights = scores.softmax(-1).nan_to_num(0.0)
        out[row:row + n] = torch.einsum("hnm,mhd->nhd", weights, vv)
        row += n
    return out


def assert_close(got, want, rows=None):
    got = got if rows is None else got[:rows]
    want = want if rows is None else want[:rows]
    assert not got.isnan().any(), "part of the output was left unwritten"
    error = ((got.float() - want).norm() / want.norm().clamp_min(1e-6)).item()
    assert error < 1e-2, error


def varlen_case(q_lengths, k_lengths, heads_q, heads_kv, head_dim, dtype=torch.bfloat16, seed=0, pad_q=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    opts = dict(device="cuda", dtype=dtype)
    q = torch.randn(sum(q_lengths) + pad_q, heads_q, head_dim, generator=g, **opts)
    k = torch.randn(sum(k_lengths), heads_kv, head_dim, generator=g, **opts)
    v = torch.randn(sum(k_lengths), heads_kv, head_dim, generator=g, **opts)
    return q, k, v, starts(q_lengths, "cuda"), starts(k_lengths, "cuda")


def split_keys(k, k_lengths):
    return list(torch.split(k, k_lengths))


def kernels(head_dim, dtype="bf16"):
    return [c.id for c in wavetune.paged_attention_configs() if c.dtype == dtype and c.tile[2] == head_dim]


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("heads_q, heads_kv", [(32, 8), (28, 4), (8, 8), (24, 1)])
@pytest.mark.parametrize("causal", [True, False])
def test_every_kernel_against_fp32(head_dim, heads_q, heads_kv, causal):
    q_lengths, k_lengths = [1, 37, 0, 130, 9], [1, 37, 5, 300, 4]  # a prefill, a chunk after a prefix, n > m
    q, k, v, cq, ck = varlen_case(q_lengths, k_lengths, heads_q, heads_kv, head_dim, seed=head_dim + heads_q)
    want = reference(q, split_keys(k, k_lengths), split_keys(v, k_lengths), q_lengths, k_lengths, causal)
    for config, splits in [(None, None), *((c, s) for c in kernels(head_dim) for s in (1, 3))]:
        out = torch.full_like(q, float("nan"))
        got = wavetune.varlen_attention(q, k, v, cq, ck, max(q_lengths), max(k_lengths), causal=causal, out=out,
                                        config=config, splits=splits)
        assert got is out
        assert_close(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_long_prompts_and_dtypes(dtype):
    q_lengths = [1000, 2049, 17]
    q, k, v, cq, ck = varlen_case(q_lengths, q_lengths, 32, 8, 128, dtype=dtype, seed=1)
    got = wavetune.varlen_attention(q, k, v, cq, ck, 2049, 2049, causal=True, scale=0.07)
    assert got.dtype == dtype
    assert_close(got, reference(q, split_keys(k, q_lengths), split_keys(v, q_lengths), q_lengths, q_lengths, True,
                                scale=0.07))


@pytest.mark.gpu
@pytest.mark.parametrize("splits", [1, 4])
def test_padding_rows_are_left_alone(splits):
    """Rows of q past the last sequence's queries (a graph's padding) are neither computed nor written."""
    q_lengths = [5, 70]
    q, k, v, cq, ck = varlen_case(q_lengths, q_lengths, 16, 4, 128, seed=2, pad_q=9)
    for config in kernels(128):
        out = torch.full_like(q, float("nan"))
        wavetune.varlen_attention(q, k, v, cq, ck, 70, 70, causal=True, out=out, config=config, splits=splits)
        want = reference(q, split_keys(k, q_lengths), split_keys(v, q_lengths), q_lengths, q_lengths, True)
        assert_close(out, want, rows=75)
        assert out[75:].isnan().all()


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [64, 128])
def test_out_views_without_16_byte_rows(head_dim):
    """A view of out whose rows do not start on 16 bytes (a slice of a wider buffer) gets every value, and
    nothing beside it is written."""
    q_lengths, k_lengths = [3, 150, 41], [3, 400, 41]
    q, k, v, cq, ck = varlen_case(q_lengths, k_lengths, 12, 4, head_dim, seed=5)
    want = reference(q, split_keys(k, k_lengths), split_keys(v, k_lengths), q_lengths, k_lengths, True)
    for config in kernels(head_dim):
        wide = torch.full((q.shape[0], q.shape[1], head_dim + 3), float("nan"), device="cuda", dtype=q.dtype)
        out = wide[..., 1:head_dim + 1]
        wavetune.varlen_attention(q, k, v, cq, ck, 150, 400, causal=True, out=out, config=config, splits=1)
        assert_close(out, want)
        assert wide[..., 0].isnan().all() and wide[..., head_dim + 1:].isnan().all()


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [16, 100, 256])
def test_prefill_after_a_paged_prefix(page_size):
    """Chunked prefill: each sequence's new tokens attend to its cached prefix (pages in random order) and to
    themselves, causally; seq_lens count both."""
    g = torch.Generator(device="cuda").manual_seed(page_size)
    opts = dict(device="cuda", dtype=torch.bfloat16)
    prefix, new = [0, 700, 33, 4000], [64, 1, 300, 17]
    totals = [p + n for p, n in zip(prefix, new)]
    per_seq = max(-(-t // page_size) for t in totals)
    pool = len(totals) * per_seq + 2
    k_cache = torch.randn(pool, page_size, 4, 128, generator=g, **opts)
    v_cache = torch.randn(pool, page_size, 4, 128, generator=g, **opts)
    table = torch.randperm(pool, generator=g, device="cuda")[:len(totals) * per_seq].view(len(totals), per_seq).int()
    q = torch.randn(sum(new), 32, 128, generator=g, **opts)
    keys = [k_cache[table[b].long()].flatten(0, 1)[:t] for b, t in enumerate(totals)]
    values = [v_cache[table[b].long()].flatten(0, 1)[:t] for b, t in enumerate(totals)]
    want = reference(q, keys, values, new, totals, causal=True)
    lens = torch.tensor(totals, dtype=torch.int32, device="cuda")
    for config, splits in [(None, None), *((c, s) for c in kernels(128) for s in (1, 5))]:
        for total_keys in (None, sum(totals)):  # the host's hint changes the choice, never the result
            out = torch.full_like(q, float("nan"))
            wavetune.paged_attention(q, k_cache, v_cache, table, lens, max_seq_len=max(totals),
                                     cu_seqlens_q=starts(new, "cuda"), max_seqlen_q=max(new), total_keys=total_keys,
                                     out=out, config=config, splits=splits)
            assert_close(out, want)


@pytest.mark.gpu
def test_pdl_on_and_off_give_the_same_bits():
    q_lengths = [300, 45]
    q, k, v, cq, ck = varlen_case(q_lengths, [900, 45], 32, 8, 128, seed=3)
    for config in kernels(128):
        _C.set_programmatic_launch(False)
        try:
            off = wavetune.varlen_attention(q, k, v, cq, ck, 300, 900, causal=True, config=config, splits=3)
        finally:
            _C.set_programmatic_launch(True)
        on = wavetune.varlen_attention(q, k, v, cq, ck, 300, 900, causal=True, config=config, splits=3)
        assert torch.equal(on, off)


@pytest.mark.gpu
def test_cuda_graph_replays_new_lengths():
    """One graph captured with bounds, replayed on batches whose lengths differ (an engine's padded step)."""
    import wavetune.torch_ops  # noqa: F401
    from wavetune.tuning.timing import capture_documented

    q, k, v, cq, ck = varlen_case([100, 200, 50], [100, 200, 50], 16, 4, 128, seed=4)

    def step():
        return torch.ops.wavetune.varlen_attention(q, k, v, cq, ck, 256, 350, True)

    graph, y = capture_documented(step)  # PyTorch's example: warm-up on a side stream, then torch.cuda.graph
    q_lengths = [250, 10, 90]  # same totals, other sequences
    cq.copy_(starts(q_lengths, "cuda"))
    ck.copy_(starts(q_lengths, "cuda"))
    q.normal_()
    y.fill_(float("nan"))
    graph.replay()
    assert_close(y, reference(q, split_keys(k, q_lengths), split_keys(v, q_lengths), q_lengths, q_lengths, True))
    assert torch.equal(y, step())


@pytest.mark.gpu
def test_torch_compile_fullgraph():
    import wavetune.torch_ops  # noqa: F401

    q, k, v, cq, ck = varlen_case([30, 70], [30, 70], 16, 4, 64, seed=5)

    def prefill(q):
        return torch.ops.wavetune.varlen_attention(q * 2, k, v, cq, ck, 70, 70, True)

    compiled = torch.compile(prefill, fullgraph=True)
    assert torch.equal(compiled(q), prefill(q))

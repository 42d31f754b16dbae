"""GPU tier of the attention family: every compiled attention variant against
torch.nn.functional.scaled_dot_product_attention in fp32 on fresh random data: causal and not, grouped
query heads, decode with and without KV splits, odd lengths, strided (cache-like) K and V.

Outputs are poisoned with NaN first, so an unwritten element fails. Skipped, with the reason, without a
Hopper GPU, torch with CUDA, or compiled attention variants.
"""

from __future__ import annotations

import pytest

import wavetune

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
TOLERANCE = 2e-2  # relative Frobenius error of 16-bit outputs (and 16-bit split partials)

# (name, batch, seqlen_q, seqlen_k, heads_q, heads_kv, causal, splits)
PREFILL = [
    ("mha_odd", 2, 777, 777, 4, 4, False, 1),
    ("mha_causal_odd", 2, 333, 333, 4, 4, True, 1),
    ("gqa_causal_prefix", 3, 129, 1001, 8, 2, True, 1),  # K and V expanded to the query heads
    ("gqa_launch_per_sequence", 2, 1100, 1100, 64, 8, True, 1),
    ("gqa_batch1", 1, 256, 300, 8, 2, False, 1),
    ("causal_one_tile", 1, 40, 40, 2, 1, True, 1),
]
DECODE = [
    ("decode_unsplit", 4, 1, 1000, 8, 2, False, 1),
    ("decode_split_batch1", 1, 1, 4099, 8, 1, False, 7),
    ("decode_split_batched", 3, 1, 2053, 16, 4, False, 5),
    ("decode_mha_split", 2, 1, 777, 4, 4, True, 3),
]


def operands(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype, cache_len=None):
    """q, k, v with fresh random data; k and v as slices of a longer cache when cache_len is given."""
    q = torch.randn(batch, seqlen_q, heads_q, head_dim, device="cuda", dtype=dtype)
    cache = cache_len or seqlen_k
    k = torch.randn(batch, cache, heads_kv, head_dim, device="cuda", dtype=dtype)[:, :seqlen_k]
    v = torch.randn(batch, cache, heads_kv, head_dim, device="cuda", dtype=dtype)[:, :seqlen_k]
    return q, k, v


def reference(q, k, v, causal):
    """fp32 SDPA with the bottom-right causal mask and grouped-query heads repeated."""
    group = q.shape[2] // k.shape[2]
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    kf, vf = kf.repeat_interleave(group, dim=1), vf.repeat_interleave(group, dim=1)
    mask = None
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(diagonal=sk - sq)
    out = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask)
    return out.transpose(1, 2)


def check(got, ref, what):
    torch.cuda.synchronize()
    assert not got.isnan().any(), f"{what}: not every element written"
    error = ((got.float() - ref).norm() / ref.norm()).item()
    assert error < TOLERANCE, f"{what}: relative error {error:.3g}"


def fmha_configs(head_dim: int | None = None) -> list:
    """The build's bf16 FMHA variants (of a head dim), not the cuDNN and paged candidates."""
    return [c for c in wavetune.attention_configs()
            if c.dtype == "bf16" and not c.from_library and head_dim in (None, c.tile[2])]


def attention_variants():
    return [pytest.param(c, id=c.name) for c in wavetune.attention_configs() if not c.from_library]


@pytest.mark.parametrize("case", PREFILL + DECODE, ids=lambda c: c[0])
@pytest.mark.parametrize("config", attention_variants())
def test_every_variant_matches_sdpa(config, case):
    name, batch, sq, sk, hq, hkv, causal, splits = case
    q, k, v = operands(batch, sq, sk, hq, hkv, config.tile[2], DTYPES[config.dtype], cache_len=sk + 64)
    out = torch.full_like(q, float("nan"))
    wavetune.attention(q, k, v, causal=causal, out=out, config=config.id, splits=splits)
    check(out, reference(q, k, v, causal), f"{config.name} {name}")


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("shape", [(1, 1, 65536, 32, 8), (8, 1, 3000, 32, 8), (2, 2048, 2048, 16, 16)])
def test_default_choice_matches_sdpa(head_dim, shape):
    batch, sq, sk, hq, hkv = shape
    if not fmha_configs(head_dim):
        pytest.skip(f"no bf16 head_dim {head_dim} variant in this build")
    q, k, v = operands(batch, sq, sk, hq, hkv, head_dim, torch.bfloat16)
    for causal in (False, True):
        check(wavetune.attention(q, k, v, causal=causal), reference(q, k, v, causal), f"default {shape} causal={causal}")


def test_prefill_runs_cudnn_where_its_mask_is_ours():
    """Prefill with no forced config is cuDNN's SDPA (the same bits) when SDPA's top-left causal mask is the
    bottom-right one (as many queries as keys) or there is none; a causal prefill after a prefix is not."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = operands(2, 300, 300, 16, 4, 128, torch.bfloat16)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        cudnn = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True).transpose(1, 2)
    got = wavetune.attention(q, k, v, causal=True)
    assert got.is_contiguous() and torch.equal(got, cudnn)
    out = torch.full_like(q, float("nan"))
    assert wavetune.attention(q, k, v, causal=True, out=out) is out and torch.equal(out, cudnn)
    q, k, v = operands(2, 100, 700, 16, 4, 128, torch.bfloat16)
    check(wavetune.attention(q, k, v, causal=True), reference(q, k, v, True), "causal after a prefix")


@pytest.fixture
def no_attention_table():
    """The built-in choice: no attention table on device 0 during the test (the loaded one back after)."""
    from wavetune import _C
    from wavetune.runtime import tables

    wavetune.attention(*operands(1, 1, 64, 2, 2, 128, torch.bfloat16))  # loads the GPU's table, as a first call does
    loaded = tables.loaded_table(0, "attention")
    _C.use_table(0, None, "attention")
    yield _C
    _C.use_table(0, _C.Selector(loaded, "attention") if loaded else None, "attention")


@pytest.mark.parametrize("batch, seqlen_k, heads, head_dim, routes, schedule", [
    (8, 6400, (32, 8), 128, (True, True, False), "cudnn"),    # 210 MB of K and V, no copy into out=: cuDNN
    (8, 6400, (32, 8), 128, (True, True, True), "paged"),     # out= given: the copy costs what cuDNN gains
    (64, 12288, (32, 8), 128, (True, True, False), "paged"),  # past a gigabyte the paged kernel's splits win
    (1, 1280, (16, 8), 256, (True, True, False), "paged"),    # head dim 256: the paged kernel
    (64, 40960, (128, 8), 64, (True, True, True), "cudnn"),   # 16 query heads per 64-dim KV head: cuDNN always
    (4, 1280, (128, 8), 64, (False, True, False), "paged"),   # no cuDNN route (deterministic algorithms)
    (4, 1280, (32, 8), 128, (False, False, False), "fmha"),   # neither route (K and V of different strides)
])
def test_builtin_decode_choice_routes(no_attention_table, batch, seqlen_k, heads, head_dim, routes, schedule):
    """Without a table that prices cuDNN and the paged kernel, decode follows the measured built-in rule."""
    _C = no_attention_table
    if schedule == "fmha" and not fmha_configs(head_dim):
        pytest.skip(f"no bf16 head_dim {head_dim} FMHA variant in this build")
    hq, hkv = heads
    q = (16, hq * head_dim, hq * head_dim, head_dim)  # aligned pointers: the choice reads sizes only
    kv = (16, seqlen_k * hkv * head_dim, hkv * head_dim, head_dim)
    variant, splits = _C.attention_chosen_launch((batch, 1, seqlen_k, hq, hkv, head_dim), q, kv, kv, q, 1.0, False,
                                                 0, 0, routes)
    got = {c.id: c.schedule for c in wavetune.attention_configs()}[variant]
    assert (got if got in ("cudnn", "paged") else "fmha") == schedule
    assert splits == 1 or schedule == "fmha"


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_forced_cudnn_and_paged_candidates_match_sdpa(head_dim):
    """The cuDNN and paged candidates run when forced by name, and refuse what they cannot run."""
    q, k, v = operands(3, 1, 1000, 16, 4, head_dim, torch.bfloat16)
    ref = reference(q, k, v, False)
    for schedule in ("cudnn", "paged"):
        out = torch.full_like(q, float("nan"))
        name = f"attn_{schedule}_bf16_hd{head_dim}"
        assert wavetune.attention(q, k, v, config=name, out=out) is out
        check(out, ref, name)
        with pytest.raises(ValueError, match="chooses its own"):
            wavetune.attention(q, k, v, config=name, splits=2)
    q, k, v = operands(2, 100, 300, 8, 2, head_dim, torch.bfloat16)
    with pytest.raises(ValueError, match="seqlen_q == 1"):
        wavetune.attention(q, k, v, config=f"attn_paged_bf16_hd{head_dim}")
    with pytest.raises(ValueError, match="top-left"):
        wavetune.attention(q, k, v, causal=True, config=f"attn_cudnn_bf16_hd{head_dim}")
    prefill = wavetune.attention(q, k, v, config=f"attn_cudnn_bf16_hd{head_dim}")
    check(prefill, reference(q, k, v, False), "cudnn prefill")


def test_scale_and_the_torch_operator():
    import wavetune.torch_ops  # noqa: F401  (registers torch.ops.wavetune.attention)

    if not fmha_configs(128):
        pytest.skip("no bf16 head_dim 128 variant in this build")
    q, k, v = operands(2, 100, 300, 8, 8, 128, torch.bfloat16)
    ref = reference(q * 0.5 * 128**0.5, k, v, True)  # scale 0.5 == default scale on scaled queries
    check(torch.ops.wavetune.attention(q, k, v, True, 0.5), ref, "torch op with scale")
    graph_out = torch.compile(lambda a, b, c: torch.ops.wavetune.attention(a, b, c, True, 0.5), fullgraph=True)(q, k, v)
    check(graph_out, ref, "torch.compile")


def test_cuda_graph_capture_replays_the_same_result():
    if not fmha_configs(128):
        pytest.skip("no bf16 head_dim 128 variant in this build")
    q, k, v = operands(4, 1, 5000, 32, 8, 128, torch.bfloat16)
    expected = wavetune.attention(q, k, v)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = wavetune.attention(q, k, v)
    out.fill_(float("nan"))
    graph.replay()
    check(out, expected.float(), "graph replay")


def test_launch_errors_name_the_problem():
    configs = fmha_configs()
    if not configs:
        pytest.skip("no bf16 attention variant in this build")
    c = configs[0]
    q, k, v = operands(2, 16, 64, 4, 4, c.tile[2], torch.bfloat16)
    with pytest.raises(ValueError, match="decode"):
        wavetune.attention(q, k, v, config=c.id, splits=2)
    with pytest.raises(ValueError, match="splits must be"):
        wavetune.attention(q[:, :1], k, v, config=c.id, splits=0)
    with pytest.raises(ValueError, match="takes bf16"):
        wavetune.attention(q.half(), k.half(), v.half(), config=c.id)
    with pytest.raises(ValueError, match="seqlen_q <= seqlen_k"):
        wavetune.attention(k, q, q, causal=True)
    with pytest.raises(ValueError, match="16-byte aligned"):
        flat = torch.randn(2 * 16 * 4 * c.tile[2] + 1, device="cuda", dtype=torch.bfloat16)
        wavetune.attention(flat[1:].view(q.shape), k, v)

"""CPU tier of the attention family: its config space, the (G, L) mapping and the built-in choice of tile
and KV splits, FlashAttention's split rule, and the argument checks that need no GPU."""

from __future__ import annotations

import math

import pytest

import wavetune
from wavetune import _C
from wavetune.codegen import config_space

from conftest import REPO, family_table

ATTENTION_SPACE = REPO / "cutlass_configs" / "sm90_attention.toml"
H100_SMS = 132


def test_shipped_attention_space_covers_every_head_dim_and_dtype():
    space = config_space.load(ATTENTION_SPACE)
    assert space.family == "attention"
    assert {(v.dtype, v.tile_k) for v in space.variants} == {(d, h) for d in ("bf16", "fp16") for h in (64, 128, 256)}
    assert all(v.name.startswith("attn_") and v.cluster_m == v.cluster_n == 1 for v in space.variants)
    heuristic = [v for v in space.variants if config_space._matches(v, space.heuristic_variants)]
    assert {(v.dtype, v.tile_k) for v in heuristic} == {(v.dtype, v.tile_k) for v in space.variants}


@pytest.mark.parametrize("group, message", [
    ('schedule = "cooperative"\ntiles = ["128x128x256"]\nschedulers = ["data_parallel"]', "too few shared-memory"),
    ('schedule = "pingpong"\ntiles = ["128x128x128"]\nschedulers = ["data_parallel"]', "persistent by construction"),
    ('schedule = "pingpong"\ntiles = ["128x64x256"]\nschedulers = ["persistent"]', "overflow shared memory"),
    ('schedule = "cooperative"\ntiles = ["64x128x128"]\nschedulers = ["persistent"]', "not supported"),
    ('schedule = "cooperative"\ntiles = ["128x128x96"]\nschedulers = ["persistent"]', "not supported"),
    ('schedule = "cooperative"\ntiles = ["128x128x128"]\nschedulers = ["stream_k"]', "persistent or data_parallel"),
    ('schedule = "cooperative"\ntiles = ["128x128x128"]\nschedulers = ["persistent"]\nclusters = ["2x1"]',
     "clusters"),
])
def test_attention_configs_that_cannot_build_are_refused(tmp_path, group, message):
    path = tmp_path / "attention.toml"
    path.write_text(f'schema = 1\narch = "sm90a"\n[[group]]\ndtypes = ["bf16"]\n{group}\n' + family_table("attention"))
    with pytest.raises(config_space.ConfigError, match=message):
        config_space.load(path)


def test_gemm_variants_refuse_the_data_parallel_scheduler(tmp_path):
    path = tmp_path / "gemm.toml"
    path.write_text('schema = 1\narch = "sm90a"\n[[group]]\ndtypes = ["bf16"]\nb_layouts = ["col"]\n'
                    'schedule = "cooperative"\ntiles = ["128x128x64"]\nclusters = ["1x1"]\nschedulers = ["data_parallel"]\n'
                    + family_table())
    with pytest.raises(config_space.ConfigError, match="run-time decomposition"):
        config_space.load(path)


def test_mapping_counts_ctas_and_kv_tiles():
    tile = (128, 128, 128)
    # Prefill, no GQA: B x H x query tiles CTAs, each walking every KV tile.
    assert _C.attention_mapping((2, 1000, 1000, 8, 8, 128), False, tile, 1) == (2 * 8 * 8, 8.0, 8, 1)
    # Causal, 256 queries over 256 keys in 128-tiles: query tile 0 walks 1 KV tile, tile 1 walks 2.
    assert _C.attention_mapping((1, 256, 256, 1, 1, 128), True, tile, 1) == (2, 1.5, 2, 1)
    # A causal chunk after a 1000-token prefix sees the prefix whole: tiles 0 and 1 walk 9 and 10.
    assert _C.attention_mapping((1, 256, 1256, 1, 1, 128), True, tile, 1) == (2, 9.5, 10, 1)
    # GQA prefill, batch > 1, long sequences: one launch per sequence, a group's query heads a batch mode.
    assert _C.attention_mapping((4, 4096, 4096, 64, 8, 128), False, tile, 1) == (4 * 8 * 8 * 32, 32.0, 32, 4)
    # Short sequences: K and V expanded to the query heads, one launch.
    assert _C.attention_mapping((3, 128, 128, 32, 8, 128), False, tile, 1) == (3 * 32, 1.0, 1, 1)
    # Decode: a KV head's 4 query heads share a tile; 8 splits cut 4096 keys into 512-key chunks.
    assert _C.attention_mapping((1, 1, 4096, 32, 8, 128), False, tile, 8) == (8 * 8, 4.0, 4, 1)


def test_decode_with_few_ctas_is_split_to_fill_the_gpu():
    tiles = [(128, 128, 128)]
    index, splits = _C.attention_heuristic(tiles, (1, 1, 32768, 32, 8, 128), False, H100_SMS)
    assert splits > 1 and H100_SMS / 2 < 8 * splits <= H100_SMS
    # Enough CTAs already (batch 64 x 8 KV heads): no split.
    assert _C.attention_heuristic(tiles, (64, 1, 4096, 32, 8, 128), False, H100_SMS) == (0, 1)
    # Prefill is never split; a short decode cannot be split below one KV tile per chunk.
    assert _C.attention_heuristic(tiles, (1, 4096, 4096, 32, 8, 128), True, H100_SMS)[1] == 1
    assert _C.attention_heuristic(tiles, (1, 1, 200, 32, 8, 128), False, H100_SMS)[1] == 1
    assert _C.attention_heuristic(tiles, (1, 1, 32768, 32, 8, 128), False, H100_SMS, 1)[1] == 1


def test_cost_model_terms():
    tile, sizes = (128, 128, 128), (64, 1, 8192, 32, 8, 128)
    # Decode of many sequences is bound by reading K and V: the prediction is at least that time.
    kv_bytes = 4 * 64 * 8192 * 8 * 128
    assert _C.attention_cost_us(tile, sizes, False, 1, H100_SMS) >= kv_bytes / 3.0e6
    # A causal prefill costs about half the unmasked one.
    full = _C.attention_cost_us(tile, (1, 8192, 8192, 32, 32, 128), False, 1, H100_SMS)
    causal = _C.attention_cost_us(tile, (1, 8192, 8192, 32, 32, 128), True, 1, H100_SMS)
    assert 0.4 < causal / full < 0.65


def test_flash_attention_split_rule():
    assert _C.flash_attention_splits(120, 64, H100_SMS, 128) == 1  # >= 80% of the SMs busy
    # 8 CTAs over 132 SMs: the smallest split count within 85% of the best wave efficiency.
    # Split counts that leave the KV tiles per split unchanged are skipped.
    splits = _C.flash_attention_splits(8, 256, H100_SMS, 128)
    efficiency = lambda n: (8 * n / H100_SMS) / math.ceil(8 * n / H100_SMS)  # noqa: E731
    useful = [n for n in range(1, 129) if n == 1 or math.ceil(256 / n) != math.ceil(256 / (n - 1))]
    best = max(efficiency(n) for n in useful)
    assert splits in useful and efficiency(splits) >= 0.85 * best
    assert all(efficiency(n) < 0.85 * best for n in useful if n < splits)


def test_workspace_grows_with_splits():
    sizes = (4, 1, 4096, 32, 8, 128)
    lse_only = _C.attention_workspace_bytes(sizes, 1)
    assert lse_only >= 4 * 32 * 4
    # Partials and repeated queries: two [batch, splits, heads, dim] 16-bit buffers, plus the LSE rows.
    assert _C.attention_workspace_bytes(sizes, 8) >= 2 * 4 * 8 * 32 * 128 * 2 + 4 * 8 * 32 * 4


def tensors(batch=2, sq=16, sk=32, hq=4, hkv=2, d=128, dtype=None):
    torch = pytest.importorskip("torch")
    dtype = dtype or torch.bfloat16
    return (torch.randn(batch, sq, hq, d, dtype=dtype), torch.randn(batch, sk, hkv, d, dtype=dtype),
            torch.randn(batch, sk, hkv, d, dtype=dtype))


@pytest.mark.parametrize("mutate, error, message", [
    (lambda q, k, v: (q.float().numpy(), k, v), TypeError, "torch tensors"),
    (lambda q, k, v: (q[0], k, v), ValueError, r"\[batch, seq, heads, head_dim\]"),
    (lambda q, k, v: (q, k, v[:, :5]), ValueError, "same shape"),
    (lambda q, k, v: (q[:, :, :3], k, v), ValueError, "multiple of k's 2"),
    (lambda q, k, v: (q, k.half(), v.half()), TypeError, "bfloat16 or all float16"),
    (lambda q, k, v: (q.float(), k.float(), v.float()), TypeError, "bfloat16 or all float16"),
    (lambda q, k, v: (q, k, v.transpose(2, 3).contiguous().transpose(2, 3)), ValueError, "contiguous head_dim"),
    (lambda q, k, v: (q.transpose(1, 3), k, v), ValueError, "differ in batch or head_dim"),
    (lambda q, k, v: (q, k, v), ValueError, "one CUDA device"),
])
def test_bad_arguments_get_a_clear_error(mutate, error, message):
    with pytest.raises(error, match=message):
        wavetune.attention(*mutate(*tensors()))


def test_bad_sizes_are_refused_before_any_launch():
    q, k, v = tensors(d=96)
    with pytest.raises(ValueError, match="head_dim=96 is not supported"):
        wavetune.attention(q, k, v)
    q, k, v = tensors(sq=64, sk=16)
    with pytest.raises(ValueError, match="seqlen_q <= seqlen_k"):
        wavetune.attention(q, k, v, causal=True)
    q, k, v = tensors()
    with pytest.raises(ValueError, match="out must be"):
        wavetune.attention(q, k, v, out=q[:, :1])
    with pytest.raises(ValueError, match="no compiled attention variant|no attention variant"):
        wavetune.attention(q, k, v, config="attn_nonexistent")


def test_torch_operator_is_registered_with_a_fake_kernel():
    torch = pytest.importorskip("torch")
    import wavetune.torch_ops  # noqa: F401

    q, k, v = (t.to("meta") for t in tensors())
    out = torch.ops.wavetune.attention(q, k, v, True, None)
    assert out.shape == q.shape and out.dtype == q.dtype and out.is_contiguous()

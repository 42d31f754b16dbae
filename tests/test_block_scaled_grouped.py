"""CPU tier of the grouped family's 128-block scales (FP8): the argument checks of wavetune.block_scaled_grouped_gemm
and of scaled_grouped_gemm given block scales (each a clear exception naming the problem), its torch
operator's fake implementation, the torch-op quantizer's round trip, and the variant listing."""

from __future__ import annotations

import pytest

import wavetune

torch = pytest.importorskip("torch")


def operands(rows=6, experts=2, n=320, k=272):
    """Block scales of N = 320 and K = 272: 3 blocks each, the last partial."""
    fp8 = torch.float8_e4m3fn
    return (torch.randn(rows, k).to(fp8), torch.randn(experts, n, k).to(fp8), torch.rand(rows, 3),
            torch.rand(experts, 3, 3), torch.tensor([rows // 2, rows] + [rows] * (experts - 2), dtype=torch.int32)[:experts])


@pytest.mark.parametrize("entry", ["block_scaled_grouped_gemm", "scaled_grouped_gemm"])
@pytest.mark.parametrize(
    "change, error, message",
    [
        (lambda x, w, sx, sw, o: (x.bfloat16(), w, sx, sw, o), TypeError, "must be torch.float8_e4m3fn"),
        (lambda x, w, sx, sw, o: (x, w, sx[:, :2], sw, o), ValueError, "scale_x must be float32 \\(6, 3\\)"),
        (lambda x, w, sx, sw, o: (x, w, sx.double(), sw, o), ValueError, "scale_x must be float32"),
        (lambda x, w, sx, sw, o: (x, w, sx, sw[:, :2], o), ValueError, "scale_w must be float32 \\(2, 3, 3\\)"),
        (lambda x, w, sx, sw, o: (x[:, :256], w, sx, sw, o), ValueError, "differ in K \\(256 != 272\\)"),
        (lambda x, w, sx, sw, o: (x, w, sx, sw, o.long()), TypeError, "offsets must be int32"),
        (lambda x, w, sx, sw, o: (x, w, sx.t().contiguous().t(), sw, o), ValueError, "scale_x must be contiguous"),
    ],
)
def test_bad_arguments(entry, change, error, message):
    with pytest.raises(error, match=message):
        getattr(wavetune, entry)(*change(*operands()))


def test_sizes_then_device_are_checked():
    native = pytest.importorskip("wavetune._C")
    if not hasattr(native, "grouped_problem_error"):
        pytest.skip("the native module has no grouped family")
    x, w, sx, sw, o = operands(k=264)
    with pytest.raises(ValueError, match="K=264 must be a multiple of 16"):
        wavetune.block_scaled_grouped_gemm(x, w, sx, sw, o)
    with pytest.raises(ValueError, match="one CUDA device, got cpu"):
        wavetune.block_scaled_grouped_gemm(*operands())


@pytest.mark.parametrize("op", ["block_scaled_grouped_gemm", "scaled_grouped_gemm"])
def test_fake_implementation_gives_the_output_shape(op):
    pytest.importorskip("wavetune.torch_ops")
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in operands(rows=9)]
        out = getattr(torch.ops.wavetune, op)(*fake, torch.float16)
    assert out.shape == (9, 320) and out.dtype == torch.float16


def test_block_quantizer_round_trip():
    """The torch-op quantizer the benchmarks and tests use: one scale per block, the largest value of each
    block at the e4m3 maximum, values within e4m3 rounding (3 mantissa bits) of the input."""
    from wavetune.families.grouped_gemm.measure import E4M3_MAX, dequantize_experts, quantize

    t = torch.randn(3, 200, 272) * torch.rand(3, 200, 1) * 10
    q, scale = quantize(t, "block128", "w")
    assert q.shape == t.shape and q.dtype == torch.float8_e4m3fn and scale.shape == (3, 2, 3)
    back = dequantize_experts(q, scale, 128, torch.float32)
    assert ((back - t).abs() <= t.abs() / 16 + t.abs().amax() / 2**18).all()  # subnormals: absolute error
    assert torch.allclose(scale[1, 1, 2], t[1, 128:, 256:].abs().max() / E4M3_MAX)


def test_listing_matches_the_config_space():
    from conftest import REPO
    from wavetune.codegen import config_space

    space = config_space.load(REPO / "cutlass_configs" / "sm90_grouped_gemm.toml")
    block = [v for v in space.variants if v.scales == "block128"]
    names = [v.name for v in block]
    assert {c.name for c in wavetune.block_scaled_grouped_configs()} <= set(names)
    assert all(n.startswith("e4m3_block128_grouped_") for n in names) and len(names) == 14
    for v in block:  # what the blockwise mainloop takes: whole scale blocks per tile
        assert v.tile_k == 128 and (v.tile_m if v.swap_ab else v.tile_n) % 128 == 0, v.name

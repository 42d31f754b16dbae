"""CPU tier of the grouped family's per-tensor FP8 scales (scales mode "tensor": one float32 scale for all of x,
one per expert for w, as FP8 MoE checkpoints quantized per tensor hold them), reached through
wavetune.scaled_grouped_gemm by scale_w's rank: its argument checks (each a clear exception naming the problem),
its torch operator's fake implementation, its vendor route and quantizer, and its variants."""

from __future__ import annotations

import pytest

import wavetune

torch = pytest.importorskip("torch")
from wavetune.families.grouped_gemm.api import ENTRIES, SCALES, scales_of  # noqa: E402
from wavetune.families.grouped_gemm.fp8 import row_scales, scale_shapes  # noqa: E402


def operands(rows=6, experts=2, n=32, k=64):
    fp8 = torch.float8_e4m3fn
    return (torch.randn(rows, k).to(fp8), torch.randn(experts, n, k).to(fp8), torch.rand(1) + 0.5,
            torch.rand(experts) + 0.5, torch.tensor([rows // 2, rows] + [rows] * (experts - 2), dtype=torch.int32))


def test_layout_and_shapes():
    assert SCALES["tensor"] == {"name": "tensor", "e4m3": True, "x_block_m": 0, "x_block_k": 0, "w_block_n": 0,
                                "w_block_k": 0}
    x_shapes, w_shape, what = scale_shapes(SCALES["tensor"], 6, 2, 32, 64)
    assert (x_shapes, w_shape, what) == ([(), (1,)], (2,), "one scale for all of x; per expert")
    assert scales_of(torch.ones(2)) == "tensor" and scales_of(torch.ones(2, 32)) == "row"


@pytest.mark.parametrize(
    "change, error, message",
    [
        (lambda x, w, sx, sw, o: (x, w, torch.rand(6), sw, o), ValueError,
         "scale_x must be float32 \\(\\) or \\(1,\\) \\(one scale for all of x; per expert\\), got torch.float32 "
         "\\(6,\\)"),
        (lambda x, w, sx, sw, o: (x, w, torch.rand(1, 1), sw, o), ValueError, "scale_x must be float32 \\(\\) or \\(1,\\)"),
        (lambda x, w, sx, sw, o: (x, w, sx.double(), sw, o), ValueError, "scale_x must be float32"),
        (lambda x, w, sx, sw, o: (x, w, sx, torch.rand(3), o), ValueError,
         "scale_w must be float32 \\(2,\\) \\(one scale for all of x; per expert\\), got torch.float32 \\(3,\\)"),
        (lambda x, w, sx, sw, o: (x, w, sx, sw.half(), o), ValueError, "scale_w must be float32 \\(2,\\)"),
        (lambda x, w, sx, sw, o: (x, w, sx, sw.tolist(), o), TypeError, "takes torch tensors"),
        (lambda x, w, sx, sw, o: (x.bfloat16(), w, sx, sw, o), TypeError, "must be torch.float8_e4m3fn"),
        (lambda x, w, sx, sw, o: (x, w, sx, sw, o[:1]), ValueError, "offsets has 1 entries for 2 experts"),
    ],
)
def test_bad_arguments(change, error, message):
    with pytest.raises(error, match=message):
        wavetune.scaled_grouped_gemm(*change(*operands()))


def test_sizes_then_device_are_checked():
    with pytest.raises(ValueError, match="K=40 must be a multiple of 16"):
        wavetune.scaled_grouped_gemm(*operands(k=40))
    with pytest.raises(ValueError, match="one CUDA device, got cpu"):
        wavetune.scaled_grouped_gemm(*operands())
    x, w, sx, sw, offsets = operands()
    with pytest.raises(ValueError, match="one CUDA device, got cpu"):  # scale_x [] as well as [1]
        wavetune.scaled_grouped_gemm(x, w, sx.reshape(()), sw, offsets)


def test_fake_implementation_gives_the_output_shape():
    pytest.importorskip("wavetune.torch_ops")
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in operands(rows=9, n=48)]
        out = torch.ops.wavetune.scaled_grouped_gemm(*fake, torch.float16)
    assert out.shape == (9, 48) and out.dtype == torch.float16


def test_vendor_route_expands_to_row_scales_and_matches_the_dequantized_product(monkeypatch):
    """Per-tensor scales span K, so PyTorch's way is its row-scaled operator with them expanded per token and
    per expert channel (dequantized for torch._grouped_mm where that operator refuses the shape: N = 136)."""
    x, w, sx, sw, offsets = operands(rows=16, n=136, k=32)
    offsets = torch.tensor([5, 16], dtype=torch.int32)
    per_token, per_channel = row_scales(SCALES["tensor"], x, w, sx, sw)
    assert torch.equal(per_token, sx.expand(16)) and torch.equal(per_channel, sw[:, None].expand(2, 136))
    monkeypatch.setattr(torch, "_scaled_grouped_mm", lambda *a, **k: pytest.fail("N % 16 != 0"), raising=False)
    out = ENTRIES["tensor"].vendor(torch, x, w, sx, sw, offsets, torch.bfloat16)
    expected = torch.cat([x[:5].float() @ w[0].float().t() * sx * sw[0], x[5:].float() @ w[1].float().t() * sx * sw[1]])
    assert out.shape == (16, 136)
    assert torch.allclose(out.float(), expected, rtol=0.02, atol=0.5)


def test_quantizer_gives_the_modes_shapes():
    from wavetune.families.grouped_gemm.measure import E4M3_MAX, dequantize_operands, quantize

    x, w = torch.randn(40, 96) * 3, torch.randn(3, 24, 96) * torch.tensor([1.0, 10.0, 0.1])[:, None, None]
    (xq, sx), (wq, sw) = quantize(x, "tensor", "x"), quantize(w, "tensor", "w")
    assert sx.shape == () and sw.shape == (3,) and xq.dtype == wq.dtype == torch.float8_e4m3fn
    assert torch.allclose(sw, w.abs().amax(dim=(1, 2)) / E4M3_MAX)
    xd, wd = dequantize_operands(SCALES["tensor"], xq, wq, sx, sw, torch.float32)
    assert ((xd - x).abs() <= x.abs() / 16 + x.abs().amax() / 2**18).all()
    assert ((wd - w).abs() <= w.abs() / 16 + w.abs().amax() / 2**18).all()


def test_listing_matches_the_config_space():
    from conftest import REPO
    from wavetune.codegen import config_space

    space = config_space.load(REPO / "cutlass_configs" / "sm90_grouped_gemm.toml")
    names = [v.name for v in space.variants if v.scales == "tensor"]
    assert {c.name for c in wavetune.grouped_configs("tensor")} <= set(names)
    assert all(n.startswith("e4m3_tensor_grouped_") for n in names) and len(names) == 10
    assert "e4m3_tensor_grouped_bf16_swapab_pingpong_64x32x128_1x1" in {v.name for v in space.select("ci")}

"""CPU tier of the grouped family's row scales (FP8): the argument checks of wavetune.scaled_grouped_gemm (each a
clear exception naming the problem), its torch operator's fake implementation, and the variant listing."""

from __future__ import annotations

import pytest

import wavetune

torch = pytest.importorskip("torch")


def operands(rows=6, experts=2, n=32, k=64):
    fp8 = torch.float8_e4m3fn
    return (torch.randn(rows, k).to(fp8), torch.randn(experts, n, k).to(fp8), torch.rand(rows),
            torch.rand(experts, n), torch.tensor([rows // 2, rows] + [rows] * (experts - 2), dtype=torch.int32)[:experts])


@pytest.mark.parametrize(
    "change, error, message",
    [
        (lambda x, w, sx, sw, o: (x.float().numpy(), w, sx, sw, o), TypeError,
         "takes torch tensors x, w, offsets, scale_x and scale_w, got ndarray"),
        (lambda x, w, sx, sw, o: (x.bfloat16(), w, sx, sw, o), TypeError, "must be torch.float8_e4m3fn"),
        (lambda x, w, sx, sw, o: (x, w, sx[:5], sw, o), ValueError, "scale_x must be float32 \\(6,\\) or \\(6, 1\\) \\(one scale per token"),
        (lambda x, w, sx, sw, o: (x, w, sx.double(), sw, o), ValueError, "scale_x must be float32"),
        (lambda x, w, sx, sw, o: (x, w, sx, sw[:, :1], o), ValueError, "scale_w must be float32 \\(2, 32\\)"),
        (lambda x, w, sx, sw, o: (x[:, :32], w, sx, sw, o), ValueError, "differ in K \\(32 != 64\\)"),
        (lambda x, w, sx, sw, o: (x, w, sx, sw, o.long()), TypeError, "offsets must be int32"),
        (lambda x, w, sx, sw, o: (x, w, sx, sw.t().contiguous().t(), o), ValueError, "scale_w must be contiguous"),
    ],
)
def test_bad_arguments(change, error, message):
    with pytest.raises(error, match=message):
        wavetune.scaled_grouped_gemm(*change(*operands()))


def test_bad_out_dtype_and_out():
    with pytest.raises(TypeError, match="out_dtype must be torch.bfloat16 or torch.float16"):
        wavetune.scaled_grouped_gemm(*operands(), out_dtype=torch.float32)
    with pytest.raises(ValueError, match="out must be a torch.float16 tensor of shape \\(6, 32\\)"):
        wavetune.scaled_grouped_gemm(*operands(), out_dtype=torch.float16, out=torch.empty(6, 32, dtype=torch.bfloat16))


def test_sizes_then_device_are_checked():
    native = pytest.importorskip("wavetune._C")
    if not hasattr(native, "grouped_problem_error"):
        pytest.skip("the native module has no grouped family")
    with pytest.raises(ValueError, match="K=40 must be a multiple of 16"):
        wavetune.scaled_grouped_gemm(*operands(k=40))
    with pytest.raises(ValueError, match="one CUDA device, got cpu"):
        wavetune.scaled_grouped_gemm(*operands())


def test_fake_implementation_gives_the_output_shape():
    pytest.importorskip("wavetune.torch_ops")
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in operands(rows=9, n=48)]
        out = torch.ops.wavetune.scaled_grouped_gemm(*fake, torch.float16)
    assert out.shape == (9, 48) and out.dtype == torch.float16


def test_listing_matches_the_config_space():
    from conftest import REPO
    from wavetune.codegen import config_space

    space = config_space.load(REPO / "cutlass_configs" / "sm90_grouped_gemm.toml")
    names = [v.name for v in space.variants if v.scales == "row"]
    assert {c.name for c in wavetune.scaled_grouped_configs()} <= set(names)
    assert all(n.startswith("e4m3_grouped_") for n in names) and len(names) == 18

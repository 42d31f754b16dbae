"""wavetune.gemm's argument checks that need torch but no GPU: each bad input gets a clear exception."""

from __future__ import annotations

import pytest

import wavetune

torch = pytest.importorskip("torch")


def bf16(*shape):
    return torch.randn(*shape, dtype=torch.bfloat16)


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: (bf16(4, 64), bf16(64, 32, 2)), ValueError, "b of shape \\[K, N\\]"),
        (lambda: (torch.randn(()).bfloat16(), bf16(64, 32)), ValueError, "a of shape \\[..., K\\]"),
        (lambda: (bf16(4, 64), bf16(48, 32)), ValueError, "cannot be multiplied \\(64 != 48\\)"),
        (lambda: (bf16(4, 64).float(), bf16(64, 32).float()), TypeError, "must both be bfloat16 or both float16"),
        (lambda: (bf16(4, 64), bf16(64, 32).half()), TypeError, "got torch.bfloat16 and torch.float16"),
        (lambda: (bf16(4, 64), bf16(64, 32)), ValueError, "one CUDA device, got cpu, cpu"),
    ],
)
def test_bad_arguments(make, error, message):
    a, b = make()
    with pytest.raises(error, match=message):
        wavetune.gemm(a, b)


def test_bad_out():
    a, b = bf16(4, 64), bf16(64, 32)
    with pytest.raises(ValueError, match="out must be a torch.bfloat16 tensor of shape \\(4, 32\\), got .*\\(4, 16\\)"):
        wavetune.gemm(a, b, out=bf16(4, 16))
    with pytest.raises(ValueError, match="got torch.float16"):
        wavetune.gemm(a, b, out=torch.empty(4, 32, dtype=torch.float16))
    with pytest.raises(ValueError, match="got ndarray"):
        wavetune.gemm(a, b, out=a.float().numpy())


def test_bad_config_is_reported_before_any_device_work():
    with pytest.raises(ValueError, match="no compiled variant named"):
        wavetune.gemm(bf16(4, 64), bf16(64, 32), config="not_a_variant")


def test_layout_helpers():
    from wavetune.families.gemm.api import _b_layout, _row_stride

    w = bf16(32, 64)  # an nn.Linear weight W[N=32, K=64]
    assert _b_layout(w.t(), 64, 32) == (0, 64)  # column-major B
    assert _b_layout(bf16(64, 32), 64, 32) == (1, 32)  # row-major B
    assert _b_layout(bf16(64, 48)[:, :32], 64, 32) == (1, 48)  # row-major with padded rows
    with pytest.raises(ValueError, match="neither column-major .* nor row-major"):
        _b_layout(bf16(64, 64)[::2, ::2], 32, 32)

    assert _row_stride(bf16(2, 3, 64), 6, 64, "a") == 64  # leading dimensions flattened into rows
    assert _row_stride(bf16(6, 72)[:, :64], 6, 64, "a") == 72  # padded rows
    assert _row_stride(bf16(2, 6, 72)[:, :, :64], 12, 64, "a") == 72  # padded rows, 3-D
    assert _row_stride(bf16(1, 72)[:, :64], 1, 64, "a") == 64  # one row: its stride is never read
    with pytest.raises(ValueError, match="cannot be viewed as \\[6, 64\\] rows without a copy; pass a.contiguous"):
        _row_stride(bf16(3, 2, 64).transpose(0, 1), 6, 64, "a")
    with pytest.raises(ValueError, match="last dimension must be contiguous"):
        _row_stride(bf16(64, 6).t(), 6, 64, "a")
    with pytest.raises(ValueError, match="out's last dimension must be contiguous"):
        _row_stride(bf16(64, 4).t(), 4, 64, "out")

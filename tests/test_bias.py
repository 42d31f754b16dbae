"""GPU tier: a bias is added to the fp32 accumulator before the one rounding to bf16/fp16, so wavetune's
error against an fp32 reference stays within 1.1x of torch's (F.linear), in every compiled variant and
micro mode; where the table chooses cuBLAS, the torch operator's result is torch's bit for bit.
"""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")  # before the modules below, which import it

import wavetune
from wavetune import _C
from wavetune.runtime import tables

from test_capture import dense_choices
from test_gpu import DTYPES, micro_modes, write_device_table

pytestmark = pytest.mark.gpu

RATIO = 1.1  # wavetune's error over torch's, both against fp32


def random_shapes(count=4):
    """Fresh (m, n, k) each run (the seed is printed on failure): decode to prefill, N and K multiples of 8."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    return seed, [(rng.choice([1, 3, 16, 77, 128, 300, 1031]), 8 * rng.randint(1, 400), 8 * rng.randint(2, 400))
                  for _ in range(count)]


def operands(m, n, k, dtype):
    """x, an nn.Linear weight and a bias the size of the products (where rounding the product first shows)."""
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5
    bias = 2 * torch.randn(n, device="cuda", dtype=dtype)
    return x, w, bias


def errors(result, x, w, bias):
    """(error of result, error of torch's F.linear), relative Frobenius against an fp32 reference."""
    reference = torch.nn.functional.linear(x.float(), w.float(), None if bias is None else bias.float())
    theirs = torch.nn.functional.linear(x, w, bias)
    error = lambda y: ((y.float() - reference).norm() / reference.norm()).item()  # noqa: E731
    return error(result), error(theirs)


def variants():
    return [pytest.param(c, id=c.name) for c in wavetune.configs() if c.b_layout == "col"]


@pytest.mark.parametrize("variant", variants())
@pytest.mark.parametrize("with_bias", [True, False])
def test_error_within_torch_s(variant, with_bias):
    dtype = DTYPES[variant.dtype]
    seed, shapes = random_shapes()
    modes = micro_modes(variant) if not variant.from_library else [wavetune.LaunchConfig(variant.id)]
    for m, n, k in shapes:
        x, w, bias = operands(m, n, k, dtype)
        bias = bias if with_bias else None
        for mode in modes:
            if mode.decomposition == "split_k" and mode.splits > -(-k // variant.tile[2]):
                continue  # more splits than K tiles: refused, as test_gpu.py checks
            out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
            wavetune.gemm(x, w.t(), bias=bias, out=out, config=mode)
            ours, theirs = errors(out, x, w, bias)
            assert ours <= RATIO * theirs, f"seed {seed}, M={m} N={n} K={k}, {mode}: {ours:.3g} vs torch {theirs:.3g}"


@pytest.mark.parametrize("m, n, k", [(1, 4096, 4096), (128, 512, 2880), (300, 2048, 2048), (1031, 1032, 776)])
def test_a_cublas_choice_is_torch_s_linear_bit_for_bit(tmp_path, m, n, k):
    candidate = dense_choices().get("cublas")
    if candidate is None:
        pytest.skip("cuBLAS cannot be loaded")
    path = tmp_path / "cublas.wtt"
    write_device_table(path, [candidate], {0: {1: [1.0, 0.0, 0.0, 0.0]}})
    wavetune.load_table(path)
    device = torch.cuda.current_device()
    try:
        x, w, bias = operands(m, n, k, torch.bfloat16)
        with torch.inference_mode():
            assert torch.equal(torch.ops.wavetune.linear(x, w, bias), torch.nn.functional.linear(x, w, bias))
            assert torch.equal(torch.ops.wavetune.linear(x, w), torch.nn.functional.linear(x, w))
            assert torch.equal(torch.ops.wavetune.gemm(x, w.t()), x @ w.t())
    finally:
        _C.use_table(device, None)
        tables.checked_devices().discard(device)


def test_bias_errors():
    x, w, bias = operands(16, 264, 256, torch.bfloat16)
    with pytest.raises(ValueError, match=r"bias must be a contiguous torch.bfloat16 tensor of shape \(264,\)"):
        wavetune.gemm(x, w.t(), bias=bias[:8])
    with pytest.raises(ValueError, match="bias must be a contiguous"):
        wavetune.gemm(x, w.t(), bias=torch.randn(528, device="cuda", dtype=torch.bfloat16)[::2])
    with pytest.raises(ValueError, match="16-byte aligned"):
        wavetune.gemm(x, w.t(), bias=torch.randn(265, device="cuda", dtype=torch.bfloat16)[1:])

"""GPU tier of the dense GEMM family's Ampere-style (multistage, arch sm80) variants: every compiled one against a
float32 reference, with split-K and swizzles, and the choices of a process that serves an Ampere GPU
(WAVETUNE_ARCH=sm80). Outputs are poisoned with NaN before each call, so an unwritten element fails.

Build them with the `sm80` kernel set: benchmarks/gpu_run.sh "sm80" "tests/test_sm80_gemm_gpu.py".
"""

from __future__ import annotations

import pytest

import wavetune
from conftest import run_served_as_sm80
from wavetune import LaunchConfig, _C

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Decode to prefill; K not a multiple of any tile K (32 or 64), N not a multiple of any tile N.
SHAPES = [(1, 264, 200), (5, 520, 1032), (16, 1288, 776), (129, 392, 4104), (1000, 1288, 776)]
TOLERANCE = 1e-2  # relative Frobenius error of 16-bit outputs with fp32 accumulation
# NOTES: serial split-K rounds the running sum to the output type between splits, so its bound is looser.
SPLIT_K_TOLERANCE = 2e-2


def multistage_variants():
    if not torch.cuda.is_available():
        return []
    return [c for c in wavetune.configs() if c.schedule == "multistage"]


def why_skipped() -> str:
    if not torch.cuda.is_available():
        return "GPU tier: no CUDA GPU is visible"
    if not multistage_variants():
        return "no multistage (sm80) variant compiled: build with WAVETUNE_KERNEL_SET=portable"
    return ""


def variant_params():
    if why_skipped():
        return [pytest.param(None, id="none", marks=pytest.mark.skip(reason=why_skipped()))]
    return [pytest.param(c, id=c.name) for c in multistage_variants()]


@pytest.fixture(autouse=True)
def needs_variants():
    if why_skipped():
        pytest.skip(why_skipped())


def operands(m, n, k, dtype, b_layout):
    """x [m, k], B [k, n] (col: W.t() of an nn.Linear weight W[n, k]; row: contiguous), a bias [n]: random,
    with no zero (an element left at zero would hide a skipped product)."""
    def nonzero(*shape, scale=1.0):
        t = torch.rand(*shape, device="cuda") + 0.5
        sign = torch.randint(0, 2, shape, device="cuda") * 2 - 1
        return (t * sign * scale).to(dtype)
    x, w = nonzero(m, k), nonzero(n, k, scale=k**-0.5)
    b = w.t() if b_layout == "col" else w.t().contiguous()
    return x, b, nonzero(n)


def check(x, b, bias, tolerance=TOLERANCE, **kwargs):
    ref = x.float() @ b.float() + (bias.float() if bias is not None else 0)
    out = torch.full(ref.shape, float("nan"), device="cuda", dtype=x.dtype)
    result = wavetune.gemm(x, b, bias=bias, out=out, **kwargs)
    torch.cuda.synchronize()
    assert result is out
    assert not out.isnan().any(), "some output elements were not written"
    error = ((out.float() - ref).norm() / ref.norm()).item()
    assert error < tolerance, f"relative error {error:.3g}"


@pytest.mark.parametrize("variant", variant_params())
@pytest.mark.parametrize("m, n, k", SHAPES)
def test_every_multistage_variant(variant, m, n, k):
    x, b, bias = operands(m, n, k, DTYPES[variant.dtype], variant.b_layout)
    check(x, b, None, config=variant.id)
    check(x, b, bias, config=variant.id)


@pytest.mark.parametrize("variant", variant_params())
@pytest.mark.parametrize("splits", [2, 3, 5])
def test_split_k(variant, splits):
    x, b, bias = operands(33, 520, 4104, DTYPES[variant.dtype], variant.b_layout)
    check(x, b, bias, SPLIT_K_TOLERANCE, config=LaunchConfig(variant.id, "split_k", splits))


@pytest.mark.parametrize("variant", variant_params())
@pytest.mark.parametrize("max_swizzle", [2, 4, 8])
def test_swizzle(variant, max_swizzle):
    x, b, bias = operands(1000, 1288, 776, DTYPES[variant.dtype], variant.b_layout)
    check(x, b, bias, config=LaunchConfig(variant.id, max_swizzle=max_swizzle))


def test_raster_and_stream_k_are_refused_with_the_reason():
    variant = multistage_variants()[0]
    x, b, _ = operands(64, 264, 200, DTYPES[variant.dtype], variant.b_layout)
    with pytest.raises(ValueError, match="raster"):
        wavetune.gemm(x, b, config=LaunchConfig(variant.id, raster="along_m"))
    with pytest.raises(ValueError, match="stream_k"):
        wavetune.gemm(x, b, config=LaunchConfig(variant.id, "stream_k"))


def test_occupancy_is_read_from_the_kernel():
    """CTAs per SM from registers and shared memory: a 48 KB, 4-warp kernel fits more than one per SM."""
    for v in multistage_variants():
        ctas = _C.gemm_ctas_per_sm(v.id)
        assert 1 <= ctas <= 32, (v.name, ctas)
        sm = torch.cuda.get_device_properties(0).multi_processor_count
        assert _C.map_problem(v.id, 4096, 4096, 4096, 1, 1, sm, ctas)[2] == sm * ctas
    small = [v for v in multistage_variants() if v.tile[:2] == (64, 64)]
    if small:
        assert _C.gemm_ctas_per_sm(small[0].id) >= 2


def test_ampere_choices_take_only_portable_variants():
    """Served as an Ampere GPU, every listed variant and every choice (with this GPU's table and without) is a
    multistage variant or cuBLAS, and the chosen launch runs."""
    script = (
        "import wavetune, torch\n"
        "from wavetune import _C\n"
        "allowed = {c.id for c in wavetune.configs() if c.arch in ('any', 'sm80')}\n"
        "assert all(c.arch in ('any', 'sm80') for c in wavetune.configs()), 'listing'\n"
        "assert any(c.schedule == 'multistage' for c in wavetune.configs()), 'no multistage variant listed'\n"
        "for dtype in (0, 1):\n"
        "    for layout in (0, 1):\n"
        "        for m in (1, 16, 128, 1000, 8192):\n"
        "            n, k = 4096, 1024\n"
        "            ldb = k if layout == 0 else n\n"
        "            chosen = _C.PreparedGemm(m, n, k, k, ldb, n, dtype, layout, 0).variant\n"
        "            assert chosen in allowed, (dtype, layout, m, chosen)\n"
        "x = torch.randn(300, 1024, device='cuda', dtype=torch.bfloat16)\n"
        "w = torch.randn(4096, 1024, device='cuda', dtype=torch.bfloat16)\n"
        "torch.testing.assert_close(wavetune.gemm(x, w.t()), x @ w.t(), rtol=2e-2, atol=2e-1)\n"
        "print('ok')\n"
    )
    run_served_as_sm80(script)

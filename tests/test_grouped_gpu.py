"""GPU tier of the grouped-GEMM family: every compiled grouped variant against a per-expert float64
reference on fresh random data, over routings with empty experts, skew and odd row counts.

Outputs are poisoned with NaN first, so an unwritten element fails, and rows past offsets[-1] must stay
NaN. Skipped, with the reason, without a Hopper GPU, torch with CUDA, or compiled grouped variants.
"""

from __future__ import annotations

import pytest

import wavetune
from wavetune import _C

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
TOLERANCE = 1e-2  # relative Frobenius error per expert of 16-bit outputs with fp32 accumulation


def routings():
    """(name, rows per expert, n, k): few to many rows, empty and skewed experts; N, K multiples of 8
    but not of the tiles."""
    return [
        ("one_row", [0, 1, 0, 0], 264, 200),
        ("decode_128_experts", [1 if e % 16 == 3 else 0 for e in range(128)], 776, 520),
        ("odd_rows", [37, 0, 5, 101, 1, 64, 0, 125], 392, 1032),
        ("empty_ends", [0, 0, 17, 300, 0], 520, 256),
        ("one_hot_expert", [999] + [1] * 7, 264, 136),
        ("prefill_16384", [2048 + 48 * (e % 2 * 2 - 1) for e in range(8)], 512, 264),
    ]


def operands(counts, n, k, dtype, spare_rows=0):
    """x with `spare_rows` rows past the last expert's, w, offsets on the GPU, a NaN-poisoned out."""
    rows = sum(counts) + spare_rows
    x = torch.randn(rows, k, device="cuda", dtype=dtype)
    w = torch.randn(len(counts), n, k, device="cuda", dtype=dtype) / k**0.5
    offsets = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
    out = torch.full((rows, n), float("nan"), device="cuda", dtype=dtype)
    return x, w, offsets, out


def check(x, w, offsets, out):
    torch.cuda.synchronize()
    ends = offsets.tolist()
    for e, (start, end) in enumerate(zip([0, *ends[:-1]], ends)):
        if end == start:
            continue
        ref = x[start:end].double() @ w[e].double().t()
        got = out[start:end]
        assert not got.isnan().any(), f"expert {e}: rows {start}-{end} not all written"
        error = ((got.double() - ref).norm() / ref.norm()).item()
        assert error < TOLERANCE, f"expert {e}: relative error {error:.3g}"
    assert out[ends[-1]:].isnan().all(), "wrote rows past offsets[-1]"


def grouped_variants():
    return [pytest.param(c, id=c.name) for c in wavetune.grouped_configs()]


@pytest.fixture(autouse=True)
def _needs_grouped_variants():
    if not wavetune.grouped_configs():
        pytest.skip("no grouped variants compiled (build with WAVETUNE_KERNEL_FILTER matching grouped_*)")


@pytest.mark.parametrize("variant", grouped_variants())
@pytest.mark.parametrize("name, counts, n, k", routings(), ids=[r[0] for r in routings()])
def test_every_variant(variant, name, counts, n, k):
    x, w, offsets, out = operands(counts, n, k, DTYPES[variant.dtype], spare_rows=3)
    assert wavetune.grouped_gemm(x, w, offsets, out=out, config=variant.id) is out
    check(x, w, offsets, out)


@pytest.mark.parametrize("rows", [1, 7, 255, 1000, 4097, 16384])
@pytest.mark.parametrize("experts", [8, 128])
def test_default_choice_over_token_counts(rows, experts):
    """The built-in choice on random routings of 1 to 16384 rows (top-k rows of an MoE layer)."""
    dtypes = {c.dtype for c in wavetune.grouped_configs()}
    dtype = DTYPES["bf16" if "bf16" in dtypes else dtypes.pop()]
    experts_of_rows = torch.randint(0, experts, (rows,)).bincount(minlength=experts)
    x, w, offsets, out = operands(experts_of_rows.tolist(), 256, 512, dtype)
    check(x, w, offsets, wavetune.grouped_gemm(x, w, offsets, out=out))


def test_default_variant_is_a_compiled_one_of_the_dtype():
    for dtype, code in (("bf16", 0), ("fp16", 1)):
        ids = {c.id for c in wavetune.grouped_configs() if c.dtype == dtype}
        if ids:
            assert _C.grouped_default_variant(code, 4096, 8, 28672, 4096) in ids


def test_cuda_graph_replays_follow_the_offsets_on_the_gpu():
    """The launch reads the routing on the GPU: a captured graph serves new offsets without a recapture."""
    variant = wavetune.grouped_configs()[0]
    x, w, offsets, out = operands([5, 0, 40, 3], 264, 256, DTYPES[variant.dtype])
    wavetune.grouped_gemm(x, w, offsets, out=out, config=variant.id)  # warm-up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        wavetune.grouped_gemm(x, w, offsets, out=out, config=variant.id)
    for counts in ([5, 0, 40, 3], [0, 48, 0, 0], [12, 12, 12, 12], [1, 2, 3, 42]):
        offsets.copy_(torch.tensor(counts).cumsum(0))
        out.fill_(float("nan"))
        graph.replay()
        check(x, w, offsets, out)


def test_out_of_range_offsets_write_nothing_out_of_bounds():
    variant = wavetune.grouped_configs()[0]
    x, w, _, out = operands([16, 16], 264, 256, DTYPES[variant.dtype])
    offsets = torch.tensor([20, 10], device="cuda", dtype=torch.int32)  # out of order: expert 1 gets no rows
    wavetune.grouped_gemm(x, w, offsets, out=out, config=variant.id)
    torch.cuda.synchronize()
    assert not out[:20].isnan().any() and out[20:].isnan().all()
    offsets = torch.tensor([8, 10**6], device="cuda", dtype=torch.int32)  # past the rows: clamped to them
    wavetune.grouped_gemm(x, w, offsets, out=out, config=variant.id)
    torch.cuda.synchronize()
    ref = x[8:].double() @ w[1].double().t()
    assert ((out[8:].double() - ref).norm() / ref.norm()).item() < TOLERANCE


def test_empty_and_zero_sized_inputs():
    variant = wavetune.grouped_configs()[0]
    dtype = DTYPES[variant.dtype]
    x, w, offsets, _ = operands([0, 0], 264, 256, dtype)
    assert wavetune.grouped_gemm(x, w, offsets).shape == (0, 264)
    x, w, offsets, out = operands([0, 0, 0], 264, 256, dtype, spare_rows=4)
    wavetune.grouped_gemm(x, w, offsets, out=out, config=variant.id)
    torch.cuda.synchronize()
    assert out.isnan().all(), "no expert owns a row: nothing is written"


def test_torch_op_matches_and_compiles():
    pytest.importorskip("wavetune.torch_ops")
    dtypes = {c.dtype for c in wavetune.grouped_configs()}
    dtype = DTYPES["bf16" if "bf16" in dtypes else dtypes.pop()]
    x, w, offsets, out = operands([3, 0, 70, 9], 264, 512, dtype)
    check(x, w, offsets, out.copy_(torch.ops.wavetune.grouped_gemm(x, w, offsets)))
    compiled = torch.compile(lambda *args: torch.ops.wavetune.grouped_gemm(*args), fullgraph=True)
    assert torch.equal(compiled(x, w, offsets), wavetune.grouped_gemm(x, w, offsets))

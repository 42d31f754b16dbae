"""GPU tier of the FP8 grouped family: every compiled variant against a per-expert float64 reference of the
dequantized operands on fresh random data, over the grouped family's routings (empty experts, skew, odd row
counts, N and K not multiples of the tiles); the default choice, CUDA-graph replays with new offsets,
torch.compile, and agreement with torch._scaled_grouped_mm.

Outputs are poisoned with NaN first, so an unwritten element fails, and rows past offsets[-1] must stay NaN.
Skipped, with the reason, without a Hopper GPU, torch with CUDA, or compiled FP8 grouped variants.
"""

from __future__ import annotations

import pytest

import wavetune
from test_grouped_gpu import check as check_dequantized, routings
from wavetune.tuning.timing import capture_documented

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
from wavetune.families.grouped_gemm.measure import quantize_rows  # noqa: E402 (imports torch)

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# The grouped family's tolerance (test_grouped_gpu.check) holds: against the dequantized operands' exact product
# only the output's rounding and fp32 accumulation differ; e4m3 rounding of the inputs is in both sides.
TOLERANCE = 1e-2


def operands(counts, n, k, out_dtype, spare_rows=0):
    """x, w, scale_x [rows], scale_w [experts, N] and offsets on the GPU, a NaN-poisoned out; weights of
    uneven magnitude per channel, so a misapplied scale shows."""
    rows = sum(counts) + spare_rows
    x, scale_x = quantize_rows(torch.randn(rows, k, device="cuda") * torch.rand(rows, 1, device="cuda") * 4)
    w = torch.randn(len(counts), n, k, device="cuda") * torch.rand(len(counts), n, 1, device="cuda") / k**0.5
    w, scale_w = quantize_rows(w)
    offsets = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
    out = torch.full((rows, n), float("nan"), device="cuda", dtype=out_dtype)
    return x, w, scale_x, scale_w, offsets, out


def check(x, w, scale_x, scale_w, offsets, out):
    """The grouped family's check (per expert, against float64) on the dequantized operands."""
    check_dequantized(x.float() * scale_x[:, None], w.float() * scale_w[..., None], offsets, out)


def variants():
    return [pytest.param(c, id=c.name) for c in wavetune.scaled_grouped_configs()]


@pytest.fixture(autouse=True)
def _needs_variants():
    if not wavetune.scaled_grouped_configs():
        pytest.skip("no FP8 grouped variants compiled (build with WAVETUNE_KERNEL_FILTER matching e4m3_grouped_*)")


def some_dtype():
    dtypes = {c.dtype for c in wavetune.scaled_grouped_configs()}
    return "bf16" if "bf16" in dtypes else dtypes.pop()


@pytest.mark.parametrize("variant", variants())
@pytest.mark.parametrize("name, counts, n, k", routings(), ids=[r[0] for r in routings()])
def test_every_variant(variant, name, counts, n, k):
    k = -(-k // 16) * 16  # e4m3 rows of 16 bytes
    x, w, scale_x, scale_w, offsets, out = operands(counts, n, k, DTYPES[variant.dtype], spare_rows=3)
    result = wavetune.scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, out_dtype=DTYPES[variant.dtype],
                                          out=out, config=variant.id)
    assert result is out
    check(x, w, scale_x, scale_w, offsets, out)


@pytest.mark.parametrize("rows", [1, 7, 255, 1000, 4097, 16384])
@pytest.mark.parametrize("experts", [8, 128])
def test_default_choice_over_token_counts(rows, experts):
    dtype = DTYPES[some_dtype()]
    counts = torch.randint(0, experts, (rows,)).bincount(minlength=experts).tolist()
    x, w, scale_x, scale_w, offsets, out = operands(counts, 264, 512, dtype)
    wavetune.scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, out_dtype=dtype, out=out)
    check(x, w, scale_x, scale_w, offsets, out)


def test_matches_torch_scaled_grouped_mm():
    if not hasattr(torch, "_scaled_grouped_mm"):
        pytest.skip("this torch has no torch._scaled_grouped_mm")
    if "bf16" not in {c.dtype for c in wavetune.scaled_grouped_configs()}:
        pytest.skip("no bf16 FP8 grouped variant compiled")
    x, w, scale_x, scale_w, offsets, out = operands([16, 0, 40, 9, 64, 1, 0, 30], 1024, 512, torch.bfloat16)
    ours = wavetune.scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, out=out)
    theirs = torch._scaled_grouped_mm(x, w.transpose(-2, -1), scale_x, scale_w, offs=offsets, out_dtype=torch.bfloat16)
    error = ((ours.double() - theirs.double()).norm() / theirs.double().norm()).item()
    assert error < TOLERANCE


def test_cuda_graph_replays_follow_the_offsets_on_the_gpu():
    """PyTorch's documented capture; the graph serves new offsets without a recapture."""
    dtype = DTYPES[some_dtype()]
    x, w, scale_x, scale_w, offsets, out = operands([5, 0, 40, 3], 264, 256, dtype)
    graph, _ = capture_documented(
        lambda: wavetune.scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, out_dtype=dtype, out=out))
    for counts in ([5, 0, 40, 3], [0, 48, 0, 0], [12, 12, 12, 12], [1, 2, 3, 42]):
        offsets.copy_(torch.tensor(counts).cumsum(0))
        out.fill_(float("nan"))
        graph.replay()
        check(x, w, scale_x, scale_w, offsets, out)


def test_empty_and_zero_sized_inputs():
    dtype = DTYPES[some_dtype()]
    x, w, scale_x, scale_w, offsets, _ = operands([0, 0], 264, 256, dtype)
    assert wavetune.scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, out_dtype=dtype).shape == (0, 264)
    x, w, scale_x, scale_w, offsets, out = operands([0, 0, 0], 264, 256, dtype, spare_rows=4)
    wavetune.scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, out_dtype=dtype, out=out)
    torch.cuda.synchronize()
    assert out.isnan().all(), "no expert owns a row: nothing is written"


def test_torch_op_matches_and_compiles():
    pytest.importorskip("wavetune.torch_ops")
    dtype = DTYPES[some_dtype()]
    x, w, scale_x, scale_w, offsets, out = operands([3, 0, 70, 9], 264, 512, dtype)
    op = torch.ops.wavetune.scaled_grouped_gemm
    check(x, w, scale_x, scale_w, offsets, out.copy_(op(x, w, scale_x, scale_w, offsets, dtype)))
    compiled = torch.compile(lambda *args: op(*args, dtype), fullgraph=True)
    eager = wavetune.scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, out_dtype=dtype)
    assert torch.equal(compiled(x, w, scale_x, scale_w, offsets), eager)

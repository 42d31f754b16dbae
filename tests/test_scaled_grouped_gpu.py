"""GPU tier of the grouped family's FP8 scales modes (every scaled mode of _C.GROUPED_SCALES: per row through
scaled_grouped_gemm, per 128-block through block_scaled_grouped_gemm, ...): every compiled variant against a
per-expert float64 reference of the dequantized operands on fresh random data, over the grouped family's routings
(empty experts, skew, odd row counts, N and K not multiples of the tiles or of the 128-wide scale blocks); the
default choice through ``scaled_grouped_gemm`` (which hands each mode's scales to its entry point), CUDA-graph
replays with new offsets, the torch operators under torch.compile, and agreement with torch._scaled_grouped_mm.

Outputs are poisoned with NaN first, so an unwritten element fails, and rows past offsets[-1] must stay NaN.
Skipped, with the reason, without a Hopper GPU, torch with CUDA, or compiled variants of a family.
"""

from __future__ import annotations

import pytest

import wavetune
from test_grouped_gpu import check as check_dequantized, routings
from wavetune.tuning.timing import capture_documented

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
from wavetune.families.grouped_gemm.api import ENTRIES, SCALES, grouped_configs  # noqa: E402
from wavetune.families.grouped_gemm.fp8 import dequantize_operands, row_scales  # noqa: E402
from wavetune.families.grouped_gemm.measure import quantize  # noqa: E402 (imports torch)

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# The grouped family's tolerance (test_grouped_gpu.check) holds: against the dequantized operands' exact product
# only the output's rounding and fp32 accumulation differ; e4m3 rounding of the inputs is in both sides.
SCALED = [name for name, layout in SCALES.items() if layout["e4m3"]]


def entry(scales):
    """The public entry point of a scaled mode (scaled_grouped_gemm for a mode without one of its own)."""
    return getattr(wavetune, ENTRIES[scales].entry)


def operands(scales, counts, n, k, out_dtype, spare_rows=0):
    """x, w, scale_x, scale_w and offsets on the GPU, a NaN-poisoned out; magnitudes that differ per token,
    per channel and along K, so a scale applied to the wrong row or block shows."""
    rows, experts = sum(counts) + spare_rows, len(counts)
    along_k = torch.rand(1, k, device="cuda") * 4 if SCALES[scales]["x_block_k"] else torch.ones(1, k, device="cuda")
    x, scale_x = quantize(torch.randn(rows, k, device="cuda") * torch.rand(rows, 1, device="cuda") * 4 * along_k,
                          scales, "x")
    w = torch.randn(experts, n, k, device="cuda") * torch.rand(experts, n, 1, device="cuda") / k**0.5
    w, scale_w = quantize(w * along_k.flip(1), scales, "w")
    offsets = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
    out = torch.full((rows, n), float("nan"), device="cuda", dtype=out_dtype)
    return x, w, scale_x, scale_w, offsets, out


def check(scales, x, w, scale_x, scale_w, offsets, out):
    """The grouped family's check (per expert, against float64) on the operands dequantized as the mode says."""
    check_dequantized(*dequantize_operands(SCALES[scales], x, w, scale_x, scale_w, torch.float32), offsets, out)


def variants():
    return [pytest.param(scales, c, id=c.name) for scales in SCALED for c in grouped_configs(scales)]


def some_dtype(scales):
    dtypes = {c.dtype for c in grouped_configs(scales)}
    if not dtypes:
        pytest.skip(f"no grouped variant of {scales} scales compiled (WAVETUNE_KERNEL_FILTER: the names "
                    "wavetune.grouped_configs lists, e.g. e4m3_grouped_* for per-row scales)")
    return DTYPES["bf16" if "bf16" in dtypes else dtypes.pop()]


@pytest.mark.parametrize("scales, variant", variants())
@pytest.mark.parametrize("name, counts, n, k", routings(), ids=[r[0] for r in routings()])
def test_every_variant(scales, variant, name, counts, n, k):
    k = -(-k // 16) * 16  # e4m3 rows of 16 bytes
    dtype = DTYPES[variant.dtype]
    x, w, scale_x, scale_w, offsets, out = operands(scales, counts, n, k, dtype, spare_rows=3)
    result = entry(scales)(x, w, scale_x, scale_w, offsets, out_dtype=dtype, out=out, config=variant.id)
    assert result is out
    check(scales, x, w, scale_x, scale_w, offsets, out)


@pytest.mark.parametrize("scales", SCALED)
@pytest.mark.parametrize("rows", [1, 7, 255, 1000, 4097, 16384])
@pytest.mark.parametrize("experts", [8, 128])
def test_default_choice_over_token_counts(scales, rows, experts):
    """Through scaled_grouped_gemm, whichever the scales."""
    dtype = some_dtype(scales)
    counts = torch.randint(0, experts, (rows,)).bincount(minlength=experts).tolist()
    x, w, scale_x, scale_w, offsets, out = operands(scales, counts, 264, 640, dtype)
    wavetune.scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, out_dtype=dtype, out=out)
    check(scales, x, w, scale_x, scale_w, offsets, out)


def test_matches_torch_scaled_grouped_mm():
    if not hasattr(torch, "_scaled_grouped_mm"):
        pytest.skip("this torch has no torch._scaled_grouped_mm")
    if "bf16" not in {c.dtype for c in wavetune.scaled_grouped_configs()}:
        pytest.skip("no bf16 FP8 grouped variant compiled")
    x, w, scale_x, scale_w, offsets, out = operands("row", [16, 0, 40, 9, 64, 1, 0, 30], 1024, 512, torch.bfloat16)
    ours = wavetune.scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, out=out)
    theirs = torch._scaled_grouped_mm(x, w.transpose(-2, -1), scale_x, scale_w, offs=offsets, out_dtype=torch.bfloat16)
    error = ((ours.double() - theirs.double()).norm() / theirs.double().norm()).item()
    assert error < 1e-2


def test_tensor_scales_match_row_scales_expanded():
    """Per-tensor scales give what the row mode gives with them expanded per token and per expert channel."""
    dtype = some_dtype("tensor")
    some_dtype("row")
    x, w, scale_x, scale_w, offsets, _ = operands("tensor", [16, 0, 40, 9, 64, 1, 0, 30], 264, 512, dtype)
    ours = wavetune.scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, out_dtype=dtype)
    rows = wavetune.scaled_grouped_gemm(x, w, *row_scales(SCALES["tensor"], x, w, scale_x, scale_w), offsets,
                                        out_dtype=dtype)
    assert torch.allclose(ours.float(), rows.float(), rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize("scales", SCALED)
def test_cuda_graph_replays_follow_the_offsets_on_the_gpu(scales):
    """PyTorch's documented capture; the graph serves new offsets without a recapture."""
    dtype = some_dtype(scales)
    x, w, scale_x, scale_w, offsets, out = operands(scales, [5, 0, 40, 3], 264, 384, dtype)
    graph, _ = capture_documented(
        lambda: entry(scales)(x, w, scale_x, scale_w, offsets, out_dtype=dtype, out=out))
    for counts in ([5, 0, 40, 3], [0, 48, 0, 0], [12, 12, 12, 12], [1, 2, 3, 42]):
        offsets.copy_(torch.tensor(counts).cumsum(0))
        out.fill_(float("nan"))
        graph.replay()
        check(scales, x, w, scale_x, scale_w, offsets, out)


@pytest.mark.parametrize("scales", SCALED)
def test_empty_and_zero_sized_inputs(scales):
    dtype = some_dtype(scales)
    x, w, scale_x, scale_w, offsets, _ = operands(scales, [0, 0], 264, 256, dtype)
    assert entry(scales)(x, w, scale_x, scale_w, offsets, out_dtype=dtype).shape == (0, 264)
    x, w, scale_x, scale_w, offsets, out = operands(scales, [0, 0, 0], 264, 256, dtype, spare_rows=4)
    entry(scales)(x, w, scale_x, scale_w, offsets, out_dtype=dtype, out=out)
    torch.cuda.synchronize()
    assert out.isnan().all(), "no expert owns a row: nothing is written"


@pytest.mark.parametrize("scales", SCALED)
def test_torch_ops_match_and_compile(scales):
    """The family's operator and scaled_grouped_gemm's, eager and under torch.compile(fullgraph=True)."""
    pytest.importorskip("wavetune.torch_ops")
    dtype = some_dtype(scales)
    x, w, scale_x, scale_w, offsets, out = operands(scales, [3, 0, 70, 9], 264, 512, dtype)
    eager = entry(scales)(x, w, scale_x, scale_w, offsets, out_dtype=dtype)
    for op in {getattr(torch.ops.wavetune, ENTRIES[scales].entry), torch.ops.wavetune.scaled_grouped_gemm}:
        check(scales, x, w, scale_x, scale_w, offsets, out.copy_(op(x, w, scale_x, scale_w, offsets, dtype)))
        compiled = torch.compile(lambda *args, op=op: op(*args, dtype), fullgraph=True)
        assert torch.equal(compiled(x, w, scale_x, scale_w, offsets), eager)

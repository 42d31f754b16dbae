"""GPU tier of the block-scaled FP8 grouped family: every compiled variant against a per-expert float64
reference of the dequantized operands on fresh random data, over the grouped family's routings (empty
experts, skew, odd row counts, N and K not multiples of the tiles or of the 128-wide scale blocks); the
default choice, ``scaled_grouped_gemm`` taking block scales, CUDA-graph replays with new offsets and
torch.compile.

Outputs are poisoned with NaN first, so an unwritten element fails, and rows past offsets[-1] must stay NaN.
Skipped, with the reason, without a Hopper GPU, torch with CUDA, or compiled block-scaled variants.
"""

from __future__ import annotations

import pytest

import wavetune
from test_grouped_gpu import check as check_dequantized, routings
from wavetune.tuning.timing import capture_documented

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
from wavetune.families.grouped_gemm.measure import dequantize_experts, quantize  # noqa: E402 (imports torch)

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def operands(counts, n, k, out_dtype, spare_rows=0):
    """x, w, scale_x [rows, K/128], scale_w [experts, N/128, K/128] and offsets on the GPU, a NaN-poisoned
    out; magnitudes that differ per token, per channel and along K, so a scale applied to the wrong block
    shows."""
    rows, experts = sum(counts) + spare_rows, len(counts)
    along_k = torch.rand(1, k, device="cuda") * 4
    x, scale_x = quantize(torch.randn(rows, k, device="cuda") * torch.rand(rows, 1, device="cuda") * along_k,
                          "block", 1)
    w = torch.randn(experts, n, k, device="cuda") * torch.rand(experts, n, 1, device="cuda") / k**0.5
    w, scale_w = quantize(w * along_k.flip(1), "block", 128)
    offsets = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
    out = torch.full((rows, n), float("nan"), device="cuda", dtype=out_dtype)
    return x, w, scale_x, scale_w, offsets, out


def check(x, w, scale_x, scale_w, offsets, out):
    """The grouped family's check (per expert, against float64) on the dequantized operands."""
    f32 = torch.float32
    check_dequantized(dequantize_experts(x, scale_x, 1, f32), dequantize_experts(w, scale_w, 128, f32), offsets, out)


def variants():
    return [pytest.param(c, id=c.name) for c in wavetune.block_scaled_grouped_configs()]


@pytest.fixture(autouse=True)
def _needs_variants():
    if not wavetune.block_scaled_grouped_configs():
        pytest.skip("no block-scaled grouped variants compiled (build with WAVETUNE_KERNEL_FILTER matching "
                    "e4m3_block128_grouped_*)")


def some_dtype():
    dtypes = {c.dtype for c in wavetune.block_scaled_grouped_configs()}
    return "bf16" if "bf16" in dtypes else dtypes.pop()


@pytest.mark.parametrize("variant", variants())
@pytest.mark.parametrize("name, counts, n, k", routings(), ids=[r[0] for r in routings()])
def test_every_variant(variant, name, counts, n, k):
    k = -(-k // 16) * 16  # e4m3 rows of 16 bytes
    x, w, scale_x, scale_w, offsets, out = operands(counts, n, k, DTYPES[variant.dtype], spare_rows=3)
    result = wavetune.block_scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, out_dtype=DTYPES[variant.dtype],
                                                out=out, config=variant.id)
    assert result is out
    check(x, w, scale_x, scale_w, offsets, out)


@pytest.mark.parametrize("rows", [1, 7, 255, 1000, 4097, 16384])
@pytest.mark.parametrize("experts", [8, 128])
def test_default_choice_over_token_counts(rows, experts):
    """Through scaled_grouped_gemm, which hands block scales to this family."""
    dtype = DTYPES[some_dtype()]
    counts = torch.randint(0, experts, (rows,)).bincount(minlength=experts).tolist()
    x, w, scale_x, scale_w, offsets, out = operands(counts, 264, 640, dtype)
    wavetune.scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, out_dtype=dtype, out=out)
    check(x, w, scale_x, scale_w, offsets, out)


def test_cuda_graph_replays_follow_the_offsets_on_the_gpu():
    """PyTorch's documented capture; the graph serves new offsets without a recapture."""
    dtype = DTYPES[some_dtype()]
    x, w, scale_x, scale_w, offsets, out = operands([5, 0, 40, 3], 264, 384, dtype)
    graph, _ = capture_documented(
        lambda: wavetune.block_scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, out_dtype=dtype, out=out))
    for counts in ([5, 0, 40, 3], [0, 48, 0, 0], [12, 12, 12, 12], [1, 2, 3, 42]):
        offsets.copy_(torch.tensor(counts).cumsum(0))
        out.fill_(float("nan"))
        graph.replay()
        check(x, w, scale_x, scale_w, offsets, out)


def test_empty_experts_write_nothing():
    dtype = DTYPES[some_dtype()]
    x, w, scale_x, scale_w, offsets, out = operands([0, 0, 0], 264, 256, dtype, spare_rows=4)
    wavetune.block_scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, out_dtype=dtype, out=out)
    torch.cuda.synchronize()
    assert out.isnan().all(), "no expert owns a row: nothing is written"


def test_torch_ops_match_and_compile():
    pytest.importorskip("wavetune.torch_ops")
    dtype = DTYPES[some_dtype()]
    x, w, scale_x, scale_w, offsets, out = operands([3, 0, 70, 9], 264, 512, dtype)
    for op in (torch.ops.wavetune.block_scaled_grouped_gemm, torch.ops.wavetune.scaled_grouped_gemm):
        check(x, w, scale_x, scale_w, offsets, out.copy_(op(x, w, scale_x, scale_w, offsets, dtype)))
        compiled = torch.compile(lambda *args, op=op: op(*args, dtype), fullgraph=True)
        eager = wavetune.block_scaled_grouped_gemm(x, w, scale_x, scale_w, offsets, out_dtype=dtype)
        assert torch.equal(compiled(x, w, scale_x, scale_w, offsets), eager)

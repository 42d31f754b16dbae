"""GPU tier of the grouped family's Ampere-style (multistage, arch sm80) variants: every compiled one against a
per-expert float64 reference on fresh random data, over uneven routings with empty experts, more experts than the
kernel scans at once (32) and row counts off the tiles; a CUDA graph replayed over new offsets; the occupancy that
sizes their grid; and the choices of a process that serves an Ampere GPU (WAVETUNE_ARCH=sm80). Outputs are
poisoned with NaN before each call, so an unwritten element fails, and rows past offsets[-1] must stay NaN.

Build them with the `sm80` kernel set: benchmarks/gpu_run.sh "sm80" "tests/test_sm80_grouped_gpu.py".
"""

from __future__ import annotations

import pytest

import wavetune
from conftest import run_served_as_sm80
from wavetune import _C

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

from test_grouped_gpu import DTYPES, check, operands, routings  # noqa: E402

# (name, rows per expert, n, k) beyond test_grouped_gpu's routings: experts past the 32 a warp of the kernel's
# problem visitor reads at once, the empty ones among them, and rows that fill no tile exactly.
WIDE_ROUTINGS = [
    ("40_experts_uneven", [(e * 37) % 11 if e % 3 else 0 for e in range(40)], 264, 520),
    ("70_experts_one_busy_each_end", [9] + [0] * 68 + [130], 136, 264),
    ("33_experts_prefill", [300 + 17 * (e % 5) for e in range(33)], 1288, 776),
]


def multistage_variants():
    if not torch.cuda.is_available():
        return []
    return [c for c in wavetune.grouped_configs() if c.schedule == "multistage"]


def variant_params():
    return [pytest.param(c, id=c.name) for c in multistage_variants()]


@pytest.fixture(autouse=True)
def needs_variants():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    if not multistage_variants():
        pytest.skip("no multistage (sm80) grouped variant compiled: build with WAVETUNE_KERNEL_SET=sm80")


@pytest.mark.parametrize("variant", variant_params())
@pytest.mark.parametrize("name, counts, n, k", routings() + WIDE_ROUTINGS,
                         ids=[r[0] for r in routings() + WIDE_ROUTINGS])
def test_every_multistage_variant(variant, name, counts, n, k):
    x, w, offsets, out = operands(counts, n, k, DTYPES[variant.dtype], spare_rows=5)
    assert wavetune.grouped_gemm(x, w, offsets, out=out, config=variant.id) is out
    check(x, w, offsets, out)


@pytest.mark.parametrize("variant", variant_params())
def test_cuda_graph_replays_follow_the_offsets_on_the_gpu(variant):
    """The expert arguments are written on the GPU from the offsets: a captured launch serves new routings."""
    x, w, offsets, out = operands([5, 0, 40, 3, 0, 0, 70, 2], 264, 200, DTYPES[variant.dtype])
    wavetune.grouped_gemm(x, w, offsets, out=out, config=variant.id)  # warm-up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        wavetune.grouped_gemm(x, w, offsets, out=out, config=variant.id)
    for counts in ([0, 0, 0, 120, 0, 0, 0, 0], [15] * 8, [1, 2, 3, 4, 5, 6, 7, 8], [0, 64, 0, 0, 0, 0, 0, 56]):
        offsets.copy_(torch.tensor(counts).cumsum(0))
        out.fill_(float("nan"))
        graph.replay()
        check(x, w, offsets, out)


def test_occupancy_is_read_from_the_kernel():
    """CTAs per SM from registers and shared memory; a 48 KB, 4-warp kernel fits more than one per SM. The
    mapping's capacity counts them."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for v in multistage_variants():
        ctas = _C.grouped_ctas_per_sm(v.id)
        assert 1 <= ctas <= 32, (v.name, ctas)
        capacity = _C.map_grouped_balanced((v.tile, v.cluster, v.swap_ab), 4096, 8, 4096, 4096, sms, ctas)[2]
        assert capacity == sms * ctas, v.name
    small = [v for v in multistage_variants() if v.tile == (64, 64, 64)]
    if small:
        assert _C.grouped_ctas_per_sm(small[0].id) >= 2
    hopper = [c for c in wavetune.grouped_configs() if c.schedule != "multistage"]
    if hopper:
        assert _C.grouped_ctas_per_sm(hopper[0].id) == 1


def test_the_built_in_choice_takes_the_gpus_own_architecture():
    """On a Hopper GPU with Hopper variants of the dtype compiled, the heuristic never takes a multistage one."""
    ampere = {c.dtype for c in multistage_variants()}
    both = [(d, code) for d, code in (("bf16", 0), ("fp16", 1)) if d in ampere and any(
        c.dtype == d and c.schedule != "multistage" for c in wavetune.grouped_configs())]
    if not both:
        pytest.skip("no dtype with both Hopper and multistage grouped variants compiled (kernel set full)")
    for dtype, code in both:
        hopper = {c.id for c in wavetune.grouped_configs() if c.dtype == dtype and c.schedule != "multistage"}
        for rows in (1, 64, 1000, 30000):
            assert _C.grouped_default_variant(code, rows, 8, 4096, 2048) in hopper, (dtype, rows)


def test_ampere_choices_take_only_portable_variants():
    """Served as an Ampere GPU, the grouped listing holds only multistage variants, the built-in choice takes one
    for every token count, and the chosen launch runs."""
    script = (
        "import torch, wavetune\n"
        "from wavetune import _C\n"
        "listed = wavetune.grouped_configs()\n"
        "assert listed and all(c.schedule == 'multistage' and c.arch == 'sm80' for c in listed), 'listing'\n"
        "dtype = listed[0].dtype\n"
        "code, torch_dtype = (0, torch.bfloat16) if dtype == 'bf16' else (1, torch.float16)\n"
        "for rows in (1, 16, 1000, 30000):\n"
        "    assert _C.grouped_default_variant(code, rows, 8, 4096, 2048) in {c.id for c in listed}, rows\n"
        "counts = [0, 7, 300, 0, 1, 64, 0, 9]\n"
        "x = torch.randn(sum(counts), 520, device='cuda', dtype=torch_dtype)\n"
        "w = torch.randn(8, 264, 520, device='cuda', dtype=torch_dtype) / 520 ** 0.5\n"
        "offsets = torch.tensor(counts, device='cuda').cumsum(0).to(torch.int32)\n"
        "out = wavetune.grouped_gemm(x, w, offsets)\n"
        "ends = offsets.tolist()\n"
        "for e, (start, end) in enumerate(zip([0, *ends[:-1]], ends)):\n"
        "    ref = (x[start:end].double() @ w[e].double().t()).to(torch_dtype)\n"
        "    torch.testing.assert_close(out[start:end], ref, rtol=2e-2, atol=2e-2)\n"
        "print('ok')\n"
    )
    run_served_as_sm80(script)

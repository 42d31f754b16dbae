"""GPU tier: every compiled variant and micro mode against a float32 reference on fresh random inputs.

Outputs are poisoned with NaN before each call, so an unwritten element fails the check.
Skipped, with the reason, unless a Hopper GPU, torch with CUDA and compiled kernels are present.
"""

from __future__ import annotations

import pytest

import wavetune

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# M from decode to prefill; N and K multiples of 8 but not of any tile size.
SHAPES = [(1, 264, 200), (7, 4104, 520), (129, 392, 1032), (1000, 1288, 776)]
TOLERANCE = 1e-2  # relative Frobenius error of 16-bit outputs with fp32 accumulation


def operands(m, n, k, dtype, b_layout, batch=()):
    """x [*batch, m, k] and B [k, n]: col = W.t() of an nn.Linear weight W[n, k], row = contiguous [k, n]."""
    x = torch.randn(*batch, m, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5
    b = w.t() if b_layout == "col" else w.t().contiguous()
    return x, b


def check(x, b, **kwargs):
    ref = x.double() @ b.double()
    out = torch.full(ref.shape, float("nan"), device="cuda", dtype=x.dtype)
    result = wavetune.gemm(x, b, out=out, **kwargs)
    torch.cuda.synchronize()
    assert result is out
    assert not out.isnan().any(), "some output elements were not written"
    error = ((out.double() - ref).norm() / ref.norm()).item()
    assert error < TOLERANCE, f"relative error {error:.3g}"


def variant_ids():
    return [pytest.param(c, id=c.name) for c in wavetune.configs()]


@pytest.mark.parametrize("variant", variant_ids())
@pytest.mark.parametrize("m, n, k", SHAPES)
def test_every_variant(variant, m, n, k):
    x, b = operands(m, n, k, DTYPES[variant.dtype], variant.b_layout)
    check(x, b, config=variant.id)


@pytest.mark.parametrize("variant", variant_ids())
def test_every_variant_with_padded_rows(variant):
    """Leading dimensions larger than the rows (slices of wider tensors), for A, B and D."""
    m, n, k, dtype = 33, 264, 200, DTYPES[variant.dtype]
    x = torch.randn(m, k + 8, device="cuda", dtype=dtype)[:, :k]
    if variant.b_layout == "col":
        b = (torch.randn(n, k + 16, device="cuda", dtype=dtype)[:, :k] / k**0.5).t()
    else:
        b = torch.randn(k, n + 16, device="cuda", dtype=dtype)[:, :n] / k**0.5
    out_wide = torch.full((m, n + 24), float("nan"), device="cuda", dtype=dtype)
    wavetune.gemm(x, b, out=out_wide[:, :n], config=variant.id)
    torch.cuda.synchronize()
    ref = x.double() @ b.double()
    assert ((out_wide[:, :n].double() - ref).norm() / ref.norm()).item() < TOLERANCE
    assert out_wide[:, n:].isnan().all(), "wrote outside the output view"


def micro_modes(variant):
    if variant.schedule == "multistage":
        # Swizzles only: no raster option, and serial split-K (rounding between splits) is checked with its own
        # tolerance in tests/test_sm80_gemm_gpu.py.
        return [wavetune.LaunchConfig(variant.name, max_swizzle=2),
                wavetune.LaunchConfig(variant.name, decomposition="data_parallel", max_swizzle=8)]
    modes = [
        wavetune.LaunchConfig(variant.name, raster="along_m", max_swizzle=2),
        wavetune.LaunchConfig(variant.name, raster="along_n", max_swizzle=8),
        wavetune.LaunchConfig(variant.name, decomposition="data_parallel", max_swizzle=4),
    ]
    if variant.scheduler == "stream_k":
        modes += [
            wavetune.LaunchConfig(variant.name, decomposition="split_k", splits=2),
            wavetune.LaunchConfig(variant.name, decomposition="split_k", splits=5, raster="along_n"),
            wavetune.LaunchConfig(variant.name, decomposition="stream_k"),
            wavetune.LaunchConfig(variant.name, decomposition="stream_k", raster="along_m", max_swizzle=2),
        ]
    return modes


@pytest.mark.parametrize("variant", variant_ids())
@pytest.mark.parametrize("m, n, k", [(7, 4104, 2056), (1000, 1288, 776)])
def test_micro_modes(variant, m, n, k):
    x, b = operands(m, n, k, DTYPES[variant.dtype], variant.b_layout)
    for mode in micro_modes(variant):
        check(x, b, config=mode)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("b_layout", ["col", "row"])
def test_default_choice_with_batch_dims(dtype, b_layout):
    if not any(c.dtype == dtype and c.b_layout == b_layout for c in wavetune.configs()):
        pytest.skip(f"no {dtype} variant with {b_layout}-major B in this kernel set")
    x, b = operands(5, 136, 96, DTYPES[dtype], b_layout, batch=(2, 3))
    check(x, b)
    out = wavetune.gemm(x, b)
    assert out.shape == (2, 3, 5, 136) and out.dtype == DTYPES[dtype]


def test_matches_torch_matmul_for_a_linear_layer():
    x = torch.randn(33, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16)
    ours, theirs = wavetune.gemm(x, w.t()), torch.nn.functional.linear(x, w)
    assert ((ours.float() - theirs.float()).norm() / theirs.float().norm()).item() < TOLERANCE


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("m, n, k", [(1, 4096, 4096), (300, 1024, 4608), (1024, 10240, 8192), (4099, 1032, 776)])
def test_the_cublas_candidate_is_torch_matmul(dtype, m, n, k):
    """The cuBLAS candidate makes torch.matmul's call (cublasGemmEx, same workspace size), so it runs the
    same kernel: the outputs agree bit for bit, split-K shapes included."""
    name = f"cublas_{dtype}_bcol"
    if name not in {c.name for c in wavetune.configs()}:
        pytest.skip(f"{name} is absent: libcublas could not be loaded")
    x = torch.rand(m, k, device="cuda", dtype=DTYPES[dtype]) * 2 - 1
    w = (torch.rand(n, k, device="cuda", dtype=DTYPES[dtype]) * 2 - 1) / k**0.5
    out = torch.full((m, n), float("nan"), device="cuda", dtype=x.dtype)
    wavetune.gemm(x, w.t(), out=out, config=name)
    assert torch.equal(out, x @ w.t())


def test_vector_and_empty_inputs():
    b = torch.randn(16, 64, device="cuda", dtype=torch.bfloat16).t()  # column-major [K=64, N=16]
    check(torch.randn(64, device="cuda", dtype=torch.bfloat16), b)  # [K] @ [K, N] -> [N]
    assert wavetune.gemm(torch.randn(0, 64, device="cuda", dtype=torch.bfloat16), b).shape == (0, 16)
    zero_k = wavetune.gemm(torch.randn(3, 0, device="cuda", dtype=torch.bfloat16), b[:0])
    assert zero_k.shape == (3, 16) and (zero_k == 0).all()


def test_strided_rows_and_a_side_stream():
    x = torch.randn(65, 520, device="cuda", dtype=torch.bfloat16)[:, :512]  # lda = 520
    out_wide = torch.full((65, 272), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = out_wide[:, :264]  # ldd = 272: the padding columns must stay untouched
    b = torch.randn(264, 512, device="cuda", dtype=torch.bfloat16).t()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        wavetune.gemm(x, b, out=out)
    side.synchronize()
    ref = x.double() @ b.double()
    assert ((out.double() - ref).norm() / ref.norm()).item() < TOLERANCE
    assert out_wide[:, 264:].isnan().all()


def test_errors_on_the_gpu():
    x = torch.randn(4, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(32, 64, device="cuda", dtype=torch.bfloat16).t()  # column-major [K=64, N=32]
    with pytest.raises(ValueError, match="one CUDA device, got cuda:0, cpu"):
        wavetune.gemm(x, b.cpu())
    with pytest.raises(ValueError, match="K=60 and N=32 must be multiples of 8"):
        wavetune.gemm(x[:, :60], b[:60])
    with pytest.raises(ValueError, match="16-byte aligned"):
        wavetune.gemm(torch.randn(4 * 64 + 1, device="cuda", dtype=torch.bfloat16)[1:].view(4, 64), b)
    mismatched = [c for c in wavetune.configs() if c.dtype == "fp16"]
    if mismatched:
        with pytest.raises(ValueError, match="takes fp16 .* the problem is bf16"):
            wavetune.gemm(x, b, config=mismatched[0].id)
    persistent = [c for c in wavetune.configs()
                  if c.scheduler == "persistent" and c.dtype == "bf16" and c.b_layout == "col"]
    if persistent:
        with pytest.raises(ValueError, match="needs a stream_k variant"):
            wavetune.gemm(x, b, config=wavetune.LaunchConfig(persistent[0].id, decomposition="split_k", splits=2))
    torch.cuda.synchronize()  # no launch error was left behind


def write_device_table(path, cands, waves, exact=None, **records) -> None:
    """A table for this GPU and build over ``cands`` with the given wave models, no micro rules, and
    ``records`` (exact, priors) as write_table takes them."""
    from wavetune.tuning import tablefile

    props = wavetune.device_properties()
    tablefile.write_table(
        path,
        meta={"gpu_name": props["name"], "sm_count": props["sm_count"],
              "config_space_hash": wavetune.build_info()["config_space_hash"], "wavetune_version": "test",
              "cuda_version": 13000, "created": "2026-11-23T00:00:00+00:00"},
        configs=[{"variant": c.variant.name, "decomposition": c.decomposition, "splits": c.splits} for c in cands],
        waves=waves, micro={}, exact=exact, **records)


def test_gemm_follows_a_loaded_table(tmp_path):
    """Model choices (every candidate wins somewhere) and an exact range launch correct kernels."""
    from wavetune import _C
    from wavetune.families.gemm import tuning

    cands = tuning.candidates()
    if not cands:
        pytest.skip("no bf16 column-major variant compiled")
    path = tmp_path / "table.wtt"
    # Constant models: the middle candidate wins every model choice; the exact range picks candidate 0.
    waves = {i: {1: [1.0 + abs(i - len(cands) // 2), 0.0, 0.0, 0.0]} for i in range(len(cands))}
    write_device_table(path, cands, waves, exact=[{"dtype": "bf16", "b_layout": "col", "m_first": 33, "m_last": 48,
                                                   "n": 1032, "k": 520, "config_id": 0, "raster": "along_n",
                                                   "max_swizzle": 2, "us": 5.0}])
    info = wavetune.load_table(path)
    try:
        assert info["configs"] == len(cands)
        for m, n, k in [(40, 1032, 520), (33, 1032, 520), (3, 4104, 2056), (300, 1288, 776)]:
            x, b = operands(m, n, k, torch.bfloat16, "col")
            check(x, b)
    finally:
        _C.use_table(torch.cuda.current_device(), None)


def test_graph_capture_needs_no_warm_up():
    """A split-K launch captured on a stream that never ran it: the workspace comes from the graph's pool."""
    split = [c for c in wavetune.configs() if c.scheduler == "stream_k" and c.dtype == "bf16" and c.b_layout == "col"]
    if not split:
        pytest.skip("no bf16 column-major stream-K variant in this kernel set")
    config = wavetune.LaunchConfig(split[0].name, decomposition="split_k", splits=2)
    x, b = operands(64, 1032, 4096, torch.bfloat16, "col")
    out = torch.full((64, 1032), float("nan"), device="cuda", dtype=torch.bfloat16)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=torch.cuda.Stream()):
        wavetune.gemm(x, b, out=out, config=config)
    graph.replay()
    torch.cuda.synchronize()
    ref = x.double() @ b.double()
    assert ((out.double() - ref).norm() / ref.norm()).item() < TOLERANCE


def test_graph_survives_a_larger_eager_launch():
    """A graph captured with a split-K launch still computes the right result after a larger eager problem
    ran on the same stream (the graph's workspace is its own)."""
    split = [c for c in wavetune.configs() if c.scheduler == "stream_k" and c.dtype == "bf16" and c.b_layout == "col"]
    if not split:
        pytest.skip("no bf16 column-major stream-K variant in this kernel set")
    config = wavetune.LaunchConfig(split[0].name, decomposition="split_k", splits=2)
    x, b = operands(64, 1032, 4096, torch.bfloat16, "col")
    out = torch.empty((64, 1032), device="cuda", dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        wavetune.gemm(x, b, out=out, config=config)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        wavetune.gemm(x, b, out=out, config=config)
    with torch.cuda.stream(stream):  # many times the workspace
        big = wavetune.LaunchConfig(split[0].name, decomposition="split_k", splits=4)
        wavetune.gemm(*operands(512, 4096, 4096, torch.bfloat16, "col"), config=big)
    stream.synchronize()
    for _ in range(3):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = x.double() @ b.double()
        assert ((out.double() - ref).norm() / ref.norm()).item() < TOLERANCE


def test_profiler_lead_in_times_the_same_kernel():
    """Lead-in launches are untimed: the timed replays per launch stay within the run-to-run spread of
    those without them, every runnable config gets a positive time, and a bad option is refused."""
    from wavetune import _C
    from wavetune.families.gemm import tuning

    cands = tuning.candidates()
    if not cands:
        pytest.skip("no bf16 column-major variant compiled")
    launches = [c.launch() for c in cands[:3]]
    shape = (256, 4096, 4096, _C.DTYPES.index("bf16"), _C.B_LAYOUTS.index("col"))
    plain = _C.profile(*shape, launches, replays=7, seed=5)
    led = _C.profile(*shape, launches, replays=7, seed=5, lead_in=2)
    assert all(us > 0 for us in plain + led)
    assert all(0.8 < a / b < 1.25 for a, b in zip(led, plain)), (led, plain)
    with pytest.raises(ValueError, match="lead_in"):
        _C.profile(*shape, launches, lead_in=-1)


def test_tune_within_a_budget(tmp_path):
    """`python -m wavetune tune --budget` end to end, on the few fp16 row-major-B variants: it stays within
    the budget, and the table it writes loads and chooses one of them."""
    from wavetune.families.gemm import tuning
    from wavetune.runtime import tables
    from wavetune.__main__ import main

    cands = tuning.candidates("fp16", "row")
    if all(c.variant.from_library for c in cands):
        pytest.skip("no CUTLASS fp16 variant with row-major B in this kernel set")
    sm_count = wavetune.device_properties()["sm_count"]
    budget = tuning.planned_measurements(tuning.anchor_plan(cands, sm_count), sm_count) - 1
    log = tmp_path / "log.jsonl"
    args = ["--dtype", "fp16", "--b-layout", "row", "--budget", str(budget), "--log", str(log), "--out", str(tmp_path)]
    assert main(["tune", *args]) == 0
    records = log.read_text().splitlines()[1:]
    assert 0 < len(records) <= budget
    [table] = tmp_path.glob("*.wtt")
    selector = tables.open_table(table)
    assert selector.meta()["plan_waves"] == ",".join(map(str, tuning.budget_plan(cands, sm_count, budget)[1]))
    choice = selector.select("fp16", "row", 4096, 4096, 4096)
    assert choice["name"] in {c.variant.name for c in cands}


def test_deployment_tuning_covers_every_m(tmp_path):
    """`python -m wavetune tune --shapes` end to end on one small layer up to M = 512: the table it writes
    loads on this GPU, an exact range holds every M, and gemm runs its choices correctly."""
    import json

    from wavetune import _C
    from wavetune.families.gemm import tuning
    from wavetune.runtime import tables
    from wavetune.__main__ import main

    cands = tuning.candidates()
    if not cands:
        pytest.skip("no bf16 column-major variant compiled")
    props = wavetune.device_properties()
    base = tmp_path / "base.wtt"
    # Constant models, half of them twice as slow as the rest: the screen measures only the other half.
    write_device_table(base, cands, {i: {1: [1.0 + 2.0 * (i % 2), 0.0, 0.0, 0.0]} for i in range(len(cands))},
                       exact=[], priors=tuning.prior_records(cands, "bf16", "col"))
    shapes = tmp_path / "model.json"
    shapes.write_text(json.dumps({"M": [], "models": {"tiny": {"o": [1024, 1024]}}}))
    out = tmp_path / "deployed.wtt"
    log = tmp_path / "log.jsonl"
    assert main(["tune", "--shapes", str(shapes), "--table", str(base), "--max-m", "512", "--log", str(log),
                 "--out", str(out)]) == 0
    selector = tables.open_table(out)
    selector.check_device(props["name"], props["sm_count"])
    assert {selector.select("bf16", "col", m, 1024, 1024)["source"] for m in range(1, 513)} == {"exact"}
    wavetune.load_table(out)
    try:
        for m in (1, 77, 512):
            x, b = operands(m, 1024, 1024, torch.bfloat16, "col")
            check(x, b)
    finally:
        _C.use_table(torch.cuda.current_device(), None)


GREEN_CONTEXT_PROBE = """
import json, sys, torch, wavetune
full = torch.cuda.get_device_properties(0).multi_processor_count
green = torch.cuda.green_contexts.GreenContext.create(int(sys.argv[1]), 0)
(green.set_context if hasattr(green, "set_context") else green.make_current)()
x = torch.randn(1000, 1288, device="cuda", dtype=torch.bfloat16)
w = torch.randn(776, 1288, device="cuda", dtype=torch.bfloat16) / 1288**0.5
out = torch.full((1000, 776), float("nan"), device="cuda", dtype=torch.bfloat16)
wavetune.gemm(x, w.t(), out=out)
ref = x.double() @ w.t().double()
error = ((out.double() - ref).norm() / ref.norm()).item()
print(json.dumps({"full": full, "props": wavetune.device_properties(), "error": error}))
"""


@pytest.mark.skipif(not hasattr(torch.cuda, "green_contexts") or not getattr(torch.cuda.green_contexts, "SUPPORTED", True),
                    reason="this torch has no CUDA green contexts")
def test_a_green_context_is_a_gpu_of_its_sms():
    """Confined to fewer SMs, wavetune sees the smaller GPU: its SM count, a name of its own (tables are found by
    name) and correct results from kernels whose grids are sized to it. A fresh process, as the context is."""
    import json
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", GREEN_CONTEXT_PROBE, "64"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["props"]["sm_count"] < seen["full"], seen
    assert 48 <= seen["props"]["sm_count"] <= 72, seen  # the partition rounds to the driver's SM granularity
    assert seen["props"]["name"].endswith(f"({seen['props']['sm_count']} SMs)"), seen
    assert seen["error"] < TOLERANCE, seen

"""GPU tier: CUDA graphs captured the ways PyTorch documents them and serving engines use them, for every
kind of dense choice (cuBLAS, a split-K CUTLASS launch, a data-parallel CUTLASS launch) and for the grouped
and attention families. Each graph is replayed on fresh inputs with its output poisoned first, and checked
against eager calls on the same inputs (and, for dense layers, against the unpatched layers).
"""

from __future__ import annotations

import contextlib
from typing import Callable, NamedTuple

import pytest

torch = pytest.importorskip("torch")  # before the modules below, which import it

import wavetune
from wavetune import _C
from wavetune import torch_ops  # noqa: F401  (registers torch.ops.wavetune)
from wavetune.families.gemm import torch_ops as gemm_ops  # noqa: E402
from wavetune.runtime import tables
from wavetune.tuning.timing import capture_documented

from test_gpu import write_device_table

pytestmark = pytest.mark.gpu

BF16 = torch.bfloat16
HIDDEN, FFN = 256, 520  # K = 256 is four 64-deep k-tiles: room for three splits
SIZES = (256, 64, 7, 2, 1)  # tokens (or sequences) an engine captures, largest first; they share one pool
TOLERANCE = 1e-2  # relative Frobenius error of bf16 outputs with fp32 accumulation
REPEAT_TOLERANCE = 1e-3  # between two runs of a kernel that is not bit-reproducible (cuDNN's decode)


def relative_error(result, reference):
    return ((result.double() - reference.double()).norm() / reference.double().norm()).item()


class Block(torch.nn.Module):
    """Two biased linear layers around an activation: a transformer MLP in miniature."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(HIDDEN, FFN, device="cuda", dtype=BF16)
        self.down = torch.nn.Linear(FFN, HIDDEN, device="cuda", dtype=BF16)
        for p in self.parameters():
            torch.nn.init.normal_(p, std=0.05)  # biases of the size of the products
            p.requires_grad_(False)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


class Experts(torch.nn.Module):
    """A mixture-of-experts projection: rows sorted by expert, through torch.ops.wavetune.grouped_gemm."""

    def __init__(self, experts=8, n=264, k=HIDDEN):
        super().__init__()
        self.register_buffer("w", torch.randn(experts, n, k, device="cuda", dtype=BF16) / k**0.5)

    def forward(self, x, offsets):
        return torch.ops.wavetune.grouped_gemm(x, self.w, offsets)


class DecodeAttention(torch.nn.Module):
    """One decode step over 300 cached tokens, grouped-query heads, through torch.ops.wavetune.attention."""

    def forward(self, q, k, v):
        return torch.ops.wavetune.attention(q, k, v, causal=True)


class Workload(NamedTuple):
    module: torch.nn.Module
    inputs: Callable[[int], list]  # size -> fresh inputs
    reference: torch.nn.Module | None  # computes what module should, without wavetune
    bitwise: bool = True  # a replay equals an eager call bit for bit (else within REPEAT_TOLERANCE)


def dense_choices() -> dict:
    """One bf16 column-major table config of each kind this build has, by kind."""
    from wavetune.families.gemm import tuning

    kinds = {}
    for v in wavetune.configs():
        if (v.dtype, v.b_layout) != ("bf16", "col"):
            continue
        if v.from_library:
            kinds.setdefault("cublas", tuning.Candidate(v))
        elif v.schedule == "decode":
            kinds.setdefault("decode", tuning.Candidate(v, "split_k", 4))
        elif v.schedule == "multistage":  # serial split-K: its semaphores are zeroed on the stream
            kinds.setdefault("multistage", tuning.Candidate(v, "split_k", 2))
        elif v.scheduler == "stream_k":
            kinds.setdefault("split_k", tuning.Candidate(v, "split_k", 3))
        elif v.scheduler == "persistent":
            kinds.setdefault("data_parallel", tuning.Candidate(v))
    return kinds


def use_one_config_table(kind: str, path) -> None:
    """Make the device's dense table one config of ``kind``, so that every dense choice is that config."""
    candidate = dense_choices().get(kind)
    if candidate is None:
        pytest.skip(f"no bf16 column-major {kind} config in this build")
    write_device_table(path, [candidate], {0: {1: [1.0, 0.0, 0.0, 0.0]}})
    wavetune.load_table(path)
    device, code = torch.cuda.current_device(), (_C.DTYPES.index("bf16"), _C.B_LAYOUTS.index("col"))
    for m, n, k in [(1, FFN, HIDDEN), (256, HIDDEN, FFN)]:
        assert _C.PreparedGemm(m, n, k, k, k, n, *code, device).variant == candidate.variant.id


def grouped_inputs(rows: int) -> list:
    experts = torch.randint(0, 8, (rows,)).sort().values
    offsets = torch.bincount(experts, minlength=8).cumsum(0).to(device="cuda", dtype=torch.int32)
    return [torch.randn(rows, HIDDEN, device="cuda", dtype=BF16), offsets]


def attention_inputs(batch: int) -> list:
    q = torch.randn(batch, 1, 8, 128, device="cuda", dtype=BF16)
    return [q, *(torch.randn(batch, 300, 2, 128, device="cuda", dtype=BF16) for _ in range(2))]


@contextlib.contextmanager
def deterministic_algorithms(on: bool):
    """torch.use_deterministic_algorithms(on, warn_only=True) inside, the process's setting restored after."""
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(on, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


@pytest.fixture(params=["dense-cublas", "dense-split_k", "dense-data_parallel", "dense-decode", "dense-multistage",
                        "grouped_gemm", "attention", "attention-deterministic"])
def workload(request, tmp_path):
    family, _, kind = request.param.partition("-")
    if family == "grouped_gemm":
        if not wavetune.grouped_configs():
            pytest.skip("no grouped variant in this build")
        yield Workload(Experts(), grouped_inputs, None)
    elif family == "attention":
        if not any(not c.from_library for c in wavetune.attention_configs()):
            pytest.skip("no attention variant in this build")
        # Decode of this size runs cuDNN's attention, whose outputs differ run to run in the last bits;
        # with deterministic algorithms asked for, it runs the paged kernel, which is bit-reproducible.
        deterministic = kind == "deterministic"
        with deterministic_algorithms(deterministic):
            yield Workload(DecodeAttention(), attention_inputs, None, bitwise=deterministic)
    else:
        use_one_config_table(kind, tmp_path / "one_config.wtt")
        reference, patched = Block().eval(), Block().eval()
        patched.load_state_dict(reference.state_dict())
        assert wavetune.patch(patched).patched == ["up", "down"]
        yield Workload(patched, lambda rows: [torch.randn(rows, HIDDEN, device="cuda", dtype=BF16)], reference)
        device = torch.cuda.current_device()
        _C.use_table(device, None)
        gemm_ops._plans.clear()
        tables.checked_devices().discard(device)  # the next call looks for the shipped table again


def check_output(work: Workload, inputs: list, output: torch.Tensor) -> None:
    torch.cuda.synchronize()
    assert not output.isnan().any(), "outputs left unwritten"
    eager = work.module(*inputs)
    if work.bitwise:
        assert torch.equal(output, eager), "differs from an eager call"
    else:
        assert relative_error(output, eager) < REPEAT_TOLERANCE, "differs from an eager call"
    if work.reference is not None:
        assert relative_error(output, work.reference(*inputs)) < TOLERANCE


def check_replays(work: Workload, graph, static_inputs: list, static_output, replay=None, rounds=2):
    """Replay on fresh values of the first input (the others, such as routing offsets, stay)."""
    for _ in range(rounds):
        static_inputs[0].copy_(torch.randn_like(static_inputs[0]))
        static_output.fill_(float("nan"))
        (replay or graph.replay)()
        check_output(work, static_inputs, static_output)


@torch.inference_mode()
def test_documented_pattern(workload):
    """PyTorch's CUDA-graph example: warm-up on a side stream, then torch.cuda.graph(g) on its own stream."""
    static_inputs = workload.inputs(8)
    graph, static_output = capture_documented(workload.module, *static_inputs)
    check_replays(workload, graph, static_inputs, static_output)


@torch.inference_mode()
def test_engine_pattern_shared_pool(workload):
    """A serving engine's pattern: one eager warm-up per size, then every size captured on a dedicated stream
    into one memory pool, largest first; replayed in capture order, as graphs sharing a pool must be."""
    pool, capture_stream, graphs = torch.cuda.graph_pool_handle(), torch.cuda.Stream(), []
    for size in SIZES:
        static_inputs = workload.inputs(size)
        workload.module(*static_inputs)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, stream=capture_stream):
            static_output = workload.module(*static_inputs)
        graphs.append((graph, static_inputs, static_output))
    for _ in range(2):
        for graph, static_inputs, static_output in graphs:
            static_inputs[0].copy_(torch.randn_like(static_inputs[0]))
            static_output.fill_(float("nan"))
            graph.replay()
        for graph, static_inputs, static_output in graphs:
            check_output(workload, static_inputs, static_output)


def test_make_graphed_callables(workload):
    sample = workload.inputs(16)
    graphed = torch.cuda.make_graphed_callables(workload.module, tuple(sample))
    with torch.no_grad():
        for _ in range(2):
            sample[0] = torch.randn_like(sample[0])
            check_output(workload, sample, graphed(*sample))


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_torch_compile(workload, mode):
    torch._dynamo.reset()
    compiled = torch.compile(workload.module, mode=mode, fullgraph=True)
    with torch.inference_mode():
        for size in (1, 64, 64, 64):  # the repeated size runs from the captured graph
            inputs = workload.inputs(size)
            output = compiled(*inputs).clone()
            assert relative_error(output, workload.module(*inputs)) < TOLERANCE / 10
            if workload.reference is not None:
                assert relative_error(output, workload.reference(*inputs)) < TOLERANCE

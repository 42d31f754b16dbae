"""GPU tier: CUDA graphs captured the ways PyTorch documents them and serving engines use them, for every
kind of dense choice (cuBLAS, a split-K CUTLASS launch, a data-parallel CUTLASS launch) and for the grouped
and attention families. Each graph is replayed on fresh inputs with its output poisoned first, and checked
against eager calls on the same inputs.
"""

from __future__ import annotations

import pytest

import wavetune
from wavetune import _C, api, torch_ops

from test_gpu import write_device_table

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

BF16 = torch.bfloat16
HIDDEN, FFN = 256, 520  # K = 256 is four 64-deep k-tiles: room for three splits
BATCHES = (256, 64, 7, 2, 1)  # token counts an engine captures, largest first (they share one pool)
TOLERANCE = 1e-2  # relative Frobenius error of bf16 outputs with fp32 accumulation


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


def dense_choices() -> dict:
    """One bf16 column-major table config of each kind this build has, by kind."""
    from wavetune import tuning

    kinds = {}
    for v in wavetune.configs():
        if (v.dtype, v.b_layout) != ("bf16", "col"):
            continue
        if v.from_library:
            kinds.setdefault("cublas", tuning.Candidate(v))
        elif v.scheduler == "stream_k":
            kinds.setdefault("split_k", tuning.Candidate(v, "split_k", 3))
        elif v.scheduler == "persistent":
            kinds.setdefault("data_parallel", tuning.Candidate(v))
    return kinds


@pytest.fixture(params=["cublas", "split_k", "data_parallel"])
def choice(request, tmp_path):
    """The device's dense table holds one config of the given kind, so every dense choice is that config."""
    candidate = dense_choices().get(request.param)
    if candidate is None:
        pytest.skip(f"no bf16 column-major {request.param} config in this build")
    path = tmp_path / "one_config.wtt"
    write_device_table(path, [candidate], {0: {1: [1.0, 0.0, 0.0, 0.0]}})
    wavetune.load_table(path)
    device = torch.cuda.current_device()
    code = _C.DTYPES.index("bf16"), _C.B_LAYOUTS.index("col")
    for m, n, k in [(1, FFN, HIDDEN), (256, HIDDEN, FFN)]:
        assert _C.PreparedGemm(m, n, k, k, k, n, *code, device).variant == candidate.variant.id
    yield request.param
    _C.use_table(device, None)
    torch_ops._plans.clear()
    api._table_checked.discard(device)  # the next call looks for the shipped table again


@pytest.fixture
def block():
    """(eager reference, patched block sharing its parameters)."""
    reference = Block().eval()
    patched = Block().eval()
    patched.load_state_dict(reference.state_dict())
    assert wavetune.patch(patched).patched == ["up", "down"]
    return reference, patched


def check_replays(graph, static_x, static_y, patched, reference, rounds=2):
    """Replay on fresh inputs: every output written, equal to the patched block's eager output, and close
    to the unpatched block's."""
    for _ in range(rounds):
        static_x.copy_(torch.randn_like(static_x))
        static_y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert not static_y.isnan().any(), "the replay left outputs unwritten"
        assert torch.equal(static_y, patched(static_x)), "the replay differs from an eager call"
        assert relative_error(static_y, reference(static_x)) < TOLERANCE


@torch.inference_mode()
def test_documented_pattern(choice, block):
    """PyTorch's CUDA-graph example: warm-up on a side stream, then torch.cuda.graph(g) on its own stream."""
    reference, patched = block
    static_x = torch.randn(8, HIDDEN, device="cuda", dtype=BF16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            patched(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = patched(static_x)
    check_replays(graph, static_x, static_y, patched, reference)


@torch.inference_mode()
def test_engine_pattern_shared_pool(choice, block):
    """A serving engine's pattern: one eager warm-up per batch size, then every size captured on a dedicated
    stream into one memory pool, largest first, and replayed in any order."""
    reference, patched = block
    pool = torch.cuda.graph_pool_handle()
    capture_stream = torch.cuda.Stream()
    graphs = {}
    for batch in BATCHES:
        static_x = torch.randn(batch, HIDDEN, device="cuda", dtype=BF16)
        patched(static_x)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, stream=capture_stream):
            static_y = patched(static_x)
        graphs[batch] = graph, static_x, static_y
    for batch in reversed(BATCHES):
        check_replays(*graphs[batch], patched, reference)


def test_make_graphed_callables(choice, block):
    reference, patched = block
    sample = torch.randn(16, HIDDEN, device="cuda", dtype=BF16)
    graphed = torch.cuda.make_graphed_callables(patched, (sample,))
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn_like(sample)
            y = graphed(x)
            torch.cuda.synchronize()
            assert torch.equal(y, patched(x))
            assert relative_error(y, reference(x)) < TOLERANCE


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_torch_compile(choice, block, mode):
    reference, patched = block
    torch._dynamo.reset()
    compiled = torch.compile(patched, mode=mode, fullgraph=True)
    with torch.inference_mode():
        for batch in (1, 64, 64, 64):  # the repeated size runs from the captured graph
            x = torch.randn(batch, HIDDEN, device="cuda", dtype=BF16)
            y = compiled(x).clone()
            assert relative_error(y, patched(x)) < TOLERANCE / 10
            assert relative_error(y, reference(x)) < TOLERANCE


def grouped_call():
    experts, n, k = 8, 264, 256
    offsets = torch.tensor([3, 0, 17, 1, 40, 0, 2, 1], device="cuda").cumsum(0).to(torch.int32)
    inputs = [torch.randn(int(offsets[-1]), k, device="cuda", dtype=BF16),
              torch.randn(experts, n, k, device="cuda", dtype=BF16) / k**0.5, offsets]
    return inputs, lambda x, w, offsets: torch.ops.wavetune.grouped_gemm(x, w, offsets)


def attention_call():
    q = torch.randn(2, 1, 8, 128, device="cuda", dtype=BF16)  # a decode step over 300 cached tokens, GQA
    kv = [torch.randn(2, 300, 2, 128, device="cuda", dtype=BF16) for _ in range(2)]
    return [q, *kv], lambda q, k, v: torch.ops.wavetune.attention(q, k, v, causal=True)


@pytest.mark.parametrize("family", ["grouped_gemm", "attention"])
@torch.inference_mode()
def test_families_capture_in_a_shared_pool_after_side_stream_warm_up(family):
    if not (wavetune.grouped_configs() if family == "grouped_gemm" else wavetune.attention_configs()):
        pytest.skip(f"no {family} variant in this build")
    inputs, call = grouped_call() if family == "grouped_gemm" else attention_call()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    pool = torch.cuda.graph_pool_handle()
    graph, other = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        static_y = call(*inputs)
    with torch.cuda.graph(other, pool=pool):  # a second graph in the same pool must not disturb the first
        call(*inputs)
    for _ in range(2):
        inputs[0].copy_(torch.randn_like(inputs[0]))
        static_y.fill_(float("nan"))
        graph.replay()
        other.replay()  # in capture order, as graphs sharing a pool are replayed
        torch.cuda.synchronize()
        assert not static_y.isnan().any()
        assert torch.equal(static_y, call(*inputs))

"""Programmatic dependent launch (kernels.h, set_programmatic_launch): a chain of dense GEMMs, each reading
the one before it, gives the same bits with and without it, eagerly, replayed from a CUDA graph and under
torch.compile, for a data-parallel and a split-K CUTLASS config and the decode GEMM split over a cluster.
GPU tier."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # before the modules below, which import it

from wavetune import _C  # noqa: E402
from wavetune import torch_ops  # noqa: E402,F401  (registers torch.ops.wavetune)
from wavetune.families.gemm import torch_ops as gemm_ops  # noqa: E402
from wavetune.runtime import tables  # noqa: E402
from wavetune.tuning.timing import capture_documented  # noqa: E402

from test_capture import use_one_config_table  # noqa: E402

WIDTH, LAYERS = 512, 6  # N = K, so each layer's output is the next one's input


@pytest.fixture
def pdl():
    """Restores the process's setting after a test that switches it."""
    before = _C.programmatic_launch()
    yield
    _C.set_programmatic_launch(before)


def chain(x, weights):
    for w in weights:
        x = torch.ops.wavetune.linear(x, w) * 0.03  # keeps magnitudes in range; the next GEMM reads it
    return x


def runs(x, weights) -> dict:
    """The chain's output eagerly, replayed from a CUDA graph (PyTorch's documented pattern) and compiled."""
    eager = chain(x, weights)
    graph, captured = capture_documented(chain, x, weights, warmup=2)
    captured.fill_(float("nan"))
    graph.replay()
    compiled = torch.compile(chain, fullgraph=True)(x, weights)
    torch.cuda.synchronize()
    return {"eager": eager.clone(), "graph": captured.clone(), "compiled": compiled.clone()}


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["data_parallel", "split_k", "decode"])
@pytest.mark.parametrize("tokens", [1, 16, 300])
def test_results_are_identical_with_and_without_it(kind, tokens, tmp_path, pdl):
    use_one_config_table(kind, tmp_path / "table.wtt")
    try:
        generator = torch.Generator(device="cuda").manual_seed(tokens)
        opts = dict(device="cuda", dtype=torch.bfloat16, generator=generator)
        x = torch.rand(tokens, WIDTH, **opts) * 2 - 1
        weights = [torch.rand(WIDTH, WIDTH, **opts) * 2 - 1 for _ in range(LAYERS)]
        results = {}
        for on in (False, True):
            _C.set_programmatic_launch(on)
            torch._dynamo.reset()
            results[on] = runs(x, weights)
        for mode in results[False]:
            assert torch.isfinite(results[True][mode]).all(), mode
            assert torch.equal(results[True][mode], results[False][mode]), mode
        assert torch.equal(results[True]["graph"], results[True]["eager"])
    finally:
        device = torch.cuda.current_device()
        _C.use_table(device, None)
        gemm_ops._plans.clear()
        tables.checked_devices().discard(device)  # the next call looks for the shipped table again


def test_it_is_on_unless_the_environment_turns_it_off():
    import os
    import subprocess
    import sys

    code = "from wavetune import _C; print(_C.programmatic_launch())"
    for env, expected in ((None, "True"), ("0", "False"), ("1", "True")):
        environ = {k: v for k, v in os.environ.items() if k != "WAVETUNE_PDL"}
        if env is not None:
            environ["WAVETUNE_PDL"] = env
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ)
        assert done.stdout.strip() == expected, done.stderr

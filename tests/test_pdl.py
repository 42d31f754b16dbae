"""Programmatic dependent launch (kernels.h, set_programmatic_launch): chains of kernels, each reading what the
one before it wrote, give the same bits with and without it, eagerly, replayed from a CUDA graph and under
torch.compile: dense GEMMs on a data-parallel and a stream-K split-K CUTLASS config and on the decode GEMM
split over a cluster; grouped GEMMs (the expert-argument kernel, then CUTLASS's ptr-array kernel); attention
on CUTLASS's FMHA (a chunk after a cached prefix, and decode with its queries repeated per split and the
splits combined). GPU tier."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # before the modules below, which import it

import wavetune  # noqa: E402
from wavetune import _C  # noqa: E402
from wavetune import torch_ops  # noqa: E402,F401  (registers torch.ops.wavetune)
from wavetune.families.gemm import torch_ops as gemm_ops  # noqa: E402
from wavetune.runtime import tables  # noqa: E402
from wavetune.tuning.timing import capture_documented  # noqa: E402

from test_capture import deterministic_algorithms, use_one_config_table  # noqa: E402

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


def expert_chain(x, weights, offsets):
    for w in weights:
        x = torch.ops.wavetune.grouped_gemm(x, w, offsets) * 0.03
    return x


def attention_chain(q, k, v):
    for _ in range(LAYERS):
        q = torch.ops.wavetune.attention(q, k, v, causal=True)  # the next call's queries
    return q


def runs(fn, *args) -> dict:
    """fn's output eagerly, replayed from a CUDA graph (PyTorch's documented pattern) and compiled."""
    eager = fn(*args)
    graph, captured = capture_documented(fn, *args, warmup=2)
    captured.fill_(float("nan"))
    graph.replay()
    compiled = torch.compile(fn, fullgraph=True)(*args)
    torch.cuda.synchronize()
    return {"eager": eager.clone(), "graph": captured.clone(), "compiled": compiled.clone()}


def check_identical(fn, *args) -> None:
    results = {}
    for on in (False, True):
        _C.set_programmatic_launch(on)
        torch._dynamo.reset()
        results[on] = runs(fn, *args)
    for mode in results[False]:
        assert torch.isfinite(results[True][mode]).all(), mode
        assert torch.equal(results[True][mode], results[False][mode]), mode
    assert torch.equal(results[True]["graph"], results[True]["eager"])


def uniform(*shape, generator):
    return torch.rand(*shape, device="cuda", dtype=torch.bfloat16, generator=generator) * 2 - 1


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["data_parallel", "split_k", "decode", "multistage"])
@pytest.mark.parametrize("tokens", [1, 16, 300])
def test_gemm_results_are_identical_with_and_without_it(kind, tokens, tmp_path, pdl):
    use_one_config_table(kind, tmp_path / "table.wtt")
    try:
        generator = torch.Generator(device="cuda").manual_seed(tokens)
        check_identical(chain, uniform(tokens, WIDTH, generator=generator),
                        [uniform(WIDTH, WIDTH, generator=generator) for _ in range(LAYERS)])
    finally:
        device = torch.cuda.current_device()
        _C.use_table(device, None)
        gemm_ops._plans.clear()
        tables.checked_devices().discard(device)  # the next call looks for the shipped table again


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [5, 300])
def test_grouped_gemm_results_are_identical_with_and_without_it(rows, pdl):
    if not wavetune.grouped_configs():
        pytest.skip("no grouped variant in this build")
    generator = torch.Generator(device="cuda").manual_seed(rows)
    experts = torch.randint(0, 8, (rows,), device="cuda", generator=generator).sort().values
    offsets = torch.bincount(experts, minlength=8).cumsum(0).to(torch.int32)
    check_identical(expert_chain, uniform(rows, WIDTH, generator=generator),
                    [uniform(8, WIDTH, WIDTH, generator=generator) for _ in range(LAYERS)], offsets)


@pytest.mark.gpu
@pytest.mark.parametrize("queries, kv_lengths", [(48, (300, 300)), (1, (4096, 4160))],
                         ids=["chunk after a prefix", "decode, K and V strided apart"])
def test_attention_results_are_identical_with_and_without_it(queries, kv_lengths, pdl):
    """The chunk runs CUTLASS's FMHA (cuDNN does not take its mask); so does decode over K and V of different
    strides (the paged kernel needs shared strides) once deterministic algorithms keep it off cuDNN, whose last
    bits vary from run to run; split where the choice splits."""
    if not any(c.tile[2] == 128 and not c.from_library for c in wavetune.attention_configs()):
        pytest.skip("no bf16 head_dim 128 attention variant in this build")
    generator = torch.Generator(device="cuda").manual_seed(queries)
    q = uniform(2, queries, 8, 128, generator=generator)
    k, v = (uniform(2, length, 2, 128, generator=generator)[:, :kv_lengths[0]] for length in kv_lengths)
    with deterministic_algorithms(True):
        check_identical(attention_chain, q, k, v)


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

"""The decode GEMM (csrc/families/gemm/decode_variants.cu): its variants in the listing and the tables'
candidates (CPU tier), and every variant against an fp32 reference with random data, odd M and N at
tile edges, poisoned outputs, unsplit and split, with and without programmatic dependent launch (GPU tier)."""

from __future__ import annotations

import re

import pytest

import wavetune
from wavetune import _C
from wavetune.families.gemm import tuning

from conftest import REPO


def decode_variants():
    return [c for c in wavetune.configs() if c.schedule == "decode"]


def test_decode_variants_are_built_in_candidates_with_every_split():
    variants = decode_variants()
    if not variants:
        pytest.skip("built without nvcc: no decode variant")
    assert {(v.dtype, v.b_layout) for v in variants} == {("bf16", "col"), ("fp16", "col")}
    for v in variants:
        assert v.built_in and v.fixed_tile_order and v.swap_ab
        assert v.scheduler == ("persistent" if v.name.endswith("_persistent") else "data_parallel")
    keys = {c.key for c in tuning.candidates("bf16", "col")}
    for v in variants:
        if v.dtype == "bf16":
            assert f"{v.name}/data_parallel/1" in keys
            split = {f"{v.name}/split_k/{s}" for s in tuning.DECODE_SPLITS}
            assert split <= keys if v.scheduler == "data_parallel" else not split & keys  # persistent: no splits


def test_the_mapping_counts_ctas_and_loop_steps_per_split():
    v = next((v for v in decode_variants() if v.name == "bf16_bcol_decode_64x8_4x1"), None)
    if v is None:
        pytest.skip("built without nvcc: no decode variant")
    tile_rows, tokens, tile_k = v.tile
    m, n, k = 5, 4096 + 8, 4096
    for splits in (1, 2, 8):
        grid, steps, _, _ = tuning.Candidate(v, "split_k", splits).coordinates(m, n, k, 132)
        assert grid == -(-n // tile_rows) * -(-m // tokens) * splits
        assert steps == -(-(-(-k // tile_k)) // splits)


torch = pytest.importorskip("torch")


def reference(x, w, bias):
    out = x.float() @ w.float().t()
    return out + bias.float() if bias is not None else out


@pytest.fixture
def pdl():
    before = _C.programmatic_launch()
    yield
    _C.set_programmatic_launch(before)


@pytest.mark.gpu
@pytest.mark.parametrize("pdl_on", [False, True])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_every_variant_matches_fp32_split_and_unsplit(dtype, pdl_on, pdl):
    _C.set_programmatic_launch(pdl_on)
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    generator = torch.Generator(device="cuda").manual_seed(7)
    variants = [v for v in decode_variants() if v.dtype == dtype]
    assert variants, "a CUDA build has the decode variants"
    # Odd M (one token, a partial token tile, more than one tile), N off every tile edge, K not a multiple
    # of the 32-wide chunk, a long K for 8 splits; more tiles than CTAs resident, so that persistent CTAs
    # walk several, within one loop step of K and over many.
    for m, n, k in [(1, 1000, 4096), (13, 72, 1032), (37, 2056, 520), (70, 136, 8200), (9, 65544, 64),
                    (17, 16392, 1032)]:
        x = torch.rand(m, k, device="cuda", dtype=torch_dtype, generator=generator) * 2 - 1
        w = torch.rand(n, k, device="cuda", dtype=torch_dtype, generator=generator) * 2 - 1
        bias = torch.rand(n, device="cuda", dtype=torch_dtype, generator=generator)
        for with_bias in (False, True):
            b = bias if with_bias else None
            ref = reference(x, w, b)
            for v in variants:
                k_steps = -(-k // v.tile[2])
                for splits in [s for s in (1, 2, 3, 8) if s <= k_steps and (s == 1 or v.scheduler != "persistent")]:
                    config = wavetune.LaunchConfig(v.name, "split_k" if splits > 1 else "data_parallel", splits)
                    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch_dtype)
                    wavetune.gemm(x, w.t(), out=out, bias=b, config=config)
                    torch.cuda.synchronize()
                    error = ((out.float() - ref).norm() / ref.norm()).item()
                    assert error < 5e-3, (v.name, splits, m, n, k, with_bias, error)
                    # Fixed summation order: a second launch gives the same bits.
                    again = torch.full_like(out, float("nan"))
                    wavetune.gemm(x, w.t(), out=again, bias=b, config=config)
                    assert torch.equal(out, again), (v.name, splits, m, n, k)


@pytest.mark.gpu
def test_heuristic_splits_and_refusals():
    v = next(v for v in decode_variants() if v.name == "bf16_bcol_decode_64x8_4x1")
    x = torch.randn(4, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(512, 4096, device="cuda", dtype=torch.bfloat16)
    out = wavetune.gemm(x, w.t(), config=wavetune.LaunchConfig(v.name, "heuristic"))
    torch.testing.assert_close(out.float(), reference(x, w, None), rtol=2e-2, atol=0.5)
    with pytest.raises(ValueError, match="at most 8 splits"):
        wavetune.gemm(x, w.t(), config=wavetune.LaunchConfig(v.name, "split_k", 16))
    with pytest.raises(ValueError, match="not stream-K"):
        wavetune.gemm(x, w.t(), config=wavetune.LaunchConfig(v.name, "stream_k"))
    persistent = next(v for v in decode_variants() if v.scheduler == "persistent")
    with pytest.raises(ValueError, match="persistent"):
        wavetune.gemm(x, w.t(), config=wavetune.LaunchConfig(persistent.name, "split_k", 2))


def test_the_decode_benchmark_makes_every_projection_at_every_degree():
    from wavetune.families.gemm import cases, comparison
    from wavetune.families.scaled_gemm import cases as scaled_cases

    llama = cases.DIMS["llama3-8b"]
    assert cases.layer_shapes(*llama, tp=4) == {"qkv": (1536, 4096), "o": (4096, 1024), "gate_up": (7168, 4096),
                                                "down": (4096, 3584), "lm_head": (32064, 4096)}
    todo = cases.decode_problems("heldout", per_shape=2, seed=3)
    assert todo == cases.decode_problems("heldout", per_shape=2, seed=3)  # seeded
    assert not {p["model"] for p in todo} & set(cases.DECODE_MODELS["design"])
    for _, lo, hi in cases.DECODE_M_RANGES:
        assert sum(lo <= p["m"] <= hi for p in todo) == len(todo) // 2
    for split in ("heldout", "design"):  # the scaled GEMM benchmark's splits draw on the same models
        assert set(scaled_cases.MODELS[split]) <= set(cases.DIMS)
    assert not set(scaled_cases.MODELS["heldout"]) & set(scaled_cases.MODELS["design"])
    rows = [{**p, "weight_mb": 2 * p["n"] * p["k"] / 1e6, "speedup": 1.1, "best_speedup": 1.2, "wavetune_tbps": 3.0,
             "cublas_tbps": 2.7, "best_tbps": 3.1} for p in todo]
    text = comparison.decode_summary(rows)
    assert "M 1-16:" in text and "1.100x cuBLAS" in text and "best decode candidate 1.200x" in text
    assert "weights >= 256 MB" in text and "3.00 TB/s median" in text


def test_the_read_rate_probe_calls_what_the_decode_header_defines():
    """benchmarks/cuda/decode_stream_probe.cu (kernels.md's read-rate table) builds on the decode kernel's header
    but is compiled by hand on a GPU machine (it links cuBLAS); every name it takes from the header exists there."""
    probe = (REPO / "benchmarks" / "cuda" / "decode_stream_probe.cu").read_text()
    header = (REPO / "csrc" / "families" / "gemm" / "sm90_decode_gemm.cuh").read_text()
    used = set(re.findall(r"\bdec::(\w+)", probe))
    assert {"load_streaming", "load_written", "Kernel", "Params", "launch"} <= used
    assert [name for name in sorted(used) if not re.search(rf"\b(struct|class|auto|void|uint4|float)\s+{name}\b|"
                                                          rf"\b{name}\s*\(", header)] == []

"""What a fresh install runs before its variants are compiled (docs/kernels.md, "Variants compiled when needed"):
each family's vendor candidate (PyTorch's own operator) while the family's variants compile in the background
or where none of the call's kind is compiled, and the state that says which.

The CPU tier checks the bookkeeping; the GPU tier checks that the vendor routes compute PyTorch's results bit for
bit, into NaN-poisoned outputs, eagerly and from a CUDA graph captured as PyTorch documents it.
"""

from __future__ import annotations

import pytest

from wavetune.codegen import config_space
from wavetune.families.grouped_gemm.fp8 import SCALES
from wavetune.runtime import jit, tables

from conftest import REPO, builtin_choice_compiles


@pytest.fixture
def compiling(monkeypatch):
    """The (family, scales mode)s whose variants the test says are compiling in the background (none at first)."""
    state: dict[tuple[str, str], int] = {}
    monkeypatch.setattr(tables, "_compiling", state)
    return state


def test_a_family_serves_its_vendor_until_its_last_batch_compiled(compiling, monkeypatch):
    dropped = []
    monkeypatch.setattr(tables, "_table_listeners", [lambda: dropped.append(1)])
    tables.compiling_started("grouped_gemm")
    tables.compiling_started("grouped_gemm")
    assert tables.vendor_serves("grouped_gemm") and not tables.vendor_serves("gemm")
    tables.compiling_done("grouped_gemm")
    assert tables.vendor_serves("grouped_gemm") and not dropped
    tables.compiling_done("grouped_gemm")
    assert not tables.vendor_serves("grouped_gemm")
    assert dropped == [1], "choices made while the vendor served must be dropped once the compile is done"
    tables.compiling_started("grouped_gemm", "row")  # a scales mode's calls serve their vendor, not the others'
    assert tables.vendor_serves("grouped_gemm", "row") and not tables.vendor_serves("grouped_gemm")


def test_the_builtin_kernel_set_compiles_no_variant():
    for path in sorted((REPO / "cutlass_configs").glob("*.toml")):
        assert config_space.load(path).select(config_space.BUILTIN_SET) == [], path.name


def test_a_family_without_a_table_queues_its_built_in_models_variants(monkeypatch):
    space = config_space.load(REPO / "cutlass_configs" / "sm90_scaled_gemm.toml")
    queued = builtin_choice_compiles(monkeypatch, "scaled_gemm")
    assert {v.name for v in queued} == {v.name for v in space.heuristic_set()}
    assert queued, "the FP8 family's built-in model takes its CUTLASS variants"


def test_a_background_batch_counts_for_its_tables_scales_mode_alone(compiling, monkeypatch):
    import queue

    jobs = queue.Queue()
    monkeypatch.setattr(jit, "_background", jobs)  # no worker thread: the batch stays queued
    monkeypatch.setattr(jit, "_queued", set())
    variant = next(v for v in jit.config_space("grouped_gemm").variants if v.name.startswith("e4m3_grouped"))
    jit.compile_in_background("grouped_gemm", [variant], jit.GpuArch(90, 90), "row")
    assert jobs.get_nowait() == ("grouped_gemm", "row", [variant], jit.GpuArch(90, 90))
    assert tables.vendor_serves("grouped_gemm", "row") and not tables.vendor_serves("grouped_gemm")
    jit.notify("ended", "grouped_gemm", "row")
    assert not tables.vendor_serves("grouped_gemm", "row")


def test_the_vendor_result_leaves_the_rows_past_the_experts_as_they_were():
    torch = pytest.importorskip("torch")
    from wavetune.families.grouped_gemm.api import vendor_result

    result = torch.randn(6, 3)
    out = torch.full((6, 3), float("nan"))
    assert vendor_result(torch, result, out, torch.tensor([2, 4], dtype=torch.int32)) is out
    assert torch.equal(out[:4], result[:4]) and out[4:].isnan().all()
    assert vendor_result(torch, result, None, torch.tensor([2, 4], dtype=torch.int32)) is result


def test_fp8_shapes_torchs_scaled_op_refuses_are_dequantized(monkeypatch):
    """torch._scaled_grouped_mm needs N and K divisible by 16; wavetune takes N % 8, so the vendor route must not
    hand it the others (N = 136 here)."""
    torch = pytest.importorskip("torch")
    from wavetune.families.grouped_gemm.fp8 import torch_scaled_grouped_mm

    def refuse(*args, **kwargs):
        raise AssertionError("torch._scaled_grouped_mm called with N % 16 != 0")

    monkeypatch.setattr(torch, "_scaled_grouped_mm", refuse, raising=False)
    x, w = torch.randn(16, 32).to(torch.float8_e4m3fn), torch.randn(2, 136, 32).to(torch.float8_e4m3fn)
    scale_x, scale_w = torch.rand(16, 1) + 0.5, torch.rand(2, 136) + 0.5
    offsets = torch.tensor([5, 16], dtype=torch.int32)
    out = torch_scaled_grouped_mm(torch, x, w, scale_x, scale_w, offsets, torch.bfloat16)
    expected = (x[:5].float() * scale_x[:5]) @ (w[0].float() * scale_w[0, :, None]).t()
    assert out.shape == (16, 136)
    assert torch.allclose(out[:5].float(), expected, rtol=0.02, atol=0.5)


# ---------------------------------------------------------------------------------------------------------
# GPU tier
# ---------------------------------------------------------------------------------------------------------

def gpu_torch():
    return pytest.importorskip("torch")


def grouped_operands(torch, spare_rows=3):
    """x, w and offsets of 5 experts (one empty) with ``spare_rows`` rows past the last expert's; K a multiple of
    16 (FP8 rows are 16-byte TMA rows) but not of the tiles."""
    counts = [37, 0, 5, 64, 1]
    rows = sum(counts) + spare_rows
    make = dict(device="cuda", dtype=torch.bfloat16)
    x = torch.randn(rows, 272, **make)
    w = torch.randn(len(counts), 136, 272, **make) / 16
    offsets = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
    return x, w, offsets, sum(counts)


@pytest.mark.gpu
def test_grouped_gemm_runs_torch_grouped_mm_while_compiling(compiling):
    torch = gpu_torch()
    import wavetune

    x, w, offsets, written = grouped_operands(torch)
    compiling[("grouped_gemm", "")] = 1
    out = torch.full((x.shape[0], w.shape[1]), float("nan"), device="cuda", dtype=x.dtype)
    wavetune.grouped_gemm(x, w, offsets, out=out)
    expected = torch._grouped_mm(x, w.transpose(-2, -1), offs=offsets)
    assert torch.equal(out[:written], expected[:written])
    assert out[written:].isnan().all(), "rows past offsets[-1] are left as they were"
    assert torch.equal(wavetune.grouped_gemm(x, w, offsets)[:written], expected[:written])


@pytest.mark.gpu
def test_the_vendor_route_captures_in_a_cuda_graph(compiling):
    torch = gpu_torch()
    import wavetune
    from wavetune.tuning.timing import capture_documented

    x, w, offsets, written = grouped_operands(torch)
    compiling[("grouped_gemm", "")] = 1
    graph, out = capture_documented(wavetune.grouped_gemm, x, w, offsets)
    x.copy_(torch.randn_like(x))
    graph.replay()
    assert torch.equal(out[:written], torch._grouped_mm(x, w.transpose(-2, -1), offs=offsets)[:written])


@pytest.mark.gpu
@pytest.mark.parametrize("scales", [name for name, layout in SCALES.items() if layout["e4m3"]])
def test_fp8_grouped_modes_run_pytorchs_way_while_compiling(compiling, scales):
    """Each scaled mode's vendor route (of its layout: torch._scaled_grouped_mm where its scales span K, else
    the dequantized operands), through scaled_grouped_gemm."""
    torch = gpu_torch()
    import wavetune
    from wavetune.families.grouped_gemm.api import ENTRIES
    from wavetune.families.grouped_gemm.measure import quantize

    x, w, offsets, _ = grouped_operands(torch, spare_rows=0)
    (xq, sx), (wq, sw) = quantize(x, scales, "x"), quantize(w, scales, "w")
    vendor = ENTRIES[scales].vendor
    compiling[("grouped_gemm", scales)] = 1
    for dtype in (torch.bfloat16, torch.float16):
        out = torch.full((x.shape[0], w.shape[1]), float("nan"), device="cuda", dtype=dtype)
        wavetune.scaled_grouped_gemm(xq, wq, sx, sw, offsets, out_dtype=dtype, out=out)
        assert torch.equal(out, vendor(torch, xq, wq, sx, sw, offsets, dtype)), dtype
        reference = torch.cat([x[a:b].float() @ w[e].float().t() for e, (a, b) in
                               enumerate(zip([0, *offsets.tolist()[:-1]], offsets.tolist()))])
        assert ((out.float() - reference).norm() / reference.norm()).item() < 0.1, dtype


@pytest.mark.gpu
def test_attention_without_a_compiled_kernel_runs_sdpa():
    torch = gpu_torch()
    import math

    import wavetune

    if any(c.dtype == "fp16" and c.tile[2] == 64 and not c.from_library for c in wavetune.attention_configs()):
        pytest.skip("this build compiled an fp16 head-dim-64 FMHA variant")
    # A chunk of 7 queries after 50 cached keys, causal (bottom-right), grouped-query heads: neither cuDNN (its
    # causal mask is top-left) nor the paged kernel (decode only) runs it.
    q = torch.randn(2, 7, 8, 64, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(2, 57, 2, 64, device="cuda", dtype=torch.float16) for _ in range(2))
    out = torch.full_like(q, float("nan"))
    wavetune.attention(q, k, v, causal=True, out=out)
    kf, vf = (t.float().repeat_interleave(4, dim=2) for t in (k, v))
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), kf) / math.sqrt(64)
    mask = torch.ones(7, 57, dtype=torch.bool, device="cuda").tril(57 - 7)
    reference = torch.einsum("bhqk,bkhd->bqhd", scores.masked_fill(~mask, float("-inf")).softmax(-1), vf)
    assert ((out.float() - reference).norm() / reference.norm()).item() < 1e-2
    with pytest.raises(ValueError, match="splits apply to the FMHA variants"):
        wavetune.attention(q, k, v, causal=True, splits=2)


@pytest.mark.gpu
def test_gemm_without_a_table_runs_cublas_whatever_is_compiled():
    torch = gpu_torch()  # noqa: F841 (loads libcublas, which the candidate opens)
    import wavetune
    from wavetune import _C

    names = {c.id: c.name for c in wavetune.configs()}
    assert "cublas_bf16_bcol" in names.values()
    for dtype, layout in (("bf16", "col"), ("fp16", "row")):
        for m in (1, 16, 300, 8192):
            assert names[_C.default_variant(dtype, layout, m, 4096, 4096)] == f"cublas_{dtype}_b{layout}"

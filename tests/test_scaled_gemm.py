"""The FP8 scaled GEMM family (csrc/families/scaled_gemm, wavetune.scaled_gemm, wavetune.quantize_fp8): input
checks and the family's registration (CPU tier); every variant against an fp32 reference of the dequantized
operands (random data, odd M and N at tile edges, K not a whole chunk, poisoned outputs, unsplit and split,
every mix of per-tensor and per-row scales, with and without programmatic dependent launch), the default
choice (decode kernels, then CUTLASS ones, then cuBLASLt; cuBLASLt for per-tensor scales), cuBLASLt with every kind
of scale and with a second pass for per-row scales, the quantizer, CUDA graphs and torch.compile (GPU tier)."""

from __future__ import annotations

import pytest

import wavetune
from wavetune import _C, families
from wavetune.families.scaled_gemm import replay
from wavetune.tuning.report import geomean

torch = pytest.importorskip("torch")

FP8 = torch.float8_e4m3fn


def test_the_family_is_registered_with_its_entry_points():
    family = families.get("scaled_gemm")
    assert family.entry_points == ("scaled_gemm", "quantize_fp8", "dequantize_fp8")
    assert wavetune.scaled_gemm is family.function("api", "scaled_gemm")
    # Generated CUTLASS variants and built-in decode ones, chosen by a wave model: no tables, no tuning driver.
    assert family.config_space == "sm90_scaled_gemm.toml" and not family.tuning
    names = [c.name for c in wavetune.scaled_gemm_configs()]
    if wavetune.build_info()["kernels_compiled"]:
        assert names and all(n.startswith(("e4m3_", "cublaslt_e4m3_")) for n in names)
        assert {c.dtype for c in wavetune.scaled_gemm_configs()} == {"bf16", "fp16"}
    else:
        assert names == []
    # Per-tensor scales and block scales past the kernels' tokens: cuBLASLt where it was opened (it needs a GPU),
    # else another GEMM (torch._scaled_mm, the block-scaled grouped kernel).
    library = [c.id for c in wavetune.scaled_gemm_configs() if c.schedule == "cublas" and c.dtype == "bf16"]
    assert _C.scaled_gemm_chosen_variant(1, 4096, 4096, 0, False, False) == (library[0] if library else -1)
    # Block scales past them: on a GPU the unswapped block-scaled CUTLASS variants where compiled.
    past = _C.scaled_gemm_chosen_variant(_C.scaled_gemm_max_tokens() + 4, 4096, 4096, 0, 2, 2)
    block_cutlass = {c.id for c in cutlass_configs(block_scales=True)} if torch.cuda.is_available() else set()
    assert past in block_cutlass or past == (library[0] if library else -1)


def test_tune_refuses_a_family_without_a_tuning_driver(capsys):
    from wavetune.__main__ import main

    assert main(["tune", "--family", "scaled_gemm", "--offline", "--log", "none.jsonl"]) == 2
    err = capsys.readouterr().err
    assert "the scaled_gemm family has no tuning driver" in err and "docs/scaled_gemm.md" in err


def test_a_fitted_table_chooses_worse_than_the_built_in_models_on_held_out_sweeps(raw_result):
    """Why the family ships no table (docs/scaled_gemm.md, "Tables"): the shared wave model fitted to the H200
    design sweep picks as well as the shipped choice on that sweep, and worse on the held-out sweeps."""
    design = raw_result("scaled_gemm_design_h200.jsonl.gz")
    fitted, shipped = replay.table_quality(design, design)
    assert len(fitted) == 60 and geomean(fitted) > 0.97
    for log in ("scaled_gemm_heldout_all_h200_second_pass.jsonl.gz", "scaled_gemm_heldout_m16_h200_seed13.jsonl"):
        fitted, shipped = replay.table_quality(design, raw_result(log))
        assert len(fitted) >= 30 and geomean(shipped) > 0.97
        assert geomean(fitted) < geomean(shipped) - 0.04, log


def operands(m=4, n=32, k=64, device="cpu"):
    a = torch.zeros(m, k, device=device).to(FP8)
    w = torch.zeros(n, k, device=device).to(FP8)
    return a, w.t(), torch.ones(m, 1, device=device), torch.ones(1, n, device=device)


@pytest.mark.parametrize("change, error, match", [
    (lambda a, b, sa, sb: (a.float(), b, sa, sb), TypeError, "float8_e4m3fn"),
    (lambda a, b, sa, sb: (a, b.t().contiguous().t()[:16], sa, sb), ValueError, r"a \[M, K\] and b \[K, N\]"),
    (lambda a, b, sa, sb: (a, b.contiguous(), sa, sb), ValueError, "column-major"),
    (lambda a, b, sa, sb: (a.t().contiguous().t(), b, sa, sb), ValueError, "row-major"),
    (lambda a, b, sa, sb: (a, b, sa.double(), sb), TypeError, "scale_a must be a float32"),
    (lambda a, b, sa, sb: (a, b, sa, sb.t()), ValueError, r"scale_b must hold one value .* \(1, 32\)"),
    (lambda a, b, sa, sb: (a, b, sa[:2], sb), ValueError, r"scale_a must hold one value .* \(4, 1\)"),
])
def test_bad_operands_name_the_problem(change, error, match):
    with pytest.raises(error, match=match):
        wavetune.scaled_gemm(*change(*operands()))


def test_block_scales_take_their_own_shapes():
    a, b, sa, sb = operands(m=4, n=300, k=272)
    with pytest.raises(ValueError, match=r"with block_scales, scale_a must be a contiguous \(4, 3\) tensor"):
        wavetune.scaled_gemm(a, b, sa, sb, block_scales=True)
    with pytest.raises(ValueError, match=r"with block_scales, scale_b must be a contiguous \(3, 3\) tensor"):
        wavetune.scaled_gemm(a, b, torch.ones(4, 3), sb, block_scales=True)
    with pytest.raises(ValueError, match="group_size must be None"):
        wavetune.quantize_fp8(torch.zeros(2, 16, dtype=torch.bfloat16), group_size=64)


def test_dequantize_fp8_takes_every_scale_layout():
    q = (torch.arange(300 * 260, dtype=torch.float32).reshape(300, 260) % 7 - 3).to(FP8)
    blocks = torch.rand(3, 3)
    expected = q.float() * blocks.repeat_interleave(128, 0)[:300].repeat_interleave(128, 1)[:, :260]
    torch.testing.assert_close(wavetune.dequantize_fp8(q, blocks, dtype=torch.float32), expected)
    groups = torch.rand(300, 3)
    torch.testing.assert_close(wavetune.dequantize_fp8(q, groups, dtype=torch.float32),
                               q.float() * groups.repeat_interleave(128, 1)[:, :260])
    rows = torch.rand(300, 1)
    torch.testing.assert_close(wavetune.dequantize_fp8(q, rows, dtype=torch.float32), q.float() * rows)
    assert wavetune.dequantize_fp8(q, torch.tensor(2.0)).dtype == torch.bfloat16
    with pytest.raises(ValueError, match=r"scale must hold one value, or be \(300, 1\).*got \(299, 1\)"):
        wavetune.dequantize_fp8(q, torch.rand(299, 1))
    with pytest.raises(ValueError, match=r"\(3, 3\) \(per 128x128 block\).*got \(3, 2\)"):
        wavetune.dequantize_fp8(q, torch.rand(3, 2))
    with pytest.raises(TypeError, match="scale must be a float32 tensor"):
        wavetune.dequantize_fp8(q, torch.rand(300, 1, dtype=torch.float64))
    with pytest.raises(TypeError, match="2-D torch.float8_e4m3fn"):
        wavetune.dequantize_fp8(q.float(), torch.rand(300, 1))


def test_bad_options_name_the_problem():
    a, b, sa, sb = operands()
    with pytest.raises(TypeError, match="out_dtype"):
        wavetune.scaled_gemm(a, b, sa, sb, out_dtype=torch.float32)
    with pytest.raises(ValueError, match=r"bias must be a contiguous torch.bfloat16 tensor of shape \(32,\)"):
        wavetune.scaled_gemm(a, b, sa, sb, bias=torch.zeros(32))
    with pytest.raises(ValueError, match=r"out must be a row-major torch.float16 tensor of shape \(4, 32\)"):
        wavetune.scaled_gemm(a, b, sa, sb, out_dtype=torch.float16, out=torch.empty(4, 32, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="one CUDA device"):
        wavetune.scaled_gemm(a, b, sa, sb)  # CPU tensors
    with pytest.raises(TypeError, match="bf16 or fp16"):
        wavetune.quantize_fp8(torch.zeros(2, 16))
    with pytest.raises(ValueError, match="static activation scale"):
        wavetune.quantize_fp8(torch.zeros(2, 16, dtype=torch.bfloat16), torch.ones(2))


def test_the_operators_trace_with_fake_tensors():
    import wavetune.torch_ops  # noqa: F401 (registers the operators)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(3, 64, dtype=torch.bfloat16)
        q, s = torch.ops.wavetune.quantize_fp8(x)
        assert q.dtype == FP8 and q.shape == x.shape and s.shape == (3, 1) and s.dtype == torch.float32
        w = torch.empty(48, 64).to(FP8)
        out = torch.ops.wavetune.scaled_gemm(q, w.t(), s, torch.empty(1, 48), None, torch.float16)
        assert out.shape == (3, 48) and out.dtype == torch.float16
        qb, sg = torch.ops.wavetune.quantize_fp8(torch.empty(3, 272, dtype=torch.bfloat16), None, 128)
        assert sg.shape == (3, 3)
        wb = torch.empty(200, 272).to(FP8)
        out = torch.ops.wavetune.scaled_gemm(qb, wb.t(), sg, torch.empty(2, 3), None, None, True)
        assert out.shape == (3, 200) and out.dtype == torch.bfloat16
        with pytest.raises(ValueError, match="column-major"):
            torch.ops.wavetune.scaled_gemm(q, w.t().contiguous(), s, torch.empty(1, 48))


# --- GPU tier -----------------------------------------------------------------------------------------------

def random_fp8(rows, cols, generator):
    """Values spread over e4m3's range (not only small ones), never all zero."""
    x = torch.randn(rows, cols, device="cuda", generator=generator) * 64
    return x.clamp(-448, 448).to(FP8)


def scales(kind, count, shape, generator):
    if kind == "tensor":
        return torch.rand(1, device="cuda", generator=generator) * 0.01 + 0.001
    return (torch.rand(count, device="cuda", generator=generator) * 0.01 + 0.001).reshape(shape)


def reference(a, b, sa, sb, bias):
    out = (a.float() * sa.reshape(-1, 1)) @ (b.float() * sb.reshape(1, -1))
    return out + bias.float() if bias is not None else out


def magnitude(a, b, sa, sb):
    return (a.float().abs() * sa.reshape(-1, 1)) @ (b.float().abs() * sb.reshape(1, -1))


def check_close(out, ref, magnitude=None):
    """One rounding of the fp32 result to bf16/fp16 (relative 2^-8 at worst), plus summation order; with the
    magnitude (the product of the operands' absolute values), also the tensor cores' e4m3 accumulation between
    CUTLASS's fp32 promotions, relative to the sum of the products' sizes."""
    tolerance = 8e-3 * ref.abs() + 1e-4 * ref.abs().max()
    if magnitude is not None:
        tolerance = tolerance + 2e-4 * magnitude
    bad = (out.float() - ref).abs() > tolerance
    assert not bad.any(), f"{int(bad.sum())} of {bad.numel()} elements off; first at {bad.nonzero()[0].tolist()}"


def cutlass_configs(block_scales):
    """The compiled CUTLASS variants of one kind of scales (128-block, or per tensor and per row)."""
    return [c for c in wavetune.scaled_gemm_configs()
            if c.schedule not in ("decode", "cublas") and ("_block128_" in c.name) == block_scales]


def variants_by_kind():
    return {"split": [c for c in wavetune.scaled_gemm_configs() if c.scheduler == "data_parallel"],
            "persistent": [c for c in wavetune.scaled_gemm_configs() if c.scheduler == "persistent"]}


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(1, 200, 1040), (7, 264, 2048), (33, 136, 528), (64, 1024, 4096)])
def test_every_variant_matches_fp32_with_poisoned_outputs(m, n, k):
    g = torch.Generator(device="cuda").manual_seed(m * 7 + n)
    a, w = random_fp8(m, k, g), random_fp8(n, k, g)
    for ka, kb in (("row", "row"), ("tensor", "tensor"), ("tensor", "row"), ("row", "tensor")):
        sa, sb = scales(ka, m, (m, 1), g), scales(kb, n, (1, n), g)
        for out_dtype in (torch.bfloat16, torch.float16):
            bias = torch.randn(n, device="cuda", generator=g).to(out_dtype) if kb == "row" else None
            ref, size = reference(a, w.t(), sa, sb, bias), magnitude(a, w.t(), sa, sb)
            wide = torch.full((m, n + 24), float("nan"), dtype=out_dtype, device="cuda")
            for c in wavetune.scaled_gemm_configs():  # cuBLASLt's own test is below
                if (c.dtype != {torch.bfloat16: "bf16", torch.float16: "fp16"}[out_dtype] or "_block128_" in c.name
                        or c.schedule == "cublas"):
                    continue
                for splits in ((0, 1, 2, 3, 8) if c.scheduler == "data_parallel" else (0,)):
                    wide.fill_(float("nan"))
                    out = wavetune.scaled_gemm(a, w.t(), sa, sb, out_dtype=out_dtype, bias=bias, out=wide[:, :n],
                                               config=c.name, splits=splits)
                    check_close(out, ref, size)
                    assert wide[:, n:].isnan().all(), f"{c.name} wrote past N"


def expand_blocks(scale, rows, cols):
    """[ceil(rows/128), ceil(cols/128)] or [rows, ceil(cols/128)] block scales as one scale per element."""
    if scale.shape[0] != rows:
        scale = scale.repeat_interleave(128, 0)
    return scale[:rows].repeat_interleave(128, 1)[:, :cols]


def block_scales(m, n, k, generator):
    """Random 128-block scales of a [m, k] x [n, k] problem: the tokens' [m, ceil(k/128)], the weight's
    [ceil(n/128), ceil(k/128)]."""
    return tuple(torch.rand(rows, -(-k // 128), device="cuda", generator=generator) * 0.01 + 1e-3
                 for rows in (m, -(-n // 128)))


def block_reference(a, w, sa, sb):
    """The fp32 product of the dequantized operands, and the products' sizes (as magnitude())."""
    xs, ws = expand_blocks(sa, a.shape[0], a.shape[1]), expand_blocks(sb, w.shape[0], w.shape[1])
    return (a.float() * xs) @ (w.float() * ws).t(), (a.float().abs() * xs) @ (w.float().abs() * ws).t()


def cublaslt_configs(second_pass=False):
    """The cuBLASLt variants, those that scale their product in a second pass or the others."""
    configs = [c for c in wavetune.scaled_gemm_configs()
               if c.schedule == "cublas" and c.name.endswith("_rescaled") == second_pass]
    if not configs:
        pytest.skip("cuBLASLt could not be opened (no libcublasLt of this build's CUDA major version)")
    return configs


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(4, 2048, 2048), (36, 4096, 2048), (48, 5120, 640), (132, 2048, 4096)])
def test_cublaslt_matches_fp32_with_every_kind_of_scale(m, n, k):
    """Per tensor with a bias, per row, and 128-blocks (the activations' scales transposed into the workspace
    first), both output dtypes, poisoned outputs wider than N; a mix of kinds, a one-token block problem and block
    scales of K / 128 not a multiple of 4 are refused by name."""
    g = torch.Generator(device="cuda").manual_seed(m + k)
    a, w = random_fp8(m, k, g), random_fp8(n, k, g)
    for c in cublaslt_configs():
        out_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[c.dtype]
        wide = torch.empty((m, n + 16), dtype=out_dtype, device="cuda")
        for kind in ("tensor", "row", "block"):
            if kind == "block":
                (sa, sb), bias = block_scales(m, n, k, g), None
                ref, size = block_reference(a, w, sa, sb)
                with pytest.raises(ValueError, match="2 tokens or more"):
                    wavetune.scaled_gemm(a[:1], w.t(), sa[:1], sb, block_scales=True, out_dtype=out_dtype,
                                         config=c.name)
            else:
                sa, sb = scales(kind, m, (m, 1), g), scales(kind, n, (1, n), g)
                bias = torch.randn(n, device="cuda", generator=g).to(out_dtype) if kind == "tensor" else None
                ref, size = reference(a, w.t(), sa, sb, bias), magnitude(a, w.t(), sa, sb)
            wide.fill_(float("nan"))
            if kind == "block" and (k // 128) % 4:
                with pytest.raises(ValueError, match="not a multiple of 4"):
                    wavetune.scaled_gemm(a, w.t(), sa, sb, out_dtype=out_dtype, block_scales=True, config=c.name)
                continue
            out = wavetune.scaled_gemm(a, w.t(), sa, sb, out_dtype=out_dtype, bias=bias, out=wide[:, :n],
                                       block_scales=kind == "block", config=c.name)
            check_close(out, ref, size)
            assert wide[:, n:].isnan().all(), f"{c.name} wrote past N"
        with pytest.raises(ValueError, match="the same kind of scales on both sides"):
            wavetune.scaled_gemm(a, w.t(), scales("tensor", m, (m, 1), g), scales("row", n, (1, n), g),
                                 out_dtype=out_dtype, config=c.name)


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, pad", [(1, 200, 1040, 16), (67, 264, 2048, 16), (130, 4104, 4096, 8),
                                          (97, 208, 1024, 4), (70, 200, 1024, 3)])
def test_the_second_pass_variant_matches_fp32_with_every_mix_of_scales(m, n, k, pad):
    """cuBLASLt's per-tensor kernel with unit scales, then the token and channel scales and the bias in one pass
    over the bf16 product: every mix of per-tensor and per-row scales, with and without a bias, into poisoned
    outputs wider than N (rows 16-byte aligned or not; cuBLASLt itself refuses N not a multiple of 16 and may
    refuse unaligned rows); two roundings to bf16, within the tolerance of one plus half an ulp. Block scales
    and fp16 are refused by name."""
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    a, w = random_fp8(m, k, g), random_fp8(n, k, g)
    (c,) = cublaslt_configs(second_pass=True)
    wide = torch.empty((m, n + pad), dtype=torch.bfloat16, device="cuda")
    for ka, kb in (("row", "row"), ("tensor", "row"), ("row", "tensor"), ("tensor", "tensor")):
        sa, sb = scales(ka, m, (m, 1), g), scales(kb, n, (1, n), g)
        for bias in (None, torch.randn(n, device="cuda", generator=g).to(torch.bfloat16)):
            wide.fill_(float("nan"))
            try:
                out = wavetune.scaled_gemm(a, w.t(), sa, sb, bias=bias, out=wide[:, :n], config=c.name)
            except ValueError as error:  # cuBLASLt's own alignment rules for the output's rows
                assert "no FP8 kernel" in str(error) and (n % 16 or (n + pad) % 8), error
                continue
            check_close(out, reference(a, w.t(), sa, sb, bias), magnitude(a, w.t(), sa, sb))
            assert wide[:, n:].isnan().all(), f"{c.name} wrote past N"
    with pytest.raises(ValueError, match="writes bf16"):
        wavetune.scaled_gemm(a, w.t(), sa, sb, out_dtype=torch.float16, config=c.name)
    blocks = torch.ones(m, -(-k // 128), device="cuda"), torch.ones(-(-n // 128), -(-k // 128), device="cuda")
    with pytest.raises(ValueError, match="per-tensor or per-row scales"):
        wavetune.scaled_gemm(a, w.t(), *blocks, block_scales=True, config=c.name)


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(1, 200, 1040), (5, 392, 2048), (13, 136, 4096), (70, 264, 1024),
                                     (300, 520, 1536)])
def test_every_block_scaled_variant_matches_fp32(m, n, k):
    g = torch.Generator(device="cuda").manual_seed(m + n)
    a, w = random_fp8(m, k, g), random_fp8(n, k, g)
    sa, sb = block_scales(m, n, k, g)
    bias = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16)
    ref, size = block_reference(a, w, sa, sb)
    ref = ref + bias.float()
    block = [c for c in wavetune.scaled_gemm_configs() if "_block128_" in c.name]
    assert block, "no block-scaled variant compiled"
    wide = torch.empty((m, n + 8), dtype=torch.bfloat16, device="cuda")
    for out_dtype in (torch.bfloat16, torch.float16):
        for c in block:
            if c.dtype != {torch.bfloat16: "bf16", torch.float16: "fp16"}[out_dtype]:
                continue
            for splits in ((0, 1, 3, 8) if c.scheduler == "data_parallel" else (0,)):
                wide = wide.to(out_dtype).fill_(float("nan"))
                out = wavetune.scaled_gemm(a, w.t(), sa, sb, out_dtype=out_dtype, bias=bias.to(out_dtype),
                                           out=wide[:, :n], block_scales=True, config=c.name, splits=splits)
                check_close(out, ref, None if c.schedule == "decode" else size)
                assert wide[:, n:].isnan().all(), f"{c.name} wrote past N"
        with pytest.raises(ValueError, match="takes per-tensor or per-row scales"):
            wavetune.scaled_gemm(a, w.t(), sa, sb, block_scales=True, config="e4m3_bf16_decode_64x8_4x1")
    default = wavetune.scaled_gemm(a, w.t(), sa, sb, bias=bias, block_scales=True)
    if m <= (_C.scaled_gemm_max_tokens() if cutlass_configs(block_scales=True) else _C.scaled_gemm_max_tokens(True)):
        check_close(default, ref, size)
    else:  # the block-scaled grouped kernel, or in a build without it operands dequantized to bf16 first (two
        # more roundings of 2^-9 per product)
        assert ((default.float() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.gpu
def test_quantize_fp8_per_group_of_128():
    g = torch.Generator(device="cuda").manual_seed(23)
    for k in (1008, 4096, 136):
        x = torch.randn(3, k, device="cuda", generator=g, dtype=torch.bfloat16) * 5
        x[1, 128:256] = 0  # a zero group
        q, s = wavetune.quantize_fp8(x, group_size=128)
        assert s.shape == (3, -(-k // 128))
        padded = torch.nn.functional.pad(x.float().abs(), (0, -k % 128)).reshape(3, -1, 128).amax(-1)
        torch.testing.assert_close(s, torch.where(padded > 0, padded / 448, torch.ones_like(padded)))
        err = (q.float() * expand_blocks(s, 3, k) - x.float()).abs()
        assert (err <= x.float().abs() * 2**-4 + expand_blocks(s, 3, k) * 2**-9).all()


@pytest.mark.gpu
def test_fp8_linear_per_channel_and_block_against_the_bf16_layer():
    from wavetune.nn import FP8Linear

    g = torch.Generator(device="cuda").manual_seed(29)
    linear = torch.nn.Linear(1024, 520, bias=True, device="cuda", dtype=torch.bfloat16)
    with torch.inference_mode():
        for tokens in (3, 300):  # a decode kernel, and past them (block scales: the block-scaled grouped kernel)
            x = torch.randn(2, tokens, 1024, device="cuda", generator=g, dtype=torch.bfloat16)
            want = linear(x).float()
            for block in (False, True):
                got = FP8Linear.from_linear(linear, block_scales=block)(x).float()
                assert got.shape == want.shape
                assert ((got - want).norm() / want.norm()).item() < 0.05, block  # e4m3's 3 mantissa bits, twice


@pytest.mark.gpu
@pytest.mark.parametrize("n, m, kind", [(896, 5, "decode"), (1280, 8, "decode"), (1792, 5, "library"),
                                        (896, 12, "library"), (4096, 5, "library"), (896, 17, "library")])
def test_per_tensor_scales_take_the_decode_kernels_on_narrow_layers(n, m, kind):
    """Both scales per tensor: the decode kernels where the CUTLASS tiles would leave five sixths of the SMs
    idle (a few tokens on a narrow layer), cuBLASLt's per-tensor kernels elsewhere; into a poisoned output,
    against the fp32 reference."""
    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the layer widths are worked out for 132 SMs (H100 SXM, H200)")
    if not cutlass_configs(block_scales=False):
        pytest.skip("no CUTLASS scaled GEMM variant compiled (the narrow-layer rule measures its tiles)")
    g = torch.Generator(device="cuda").manual_seed(n * m)
    k = 4096
    w, a = random_fp8(n, k, g), random_fp8(m, k, g)
    sa, sb = scales("tensor", 1, (1, 1), g).reshape(()), scales("tensor", 1, (1, 1), g).reshape(())
    chosen = _C.scaled_gemm_chosen_variant(m, n, k, 0, 0, 0)
    schedules = {c.id: c.schedule for c in wavetune.scaled_gemm_configs()}
    if kind == "library":
        library = [c.id for c in wavetune.scaled_gemm_configs() if c.schedule == "cublas" and c.dtype == "bf16"]
        assert chosen == (library[0] if library else -1)
    else:
        assert schedules[chosen] == "decode"
    given = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    assert wavetune.scaled_gemm(a, w.t(), sa, sb, out=given) is given
    check_close(given, reference(a, w.t(), sa, sb, None), magnitude(a, w.t(), sa, sb))


@pytest.mark.gpu
@pytest.mark.parametrize("n, m, kind", [(896, 5, "decode"), (4096, 1, "cutlass"), (4096, 9, "cutlass"),
                                        (896, 12, "decode"), (1536, 12, "cutlass"), (896, 40, "cutlass"),
                                        (4096, 64, "cutlass"), (4096, 65, "second pass"), (4096, 512, "second pass"),
                                        (4096, 513, "library"), (4096, 2053, "library")])
def test_the_default_choice_by_tokens_and_width(n, m, kind):
    """Decode kernels for a few tokens on narrow layers (two 8-token tiles of a 896-row layer, not of a 1536-row
    one), CUTLASS kernels up to scaled_gemm_max_tokens(), then cuBLASLt: its per-tensor kernel and a second pass
    for the scales up to K / 8 tokens, its per-row kernels beyond, or where it cannot be opened torch._scaled_mm
    (into a given output too)."""
    if kind == "cutlass" and not cutlass_configs(block_scales=False):
        pytest.skip("no CUTLASS scaled GEMM variant compiled (the choice falls back to the decode ones)")
    g = torch.Generator(device="cuda").manual_seed(n + m)
    k = 4096
    w, sb = random_fp8(n, k, g), scales("row", n, (1, n), g)
    a, sa = random_fp8(m, k, g), scales("row", m, (m, 1), g)
    given = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    assert wavetune.scaled_gemm(a, w.t(), sa, sb, out=given) is given
    chosen = _C.scaled_gemm_chosen_variant(m, n, k, 0, True, True)
    if kind in ("library", "second pass"):
        library = [c.id for c in wavetune.scaled_gemm_configs() if c.schedule == "cublas" and c.dtype == "bf16"
                   and c.name.endswith("_rescaled") == (kind == "second pass")]
        assert chosen == (library[0] if library else -1) and m > _C.scaled_gemm_max_tokens()
        check_close(given, reference(a, w.t(), sa, sb, None), magnitude(a, w.t(), sa, sb))
        if kind == "library":
            torch.testing.assert_close(given, torch._scaled_mm(a, w.t(), sa, sb, out_dtype=torch.bfloat16),
                                       rtol=8e-3, atol=1e-3)
        return
    check_close(given, reference(a, w.t(), sa, sb, None), magnitude(a, w.t(), sa, sb))
    schedule = {c.id: c.schedule for c in wavetune.scaled_gemm_configs()}[chosen]
    assert (schedule == "decode") == (kind == "decode"), schedule


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, kind", [(6, 14336, 4096, "cutlass"), (5, 768, 5120, "decode"),
                                           (12, 640, 5120, "decode"), (3, 1792, 5120, "cutlass"),
                                           (12, 896, 4096, "cutlass"), (40, 896, 4096, "cutlass"),
                                           (64, 5120, 640, "cutlass")])
def test_block_scales_take_the_cutlass_variants_where_they_fill_the_gpu(m, n, k, kind):
    """128-block scales choose as per-row ones do: the block-scaled CUTLASS variants up to 64 tokens, but the
    decode kernels where the CUTLASS tiles would leave four fifths of the SMs idle (few tokens, narrow layers;
    per-row scales: two thirds)."""
    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the layer widths are worked out for 132 SMs (H100 SXM, H200)")
    if not cutlass_configs(block_scales=True):
        pytest.skip("no block-scaled CUTLASS variant compiled (the choice takes the decode kernels up to "
                    "scaled_gemm_max_tokens(True) tokens)")
    g = torch.Generator(device="cuda").manual_seed(m + n)
    a, w = random_fp8(m, k, g), random_fp8(n, k, g)
    sa, sb = block_scales(m, n, k, g)
    code = _C.scale_kinds().index("block128")
    chosen = {c.id: c for c in wavetune.scaled_gemm_configs()}[_C.scaled_gemm_chosen_variant(m, n, k, 0, code, code)]
    assert "_block128_" in chosen.name and (chosen.schedule == "decode") == (kind == "decode"), chosen.name
    given = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    assert wavetune.scaled_gemm(a, w.t(), sa, sb, block_scales=True, out=given) is given
    check_close(given, *block_reference(a, w, sa, sb))


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["tensor", "row"])
def test_a_bias_past_the_kernels_token_limit_matches_fp32(kind):
    """cuBLASLt with its bias epilogue (per tensor) or its second pass (per row, 80 tokens of K = 1,024), else
    torch._scaled_mm: the choice asks for a kernel with the bias."""
    g = torch.Generator(device="cuda").manual_seed(43)
    m, n, k = 80, 512, 1024
    a, w = random_fp8(m, k, g), random_fp8(n, k, g)
    sa, sb = scales(kind, m, (m, 1), g), scales(kind, n, (1, n), g)
    bias = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    wavetune.scaled_gemm(a, w.t(), sa, sb, bias=bias, out=out)
    check_close(out, reference(a, w.t(), sa, sb, bias), magnitude(a, w.t(), sa, sb))


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, kind, expected", [(8, 1024, 6144, "row", "e4m3_bf16_decode_16x8_1x4"),
                                                     (3, 1024, 6144, "block128", "e4m3_bf16_block128_decode_16x8_1x4")])
def test_the_decode_choice_counts_loop_steps_per_wave(m, n, k, kind, expected):
    """On 132 SMs, on layers too narrow for the CUTLASS tiles: the 16-row tiles, their K split over the CTA's warps,
    walk the fewest loop steps in one wave."""
    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the waves are worked out for 132 SMs (H100 SXM, H200)")
    code = _C.scale_kinds().index(kind)
    chosen = _C.scaled_gemm_chosen_variant(m, n, k, 0, code, code)
    assert {c.id: c.name for c in wavetune.scaled_gemm_configs()}[chosen] == expected


def test_the_decode_choice_replays_close_to_the_best_on_logged_sweeps(raw_result):
    """benchmarks/scaled_gemm.py --replay on indexed sweeps of every decode variant and split: the loop-step
    model's picks stay within a few percent of the best, on the design split and on a held-out block-scaled
    sample it was not fitted on."""
    design = replay.replay_quality(raw_result("scaled_gemm_design_all_h200.jsonl.gz"))
    held_out = replay.replay_quality(raw_result("scaled_gemm_heldout_block_deepgemm_h200_m16_seed13.jsonl"))
    assert len(design[1, 8]) >= 10 and len(held_out[9, 16]) >= 10
    assert geomean(design[1, 8]) > 0.97 and geomean(held_out[1, 8]) > 0.95
    assert geomean(held_out[9, 16]) > 0.93 and min(held_out[9, 16]) > 0.8


def test_block_scales_leave_the_decode_kernels_from_a_fifth_of_the_sms_on_logged_sweeps(raw_result):
    """The choice's cutlass_fills_the_gpu (scaled_model.h, bound) replayed on indexed sweeps at each share: with
    128-block scales a fifth of the SMs (5) picks within 1% of the best on the design run it was set on and on
    held-out runs, ahead of the third (3) that per-row scales keep, which stays ahead on a per-row design run."""
    design = raw_result("scaled_gemm_design_block_cutlass_deepgemm_h100_m64_seed27.jsonl")
    held_out = [raw_result("scaled_gemm_heldout_block_cutlass_deepgemm_h100_m64_seed25.jsonl"),
                raw_result("scaled_gemm_heldout_block_cutlass_deepgemm_h200_m64_seed23.jsonl")]
    for log in (design, *held_out):
        fifth, third = replay.cutlass_share_quality(log, 5), replay.cutlass_share_quality(log, 3)
        assert len(fifth) >= 20 and geomean(fifth) > 0.99 and geomean(fifth) >= geomean(third)
    per_row = raw_result("scaled_gemm_design_all_h200.jsonl.gz")
    assert geomean(replay.cutlass_share_quality(per_row, 3)) > geomean(replay.cutlass_share_quality(per_row, 5))


def test_block_scales_past_64_tokens_pick_close_to_the_best_unswapped_tile_on_logged_sweeps(raw_result):
    """The choice's CUTLASS wave model past 64 tokens with block scales (the ping-pong tiles' lower tensor
    efficiency, clusters along the longer output side; scaled_model.h, bound), replayed on indexed H100 sweeps of
    every unswapped variant: the design sample it was set on and two held-out ones."""
    design = replay.prefill_quality(raw_result("scaled_gemm_design_block_prefill_h100_seed31.jsonl"))
    assert len(design) == 16 and min(design) > 0.99
    for seed in (31, 37):
        held_out = replay.prefill_quality(raw_result(f"scaled_gemm_heldout_block_prefill_h100_seed{seed}.jsonl"))
        assert len(held_out) >= 10 and geomean(held_out) > 0.97 and min(held_out) > 0.85


@pytest.mark.gpu
def test_the_decode_choice_is_the_bound_models_least_steps():
    """On random layers at 1-16 tokens, where the choice runs a decode variant (per-row or 128-block scales), the
    bound model (what the replay calls) predicts it the fewest steps, at the split count it gives each variant,
    among the decode variants of its token tile: the choice reads its device's resident CTAs and token tiles as
    device_decode_facts records them."""
    import random

    facts = {name: f for name, f in replay.device_decode_facts().items() if "_bf16_" in name}
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    names = {c.id: c.name for c in wavetune.scaled_gemm_configs()}
    rng = random.Random(11)
    checked = 0
    for _ in range(60):
        m, n, k = rng.randint(1, 16), rng.choice([768, 1024, 1792, 4096, 7168]), rng.choice([2048, 4096, 5120])
        for kind in ("row", "block128"):
            code = _C.scale_kinds().index(kind)
            chosen = names.get(_C.scaled_gemm_chosen_variant(m, n, k, 0, code, code), "")
            if "_decode_" not in chosen:
                continue
            steps = {}
            for name, f in facts.items():
                if f["tokens"] == 8 and ("_block128_" in name) == ("_block128_" in chosen):
                    tile = replay.decode_tile(f)
                    splits = _C.scaled_gemm_decode_splits(tile, m, n, k, sm_count)
                    steps[name] = _C.scaled_gemm_predicted_steps(tile, m, n, k, splits, sm_count)
            assert steps[chosen] == pytest.approx(min(steps.values())), (m, n, k, kind)
            checked += 1
    assert checked >= 20


MODEL_VALUES = "scaled_gemm_model_values.json"


def test_the_bound_models_give_the_reference_values_exactly():
    """The built-in models the choice runs (scaled_model.h with the [model] table's constants), through their
    bindings, against reference values of the same functions on a seeded grid of decode and CUTLASS variants,
    problems and GPU sizes (tests/data/scaled_gemm_model_values.json says where they come from): the FP8 GEMM's
    choices stay what they were."""
    import json

    from conftest import REPO

    reference = json.loads((REPO / "tests" / "data" / MODEL_VALUES).read_text())
    row, block, model = _C.scale_kinds().index("row"), _C.scale_kinds().index("block128"), _C.scaled_gemm_model()
    calls = {
        "steps": lambda rows, tokens, tile_k, persistent, resident, m, n, k, splits, sms:
            _C.scaled_gemm_predicted_steps((rows, tokens, tile_k, bool(persistent), resident), m, n, k, splits, sms),
        "splits": lambda rows, tokens, tile_k, resident, m, n, k, sms:
            _C.scaled_gemm_decode_splits((rows, tokens, tile_k, False, resident), m, n, k, sms),
        "cost": lambda tm, tn, tk, swap, pingpong, blocks, m, n, k, sms, bandwidth: _C.scaled_gemm_cutlass_cost_us(
            (tm, tn, tk), bool(swap), "pingpong" if pingpong else "cooperative", m, n, k, block if blocks else row,
            sms, bandwidth),
        "rank": lambda cm, cn, swap, m, n: _C.scaled_gemm_cluster_rank((cm, cn), bool(swap), m, n),
        # The share of the kind of scales the choice gives it: 3 per row, 5 per block, 6 (per tensor) by override.
        "occupies": lambda tile_rows, tokens, m, n, share, sms: int(_C.scaled_gemm_cutlass_fills_the_gpu(
            tile_rows, tokens, m, n, block if share == model["cutlass_fill_share_block128"] else row, sms,
            {} if share in (3, 5) else {"cutlass_fill_share_row": share})),
    }
    assert (model["cutlass_fill_share_row"], model["cutlass_fill_share_block128"]) == (3, 5)
    assert set(calls) == set(reference) - {"about"}
    for kind, call in calls.items():
        rows = reference[kind]["rows"]
        assert len(rows) >= 60 and len({r[-1] for r in rows}) > 1, kind  # a grid the models tell apart
        for *args, expected in rows:
            assert call(*args) == expected, (kind, args)


def test_a_model_override_changes_only_what_it_names():
    """The replays sweep a constant through the bound functions' `model` overrides: an override moves the
    prediction by what the model says, leaves the shipped model as it was, and a wrong name or type is a
    ValueError naming it."""
    tile, problem = (64, 8, 256, False, 4), (7, 3072, 4096)
    base = _C.scaled_gemm_predicted_steps(tile, *problem, 2, 132)
    waves = 1  # 48 tiles x 2 splits on 528 slots
    model = _C.scaled_gemm_model()
    assert _C.scaled_gemm_predicted_steps(tile, *problem, 2, 132, {"decode_wave_steps": 0.0}) == \
        base - waves * model["decode_wave_steps"]
    assert _C.scaled_gemm_predicted_steps(tile, *problem, 2, 132) == base and _C.scaled_gemm_model() == model
    assert _C.scaled_gemm_decode_splits(tile, *problem, 132, {"decode_split_counts": [1, 1, 1, 1]}) == 1
    with pytest.raises(ValueError, match="unknown model field 'wave_steps'"):
        _C.scaled_gemm_predicted_steps(tile, *problem, 2, 132, {"wave_steps": 1.0})
    with pytest.raises(ValueError, match="'decode_split_counts' takes a value like \\[1, 2, 4, 8\\]"):
        _C.scaled_gemm_decode_splits(tile, *problem, 132, {"decode_split_counts": [1, 2]})
    with pytest.raises(ValueError, match="splits must be >= 1"):
        _C.scaled_gemm_predicted_steps(tile, *problem, 0, 132)
    with pytest.raises(ValueError, match="scale_kind"):
        _C.scaled_gemm_cutlass_fills_the_gpu(64, 8, 1, 4096, 7, 132)


@pytest.mark.gpu
def test_per_tensor_scales_run_cublaslt_as_torch_scaled_mm_does():
    g = torch.Generator(device="cuda").manual_seed(3)
    w, a = random_fp8(4096, 4096, g), random_fp8(1, 4096, g)
    sa, sb = scales("tensor", 1, (1, 1), g).reshape(()), scales("tensor", 1, (1, 1), g).reshape(())
    library = [c.id for c in wavetune.scaled_gemm_configs() if c.schedule == "cublas" and c.dtype == "bf16"]
    assert _C.scaled_gemm_chosen_variant(1, 4096, 4096, 0, 0, 0) == (library[0] if library else -1)
    torch.testing.assert_close(wavetune.scaled_gemm(a, w.t(), sa, sb),
                               torch._scaled_mm(a, w.t(), sa, sb, out_dtype=torch.bfloat16), rtol=8e-3, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("m, config, splits", [(7, "e4m3_bf16_decode_64x8_4x1", 4), (40, None, 0)])
def test_programmatic_launch_gives_the_same_bits(m, config, splits):
    g = torch.Generator(device="cuda").manual_seed(5)
    n, k = 3072, 4096
    x = torch.randn(m, k, device="cuda", generator=g, dtype=torch.bfloat16)
    w, sb = random_fp8(n, k, g), scales("row", n, (1, n), g)
    before = _C.programmatic_launch()
    results = {}
    try:
        for on in (True, False):
            _C.set_programmatic_launch(on)
            q, sx = wavetune.quantize_fp8(x)
            results[on] = wavetune.scaled_gemm(q, w.t(), sx, sb, config=config, splits=splits)
        torch.cuda.synchronize()
    finally:
        _C.set_programmatic_launch(before)
    assert torch.equal(results[True], results[False])


@pytest.mark.gpu
def test_quantize_fp8_per_row_and_static():
    g = torch.Generator(device="cuda").manual_seed(11)
    for dtype in (torch.bfloat16, torch.float16):
        x = torch.randn(5, 3, 1000 + 8, device="cuda", generator=g).to(dtype) * 3
        x[1, 2] = 0  # an all-zero row
        q, s = wavetune.quantize_fp8(x)
        assert q.shape == x.shape and q.dtype == FP8 and s.shape == (5, 3, 1)
        amax = x.float().abs().amax(-1, keepdim=True)
        torch.testing.assert_close(s, torch.where(amax > 0, amax / 448, torch.ones_like(amax)))
        assert q.float().abs().amax(-1).max() <= 448
        # Each value within half an e4m3 step (relative 2^-4) of x / scale.
        err = (q.float() * s - x.float()).abs()
        assert (err <= x.float().abs() * 2**-4 + s * 2**-9).all()
        static = torch.tensor([0.01], device="cuda")
        qs, same = wavetune.quantize_fp8(x, static)
        assert same is static
        expected = (x.float() / 0.01).clamp(-448, 448)
        assert ((qs.float() - expected).abs() <= expected.abs() * 2**-4 + 2**-9).all()


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [8, 80, 200], ids=["kernels", "cublaslt_second_pass", "cublaslt"])
def test_cuda_graph_capture_as_pytorch_documents_it(tokens):
    """The wave model's kernels, and past their token limit cuBLASLt (with the second pass for the scales up to
    K / 8 tokens), whose workspace then comes from the graph's pool."""
    import wavetune.torch_ops  # noqa: F401

    g = torch.Generator(device="cuda").manual_seed(13)
    n, k = 2048, 1024
    w, sb = random_fp8(n, k, g), scales("row", n, (1, n), g)
    x = torch.randn(tokens, k, device="cuda", generator=g, dtype=torch.bfloat16)

    def step(x):
        q, sx = torch.ops.wavetune.quantize_fp8(x)
        return torch.ops.wavetune.scaled_gemm(q, w.t(), sx, sb)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = step(x)
    x.copy_(torch.randn(tokens, k, device="cuda", generator=g, dtype=torch.bfloat16))
    y.fill_(float("nan"))
    graph.replay()
    assert torch.equal(y, step(x))


@pytest.mark.gpu
def test_torch_compile_fullgraph():
    import wavetune.torch_ops  # noqa: F401

    g = torch.Generator(device="cuda").manual_seed(17)
    n, k = 1024, 512
    w, sb = random_fp8(n, k, g), scales("row", n, (1, n), g)
    bias = torch.randn(n, device="cuda", generator=g, dtype=torch.bfloat16)

    def layer(x):
        q, sx = torch.ops.wavetune.quantize_fp8(x)
        return torch.ops.wavetune.scaled_gemm(q, w.t(), sx, sb, bias, torch.bfloat16)

    compiled = torch.compile(layer, fullgraph=True)
    x = torch.randn(4, k, device="cuda", generator=g, dtype=torch.bfloat16)
    assert torch.equal(compiled(x), layer(x))

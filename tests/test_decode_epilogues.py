"""The decode GEMM's epilogues (types.h, Epilogue): residual (D = X W^T + R, rounded once, D may be R) and
silu_and_mul (D = silu(gate) * up of a merged [gate; up] weight), through wavetune.gemm, the torch operators
linear_residual and linear_silu_and_mul, and wavetune.fused's gated MLPs and decoder layers.

CPU tier: argument checks (Python and native), the merged weight's layout, fake kernels, the CPU refusal, the
swapped modules' fallbacks. GPU tier: every decode variant, M 1-64, several N and K, bf16 and fp16, unsplit and
split, fresh random inputs and poisoned outputs, against fp32 and against the unfused launch of the same config
(silu_and_mul bit for bit; residual within the one rounding it saves); the unfused fallback of other variants;
CUDA graphs and torch.compile; a patched model with the decode GEMM forced, its logits error against an fp32 run
within 1.1x of eager transformers'."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import wavetune  # noqa: E402
from wavetune import _C, fused  # noqa: E402
from wavetune.families.gemm import api  # noqa: E402
from wavetune.families.gemm import torch_ops as gemm_ops  # noqa: E402

from conftest import capture_graph  # noqa: E402

OPS = torch.ops.wavetune
BF16 = torch.bfloat16
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# One rounding step relative to the value: 2^-(mantissa bits) for bf16 and fp16.
STEP = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}


def cpu(*shape, dtype=BF16):
    return torch.zeros(*shape, dtype=dtype)


# ---- CPU tier -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"residual": cpu(5, 32)}, ValueError, r"residual must be a torch.bfloat16 tensor of the product's shape "
                                               r"\(5, 56\), got torch.bfloat16 \(5, 32\)"),
        ({"residual": cpu(5, 56, dtype=torch.float16)}, ValueError, "got torch.float16"),
        ({"residual": [[0.0]]}, ValueError, "got list"),
        ({"residual": cpu(56, 5).t()}, ValueError, "residual's last dimension must be contiguous"),
        ({"silu_and_mul": True, "residual": cpu(5, 56)}, ValueError, "two epilogues; pass one"),
        ({"silu_and_mul": 1}, TypeError, "silu_and_mul must be True or False"),
        ({"silu_and_mul": True}, ValueError, "N=56 .* multiple of 16"),
        ({"silu_and_mul": True, "out": cpu(5, 56)}, ValueError, "N=56 .* multiple of 16"),
        ({"residual": cpu(5, 56)}, ValueError, "a, b, bias, out and residual must be on one CUDA device"),
    ],
)
def test_epilogue_arguments_are_checked_before_the_device(kwargs, error, message):
    with pytest.raises(error, match=message):
        api.check_operands(cpu(5, 64), cpu(56, 64).t(), **kwargs)


def test_the_output_of_silu_and_mul_is_half_as_wide():
    x, w = cpu(5, 64), cpu(64, 64)
    with pytest.raises(ValueError, match=r"out must be a torch.bfloat16 tensor of shape \(5, 32\)"):
        api.check_operands(x, w.t(), out=cpu(5, 64), silu_and_mul=True)
    with pytest.raises(ValueError, match="must be on one CUDA device"):  # every shape rule passed
        api.check_operands(x, w.t(), out=cpu(5, 32), silu_and_mul=True)
    with pytest.raises(ValueError, match="must be on one CUDA device"):
        wavetune.gemm(x, w.t(), residual=cpu(5, 64), out=cpu(5, 64))


def test_the_native_checks_of_the_epilogues_need_no_gpu():
    ok = dict(m=4, n=64, k=64, lda=64, ldb=64, dtype=0, b_layout=0)
    assert _C.shape_error(**ok, ldd=64) == ""
    assert _C.shape_error(**ok, ldd=32, epilogue="silu_and_mul") == ""  # D is N / 2 wide
    assert "needs >= N/2=32" in _C.shape_error(**ok, ldd=24, epilogue="silu_and_mul")
    assert "multiple of 16" in _C.shape_error(**{**ok, "n": 72}, ldd=72, epilogue="silu_and_mul")
    assert _C.shape_error(**ok, ldd=64, epilogue="residual", ldr=128) == ""
    assert "ldr=56 must be at least N=64" in _C.shape_error(**ok, ldd=64, epilogue="residual", ldr=56)
    assert "ldr=68" in _C.shape_error(**ok, ldd=64, epilogue="residual", ldr=68)
    with pytest.raises(ValueError, match="unknown epilogue 'gelu'"):
        _C.shape_error(**ok, ldd=64, epilogue="gelu")
    pointers = dict(m=4, n=64, k=64, a=256, lda=64, b=512, ldb=64, d=1024, ldd=64, dtype=0, b_layout=0)
    assert _C.problem_error(**pointers, epilogue="residual", residual=2048, ldr=64) == ""
    assert "needs R" in _C.problem_error(**pointers, epilogue="residual", ldr=64)
    assert "needs R" in _C.problem_error(**pointers, epilogue="residual", residual=2050, ldr=64)
    assert _C.problem_error(**pointers, epilogue="residual", residual=1024, ldr=64) == ""  # in place
    assert "D is R" in _C.problem_error(**pointers, epilogue="residual", residual=1024, ldr=128)


def test_the_merged_weight_is_gate_then_up_and_the_parts_stay_views():
    """The layout the decode GEMM's silu_and_mul reads: merge_linears' plain concatenation (the kernel pairs gate
    row j with up row N/2 + j through its row pointers), the same weight the unfused GEMM and silu_and_mul read."""
    gate, up = torch.nn.Linear(64, 48, bias=True), torch.nn.Linear(64, 48, bias=True)
    expected_weight = torch.cat([gate.weight.detach(), up.weight.detach()]).numpy()
    expected_bias = torch.cat([gate.bias.detach(), up.bias.detach()]).numpy()
    merged = fused.merge_linears([gate, up])
    assert (merged.weight.detach().numpy() == expected_weight).all()
    assert (merged.bias.detach().numpy() == expected_bias).all()
    assert gate.weight.data_ptr() == merged.weight.data_ptr()
    assert up.weight.data_ptr() == merged.weight[48:].data_ptr() and up.bias.data_ptr() == merged.bias[48:].data_ptr()
    x = torch.randn(3, 64)
    g, u = merged(x).split(48, dim=-1)
    torch.testing.assert_close(torch.nn.functional.silu(g) * u, torch.nn.functional.silu(gate(x)) * up(x))


def test_fakes_give_the_output_shapes_and_refuse_what_the_kernels_refuse():
    with torch.device("meta"):
        x, w, bias = torch.empty(3, 5, 64, dtype=BF16), torch.empty(96, 64, dtype=BF16), torch.empty(96, dtype=BF16)
        assert OPS.linear_silu_and_mul(x, w).shape == (3, 5, 48)
        assert OPS.linear_silu_and_mul(x, w, bias, "reduction_order").shape == (3, 5, 48)
        residual = torch.empty(3, 5, 96, dtype=BF16)
        assert OPS.linear_residual(x, w, residual, bias).shape == (3, 5, 96)
        with pytest.raises(ValueError, match="multiple of 16"):
            OPS.linear_silu_and_mul(x, w[:88])
        with pytest.raises(ValueError, match=r"residual must be .* shape \(3, 5, 96\)"):
            OPS.linear_residual(x, w, residual[..., :48])
        with pytest.raises(ValueError, match="unknown batch invariance level"):
            OPS.linear_residual(x, w, residual, None, "sometimes")


def test_cpu_tensors_are_refused_with_wavetunes_message():
    x, w = cpu(5, 64), cpu(96, 64)
    with pytest.raises(ValueError, match="wavetune.linear_silu_and_mul runs on CUDA tensors"):
        OPS.linear_silu_and_mul(x, w)
    with pytest.raises(ValueError, match="wavetune.linear_residual runs on CUDA tensors"):
        OPS.linear_residual(x, w, cpu(5, 96))


def tiny_llama(device="cpu", dtype=BF16, **overrides):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(**{**dict(vocab_size=256, hidden_size=128, intermediate_size=256,
                                                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                                max_position_embeddings=512), **overrides})
    torch.manual_seed(0)
    with torch.device(device):
        return transformers.LlamaForCausalLM(config).to(dtype).eval()


def test_a_gated_mlp_adds_a_residual_as_the_decoder_layer_did_on_the_cpu():
    model = tiny_llama(mlp_bias=True)
    layer = model.model.layers[0]
    x = torch.randn(2, 5, 128, dtype=BF16)
    positions = torch.arange(5).expand(2, 5)
    embeddings = model.model.rotary_emb(x, positions)
    expected = layer(x, position_ids=positions, position_embeddings=embeddings)
    residual = torch.randn_like(x)
    mlp = fused.GatedMLP(copy.deepcopy(layer.mlp))
    assert torch.equal(mlp(x, residual), residual + layer.mlp(x)) and torch.equal(mlp(x), layer.mlp(x))
    layer.mlp = fused.GatedMLP(layer.mlp)
    fused.patch_residual(layer, "layer", {})
    assert torch.equal(layer(x, position_ids=positions, position_embeddings=embeddings), expected)


# ---- GPU tier -------------------------------------------------------------------------------------------------

def decode_variants(dtype: str):
    return [c for c in wavetune.configs() if c.schedule == "decode" and c.dtype == dtype]


def poisoned(*shape, dtype):
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


def launches(variant, k: int, splits=(1, 2, 8)):
    """The LaunchConfigs of a decode variant: unsplit, and split where it has the K steps (not persistent)."""
    steps = -(-k // variant.tile[2])
    for s in splits:
        if s == 1 or (s <= steps and variant.scheduler != "persistent"):
            yield wavetune.LaunchConfig(variant.name, "split_k" if s > 1 else "data_parallel", s)


def operands(m, n, k, dtype, generator, bias: bool):
    def uniform(*shape):
        return torch.rand(*shape, device="cuda", dtype=dtype, generator=generator) * 2 - 1

    return uniform(m, k), uniform(n, k), uniform(n) if bias else None


def fp32_product(x, w, bias):
    out = x.float() @ w.float().t()
    return out + bias.float() if bias is not None else out


def relative_error(got, expected) -> float:
    return ((got.float() - expected).norm() / expected.norm()).item()


def check_silu_and_mul(x, w, bias, config):
    """Into a poisoned output inside a wider one (columns past N/2 untouched): bit for bit the unfused launch of
    the same config then silu_and_mul, and close to fp32."""
    m, n = x.shape[0], w.shape[0]
    wide = poisoned(m, n // 2 + 24, dtype=x.dtype)
    out = wide[:, :n // 2]
    wavetune.gemm(x, w.t(), bias=bias, silu_and_mul=True, out=out, config=config)
    unfused = wavetune.silu_and_mul(wavetune.gemm(x, w.t(), bias=bias, config=config))
    assert torch.equal(out, unfused), (config, m, n)
    assert wide[:, n // 2:].isnan().all(), "wrote past D's columns"
    gate, up = fp32_product(x, w, bias).split(n // 2, dim=-1)
    assert relative_error(out, torch.nn.functional.silu(gate) * up) < 1e-2, (config, m, n)


def check_residual(x, w, bias, residual, config):
    """Into a poisoned output: close to fp32, one rounding from the unfused launch plus PyTorch's addition (the
    GEMM's own rounding left out), and in place (D = R) the same bits."""
    out = poisoned(*residual.shape, dtype=x.dtype)
    wavetune.gemm(x, w.t(), bias=bias, residual=residual, out=out, config=config)
    product = wavetune.gemm(x, w.t(), bias=bias, config=config)
    eager = (residual + product).float()
    step = STEP[x.dtype]
    bound = step / 2 * product.float().abs() + step * eager.abs() + 1e-6
    assert ((out.float() - eager).abs() <= bound).all(), (config, x.shape[0], w.shape[0])
    assert relative_error(out, fp32_product(x, w, bias) + residual.float()) < 5e-3, config
    in_place = residual.clone()
    assert wavetune.gemm(x, w.t(), bias=bias, residual=in_place, out=in_place, config=config) is in_place
    assert torch.equal(in_place, out), config


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("epilogue", ["silu_and_mul", "residual"])
def test_every_variant_runs_the_epilogues_split_and_unsplit(epilogue, dtype):
    torch_dtype = DTYPES[dtype]
    generator = torch.Generator(device="cuda").manual_seed(11)
    variants = decode_variants(dtype)
    assert variants, "a CUDA build has the decode variants"
    # N (a multiple of 16) off every tile edge, K off the 32-wide chunk and long enough for 8 splits; more tiles
    # than persistent CTAs resident in the widest.
    for m, n, k in [(1, 1040, 4096), (13, 272, 1032), (37, 2064, 520), (64, 160, 8200), (9, 65552, 64)]:
        for with_bias in (False, True):
            x, w, bias = operands(m, n, k, torch_dtype, generator, with_bias)
            residual = torch.randn(m, n, device="cuda", dtype=torch_dtype, generator=generator) * 8
            for v in variants:
                for config in launches(v, k):
                    if epilogue == "silu_and_mul":
                        check_silu_and_mul(x, w, bias, config)
                    else:
                        check_residual(x, w, bias, residual, config)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_every_token_count_from_1_to_64(dtype):
    torch_dtype = DTYPES[dtype]
    generator = torch.Generator(device="cuda").manual_seed(5)
    tiles = {}  # one variant per token tile and schedule
    for v in decode_variants(dtype):
        tiles.setdefault((v.tile[1], v.scheduler), v)
    for m in range(1, 65):
        x, w, bias = operands(m, 272, 1032, torch_dtype, generator, bias=m % 2 == 0)
        residual = torch.randn(m, 272, device="cuda", dtype=torch_dtype, generator=generator)
        for v in tiles.values():
            for config in launches(v, 1032, splits=(1, 4)):
                check_silu_and_mul(x, w, bias, config)
                check_residual(x, w, bias, residual, config)


@pytest.mark.gpu
def test_other_variants_run_the_gemm_then_the_epilogue():
    """cuBLAS (and any non-decode variant) has no epilogue: the GEMM runs, then PyTorch's addition or the
    silu_and_mul kernel, bit for bit the eager sequence."""
    x = torch.randn(3, 7, 512, device="cuda", dtype=BF16)
    w = torch.randn(1024, 512, device="cuda", dtype=BF16)
    bias, residual = torch.randn(1024, device="cuda", dtype=BF16), torch.randn(3, 7, 1024, device="cuda", dtype=BF16)
    config = "cublas_bf16_bcol"
    product = wavetune.gemm(x, w.t(), bias=bias, config=config)
    assert torch.equal(wavetune.gemm(x, w.t(), bias=bias, residual=residual, config=config), residual + product)
    in_place = residual.clone()
    wavetune.gemm(x, w.t(), bias=bias, residual=in_place, out=in_place, config=config)
    assert torch.equal(in_place, residual + product)
    out = poisoned(3, 7, 512, dtype=BF16)
    wavetune.gemm(x, w.t(), bias=bias, silu_and_mul=True, out=out, config=config)
    assert torch.equal(out, wavetune.silu_and_mul(product))
    empty = x[..., :0]  # K = 0: the bias alone, then the epilogue
    assert torch.equal(wavetune.gemm(empty, w[:, :0].t(), bias=bias, residual=residual), residual + bias)


class DecodeForced:
    """wavetune._C as the GEMM's torch operators see it, every PreparedGemm on one decode variant (the shipped
    tables choose cuBLAS at decode sizes), so that the operators and patched models run the fused epilogues."""

    def __init__(self, name: str):
        self.variant = api.configs_by_name()[name].id

    def __getattr__(self, attribute):
        return getattr(_C, attribute)

    def PreparedGemm(self, *args, **kwargs):  # noqa: N802 (the native class's name)
        return _C.PreparedGemm(*args, variant=self.variant, **kwargs)


@pytest.fixture
def decode_forced(monkeypatch):
    gemm_ops._plans.clear()
    monkeypatch.setattr(gemm_ops, "_C", DecodeForced("bf16_bcol_decode_64x16_4x1"))
    yield
    gemm_ops._plans.clear()


@pytest.mark.gpu
@pytest.mark.parametrize("forced", [False, True])
def test_the_operators_are_the_unfused_sequence_in_graphs_and_compiled(forced, request):
    if forced:
        request.getfixturevalue("decode_forced")
    x = torch.randn(2, 3, 1024, device="cuda", dtype=BF16)
    gate_up, down = (torch.randn(n, k, device="cuda", dtype=BF16) / 32 for n, k in ((2816, 1024), (1024, 1408)))
    bias, residual = torch.randn(2816, device="cuda", dtype=BF16), torch.randn(2, 3, 1024, device="cuda", dtype=BF16)

    def step():
        hidden = OPS.linear_silu_and_mul(x, gate_up, bias)
        return hidden, OPS.linear_residual(hidden, down, residual)

    hidden, out = step()
    assert torch.equal(hidden, OPS.silu_and_mul(OPS.linear(x, gate_up, bias)))  # fused or not, the same bits
    product = OPS.linear(hidden, down)
    step_size = STEP[BF16]
    assert ((out.float() - (residual + product).float()).abs()
            <= step_size / 2 * product.float().abs() + step_size * (residual + product).float().abs() + 1e-6).all()
    if not forced:
        assert torch.equal(out, residual + product)  # the table's choice at decode: cuBLAS, then the addition
    graph, captured = capture_graph(step)  # replays take new inputs
    x.copy_(torch.randn_like(x))
    residual.copy_(torch.randn_like(residual))
    graph.replay()
    assert all(torch.equal(a, b) for a, b in zip(captured, step()))
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, r: OPS.linear_residual(OPS.linear_silu_and_mul(x, gate_up, bias), down, r),
                             fullgraph=True)
    assert torch.equal(compiled(x, residual), step()[1])


@pytest.mark.gpu
def test_a_patched_model_runs_its_mlps_through_the_epilogue_operators(monkeypatch):
    model = tiny_llama("cuda", hidden_size=1024, intermediate_size=2816, num_attention_heads=8)
    patched = copy.deepcopy(model)
    wavetune.patch(patched, attention=False)
    calls = []
    for method in ("forward_silu_and_mul", "forward_residual"):
        original = getattr(wavetune.nn.Linear, method)
        monkeypatch.setattr(wavetune.nn.Linear, method,
                            lambda self, *args, _original=original, _name=method: calls.append(_name)
                            or _original(self, *args))
    tokens = torch.randint(0, 256, (2, 9), device="cuda")
    with torch.no_grad():
        reference, logits = model(tokens).logits.float(), patched(tokens).logits.float()
    layers = patched.config.num_hidden_layers
    # the residual after each MLP goes with the next norm (fused.add_ahead), not into the down projection
    assert sorted(calls) == ["forward_silu_and_mul"] * layers
    assert relative_error(logits, reference) < 2e-2
    calls.clear()
    for layer in patched.model.layers:
        del layer.__dict__[fused.NEXT_NORM]
    with torch.no_grad():
        assert relative_error(patched(tokens).logits.float(), reference) < 2e-2
    assert sorted(calls) == ["forward_residual"] * layers + ["forward_silu_and_mul"] * layers


@pytest.mark.gpu
def test_fused_epilogues_keep_the_logits_error_against_fp32_within_eagers(decode_forced):
    """Issue 78's bound: with every GEMM on the decode kernel and its epilogues fused, the patched bf16 model's
    logits are within 1.1x of eager transformers' error against the same model run in fp32."""
    model = tiny_llama("cuda", hidden_size=1024, intermediate_size=2816, num_attention_heads=8, num_hidden_layers=4)
    reference_model = copy.deepcopy(model).float()
    patched = copy.deepcopy(model)
    wavetune.patch(patched, attention=False)
    errors = {"eager": [], "fused": []}
    with torch.no_grad():
        for batch, seq in ((1, 1), (4, 16), (1, 64)):
            tokens = torch.randint(0, 256, (batch, seq), device="cuda", generator=torch.Generator(
                device="cuda").manual_seed(batch * seq))
            reference = reference_model(tokens).logits
            for name, m in (("eager", model), ("fused", patched)):
                errors[name].append(relative_error(m(tokens).logits, reference))
    assert sum(errors["fused"]) <= 1.1 * sum(errors["eager"]), errors

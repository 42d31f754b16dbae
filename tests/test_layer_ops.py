"""The layer ops (wavetune.rms_norm, silu_and_mul, rotary_embedding) and the modules wavetune.patch puts in a
transformers model's norms, MLPs and attention (wavetune.fused). CPU tier: input checks, fakes, which modules
are swapped and why not, the swapped modules' fallbacks computing what the model did, merged weights, unpatch.
GPU tier: each op against transformers' own module or function (bit-identical where both round the same values;
the norm's fp32 sum may differ in order), with poisoned outputs, odd sizes, strided views, PDL on and off, a CUDA
graph and torch.compile; the merged query, key and value projections in a model, eager and in a CUDA graph."""

from __future__ import annotations

import copy
import types

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import wavetune  # noqa: E402
from wavetune import fused  # noqa: E402
from wavetune.families.layer_ops import api  # noqa: E402
from transformers.models.llama import modeling_llama as llama  # noqa: E402

from conftest import capture_graph, norms_served_ahead  # noqa: E402

OPS = torch.ops.wavetune
TINY = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512)


def tiny(class_name: str, config_name: str, device="cpu", dtype=torch.bfloat16, **overrides):
    config = getattr(transformers, config_name)(**{**TINY, **overrides})
    torch.manual_seed(0)
    with torch.device(device):
        return getattr(transformers, class_name)(config).to(dtype).eval()


# ---- CPU tier -------------------------------------------------------------------------------------------------

def test_bad_inputs_name_the_problem():
    x = torch.zeros(4, 64, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="weight must be"):
        api.check_rows(torch, x, torch.zeros(64, dtype=torch.float32))
    with pytest.raises(ValueError, match=r"weight must be \[64\]"):
        api.check_rows(torch, x, torch.zeros(32, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="multiple of 8"):
        api.check_rows(torch, torch.zeros(4, 12, dtype=torch.bfloat16), torch.zeros(12, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="bf16 or fp16"):
        api.check_rows(torch, x.float())
    with pytest.raises(ValueError, match="contiguous last dimension"):
        api.check_rows(torch, x.t())
    with pytest.raises(ValueError, match="CUDA"):
        wavetune.rms_norm(x, torch.ones(64, dtype=torch.bfloat16), 1e-6)
    weight = torch.ones(64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"out must have shape \(4, 64\)"):
        wavetune.rms_norm(x, weight, 1e-6, out=torch.empty(4, 32, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="out must be a torch.bfloat16 tensor"):
        wavetune.silu_and_mul(x, out=torch.empty(4, 32))
    with pytest.raises(ValueError, match="rows must be contiguous"):
        wavetune.silu_and_mul(x, out=torch.empty(32, 4, dtype=torch.bfloat16).t())
    with pytest.raises(ValueError, match="CUDA"):
        wavetune.silu_and_mul(x)
    q, k = torch.zeros(2, 4, 3, 64, dtype=torch.bfloat16), torch.zeros(2, 2, 3, 64, dtype=torch.bfloat16)
    cos = torch.zeros(2, 3, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"cos and sin must be \[batch or 1, seq, head_dim\]"):
        api.check_rotary(torch, q, k, cos[:, :2], cos[:, :2])
    with pytest.raises(ValueError, match="k .* must match q"):
        api.check_rotary(torch, q, k[:1], cos, cos)
    with pytest.raises(ValueError, match="multiple of 16"):
        api.check_rotary(torch, q[..., :40], k[..., :40], cos[..., :40], cos[..., :40])
    with pytest.raises(ValueError, match="CUDA"):
        wavetune.rotary_embedding(q, k, cos, cos)


def test_add_rms_norm_checks_its_residual_without_a_gpu():
    x, weight = torch.zeros(4, 64, dtype=torch.bfloat16), torch.ones(64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"residual must have x's shape \(4, 64\), got \(4, 32\)"):
        api.check_residual(torch, x, x[:, :32], weight)
    with pytest.raises(TypeError, match="residual must be torch.bfloat16"):
        api.check_residual(torch, x, x.half(), weight)
    with pytest.raises(ValueError, match=r"weight must be \[64\]"):
        api.check_residual(torch, x, x, weight[:32])
    with pytest.raises(ValueError, match="CUDA"):
        wavetune.add_rms_norm(x, x, weight, 1e-6)
    with pytest.raises(ValueError, match="CUDA"):
        OPS.add_rms_norm(x, x, weight, 1e-6)
    from wavetune._C import add_rms_norm

    with pytest.raises(ValueError, match="add_rms_norm: residual: .*16-byte aligned"):
        add_rms_norm(16, 64, 8, 64, 16, 64, 16, 16, 64, 3, 64, 1e-6, 0, 0)
    with pytest.raises(ValueError, match="add_rms_norm: sum: .*multiples of 8"):
        add_rms_norm(16, 64, 16, 64, 16, 60, 16, 16, 64, 3, 64, 1e-6, 0, 0)


def test_the_native_checks_need_no_gpu():
    from wavetune._C import rows_error

    assert rows_error(16, 64, 16, 64, 3, 64) == ""
    assert "multiples of 8" in rows_error(16, 60, 16, 64, 3, 64)
    assert "16-byte aligned" in rows_error(8, 64, 16, 64, 3, 64)


def test_fakes_give_the_output_shapes():
    with torch.device("meta"):
        x, w = torch.empty(3, 5, 96, dtype=torch.bfloat16), torch.empty(96, dtype=torch.bfloat16)
        assert OPS.rms_norm(x, w, 1e-6).shape == (3, 5, 96)
        assert OPS.silu_and_mul(x).shape == (3, 5, 48)
        assert [t.shape for t in OPS.add_rms_norm(x, x, w, 1e-6)] == [(3, 5, 96)] * 2
        q = torch.empty(2, 7, 4, 64, dtype=torch.float16).transpose(1, 2)  # [batch, heads, seq, dim] view
        k = torch.empty(2, 7, 2, 64, dtype=torch.float16).transpose(1, 2)
        q_out, k_out = OPS.rotary_embedding(q, k, torch.empty(1, 7, 64, dtype=torch.float16),
                                            torch.empty(1, 7, 64, dtype=torch.float16))
    assert q_out.shape == q.shape and q_out.stride() == q.stride() and k_out.stride() == k.stride()


@pytest.mark.parametrize("name, config", [("LlamaForCausalLM", "LlamaConfig"), ("Qwen3ForCausalLM", "Qwen3Config"),
                                          ("Qwen3MoeForCausalLM", "Qwen3MoeConfig")])
def test_a_meta_model_gets_its_norms_mlps_and_rotary_embeddings_swapped_and_back(name, config):
    model = tiny(name, config, device="meta", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64)
    report = wavetune.patch(model)
    layer = model.model.layers[0]
    assert isinstance(layer.input_layernorm, fused.RMSNorm) and isinstance(model.model.norm, fused.RMSNorm)
    assert "model.layers.0.self_attn" in report.layers and "forward" in layer.self_attn.__dict__
    if name != "Qwen3MoeForCausalLM":
        assert isinstance(layer.mlp, fused.GatedMLP) and isinstance(layer.mlp.gate_up, wavetune.nn.Linear)
        assert isinstance(layer.mlp.down_proj, wavetune.nn.Linear)
    if name.startswith("Qwen3"):
        assert isinstance(layer.self_attn.q_norm, fused.RMSNorm)  # the per-head norms too
    attention = layer.self_attn
    assert all(isinstance(getattr(attention, p), fused.ProjectionSlice) for p in fused.PROJECTIONS)
    assert isinstance(attention.q_proj.merged, wavetune.nn.Linear)  # one GEMM, on wavetune's
    widths = [fused._original(getattr(attention, p)).out_features for p in fused.PROJECTIONS]
    assert attention.q_proj.merged.out_features == sum(widths) and attention.v_proj.end == sum(widths)
    assert not report.layers_skipped
    wavetune.unpatch(model)
    assert type(layer.input_layernorm).__name__.endswith("RMSNorm") and "forward" not in layer.self_attn.__dict__
    assert all(type(getattr(attention, p)) is torch.nn.Linear for p in fused.PROJECTIONS)
    assert not any(isinstance(m, (fused.RMSNorm, fused.GatedMLP, fused.ProjectionSlice, wavetune.nn.Linear))
                   for m in model.modules())


def test_modules_with_other_code_are_left_with_the_reason():
    model = tiny("GemmaForCausalLM", "GemmaConfig", device="meta", head_dim=32)
    report = wavetune.patch(model)
    assert report.layers_skipped["model.norm"] == "GemmaRMSNorm.forward is not LlamaRMSNorm's"
    assert report.layers_skipped["model.layers.0.mlp"].startswith("activation")  # gelu
    assert "model.layers.0.self_attn" in report.layers  # Gemma's rotary embedding is Llama's
    cpu = wavetune.patch(tiny("LlamaForCausalLM", "LlamaConfig"))
    assert cpu.layers == [] and all("on cpu" in reason for reason in cpu.layers_skipped.values())


def test_swapped_modules_fall_back_to_what_they_replaced_on_the_cpu():
    model = tiny("LlamaForCausalLM", "LlamaConfig")
    layer = model.model.layers[0]
    x = torch.randn(2, 5, TINY["hidden_size"], dtype=torch.bfloat16)
    norm, mlp = fused.RMSNorm(layer.input_layernorm), fused.GatedMLP(copy.deepcopy(layer.mlp))
    assert torch.equal(norm(x), layer.input_layernorm(x))
    assert torch.equal(mlp(x), layer.mlp(x))
    # gate and up now views of the merged weight: one copy of the values, the state dict unchanged
    original = fused._original(mlp)
    assert original.gate_proj.weight.data_ptr() == mlp.gate_up.weight.data_ptr()
    assert original.up_proj.weight.data_ptr() == mlp.gate_up.weight[TINY["intermediate_size"]:].data_ptr()
    assert set(original.state_dict()) == {"gate_proj.weight", "up_proj.weight", "down_proj.weight"}
    # the query, key and value projections: each slice computes its own layer on the CPU
    attention = copy.deepcopy(layer.self_attn)
    before = {p: getattr(attention, p)(x) for p in fused.PROJECTIONS}
    fused.merge_projections(attention)
    assert all(torch.equal(getattr(attention, p)(x), before[p]) for p in fused.PROJECTIONS)
    merged, k_proj = attention.q_proj.merged, fused._original(attention.k_proj)
    assert k_proj.weight.data_ptr() == merged.weight[attention.k_proj.start:].data_ptr()


def test_a_decoder_layer_adds_and_norms_as_before_on_the_cpu():
    model = tiny("LlamaForCausalLM", "LlamaConfig")
    layer = model.model.layers[0]
    x = torch.randn(2, 5, TINY["hidden_size"], dtype=torch.bfloat16)
    positions = torch.arange(5).expand(2, 5)
    embeddings = model.model.rotary_emb(x, positions)
    expected = layer(x, position_ids=positions, position_embeddings=embeddings)
    assert fused.decoder_reason(layer) is None
    layer.post_attention_layernorm = fused.RMSNorm(layer.post_attention_layernorm)  # CPU: PyTorch's add and norm
    fused.patch_residual(layer, "layer", {})
    assert torch.equal(layer(x, position_ids=positions, position_embeddings=embeddings), expected)
    total, normed = fused.add_norm(layer.post_attention_layernorm, x, x.flip(0))
    assert torch.equal(total, x.flip(0) + x) and torch.equal(normed, fused._original(
        layer.post_attention_layernorm)(total))
    mixtral = tiny("MixtralForCausalLM", "MixtralConfig", device="meta", num_local_experts=4)
    assert "not LlamaDecoderLayer's" in fused.decoder_reason(mixtral.model.layers[0])


def test_swapped_modules_trace_under_torch_compile_on_the_cpu():
    model = tiny("LlamaForCausalLM", "LlamaConfig")
    model.model.norm = fused.RMSNorm(model.model.norm)
    for layer in model.model.layers:
        layer.input_layernorm, layer.mlp = fused.RMSNorm(layer.input_layernorm), fused.GatedMLP(layer.mlp)
        attention = layer.self_attn
        attention.forward = types.MethodType(fused._rotary_forward(type(attention).forward), attention)
        fused.merge_projections(attention)
    torch._dynamo.reset()  # other tests compiled the same transformers code for other shapes
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad():
        tokens = torch.randint(0, TINY["vocab_size"], (1, 9))
        assert torch.equal(compiled(tokens).logits, model(tokens).logits)
        with torch._dynamo.config.patch(error_on_recompile=True):  # the guards hold: new tokens reuse the graph
            tokens = torch.randint(0, TINY["vocab_size"], (1, 9))
            assert torch.equal(compiled(tokens).logits, model(tokens).logits)


def test_biased_projections_merge_with_their_biases_and_layers_false_swaps_nothing():
    model = tiny("LlamaForCausalLM", "LlamaConfig", mlp_bias=True)
    mlp = model.model.layers[0].mlp
    x = torch.randn(3, TINY["hidden_size"], dtype=torch.bfloat16)
    expected = mlp(x)
    gated = fused.GatedMLP(mlp)
    assert torch.equal(gated.gate_up.bias[:TINY["intermediate_size"]], mlp.gate_proj.bias)
    assert mlp.up_proj.bias.data_ptr() == gated.gate_up.bias[TINY["intermediate_size"]:].data_ptr()
    assert torch.equal(gated(x), expected)
    meta = tiny("LlamaForCausalLM", "LlamaConfig", device="meta")
    report = wavetune.patch(meta, layers=False)
    assert report.layers == [] and not any(isinstance(m, (fused.RMSNorm, fused.GatedMLP)) for m in meta.modules())
    assert "forward" not in meta.model.layers[0].self_attn.__dict__


def test_the_rotary_forward_is_the_class_code_with_wavetune_rotary():
    attention = tiny("LlamaForCausalLM", "LlamaConfig").model.layers[0].self_attn
    forward = fused._rotary_forward(type(attention).forward)
    assert forward.__code__ is type(attention).forward.__code__
    assert forward.__globals__[fused.ROTARY] is not llama.apply_rotary_pos_emb
    assert fused._rotary_forward(type(attention).forward) is forward  # one per class
    q, k = torch.randn(1, 4, 3, 32), torch.randn(1, 2, 3, 32)  # CPU: falls back to transformers' own
    cos, sin = torch.randn(1, 3, 32), torch.randn(1, 3, 32)
    for ours, theirs in zip(forward.__globals__[fused.ROTARY](q, k, cos, sin), llama.apply_rotary_pos_emb(q, k, cos, sin)):
        assert torch.equal(ours, theirs)


def test_each_decoder_layer_is_linked_to_the_norm_its_output_goes_to_next():
    model = tiny("LlamaForCausalLM", "LlamaConfig", device="meta", num_hidden_layers=3)
    wavetune.patch(model)
    layers = model.model.layers
    links = [layer.__dict__[fused.NEXT_NORM] for layer in layers]
    assert [link.norm for link in links] == [layers[1].input_layernorm, layers[2].input_layernorm, model.model.norm]
    assert [link.consumer for link in links] == [layers[1], layers[2], None] and all(link.trusted for link in links)
    wavetune.unpatch(model)
    assert not any(fused.NEXT_NORM in layer.__dict__ for layer in layers)


def _scales_in_place(self, hidden_states):
    hidden_states *= 2
    return hidden_states


def _writes_out(self, hidden_states):
    return [torch.add(hidden_states, 1, out=hidden_states) for _ in range(1)]


@pytest.mark.parametrize("forward, writes", [(_scales_in_place, True), (_writes_out, True),
                                             (transformers.LlamaModel.forward, False),
                                             (transformers.Qwen3MoeModel.forward, False),
                                             (transformers.MistralModel.forward, False)])
def test_model_forwards_that_may_write_in_place_are_told_apart(forward, writes):
    assert fused.writes_in_place(forward) is writes


def test_a_norm_returns_what_was_computed_ahead_only_for_that_unchanged_tensor(monkeypatch):
    norm = fused.RMSNorm(tiny("LlamaForCausalLM", "LlamaConfig").model.norm)
    monkeypatch.setattr(fused.RMSNorm, "takes", lambda self, x: True)  # as on a GPU; the CPU kernel refuses
    x, other, ahead = (torch.randn(2, 128, dtype=torch.bfloat16) for _ in range(3))
    norm._ahead = (x, x._version, ahead)
    assert norm(x) is ahead and norm._ahead is None
    for changed in (other, x.mul_(2)):  # another tensor; the same one changed in place since
        norm._ahead = (x, 0, ahead)
        with pytest.raises(ValueError, match="CUDA"):  # computed now: the kernel runs (refusing CPU tensors)
            norm(changed)
        assert norm._ahead is None
    norm._ahead = (x, None, ahead)  # kept in inference mode: no version to check
    assert norm(x) is ahead
    residual, layer = torch.randn_like(x), torch.nn.Module()
    assert torch.equal(fused.add_ahead(layer, x, residual), residual + x)  # not linked
    monkeypatch.undo()
    layer.__dict__[fused.NEXT_NORM] = fused.NextNorm(norm, None, True)
    assert torch.equal(fused.add_ahead(layer, x, residual), residual + x) and norm._ahead is None  # CPU: apart


# ---- GPU tier -------------------------------------------------------------------------------------------------

def poisoned(shape, dtype, **kwargs):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda", **kwargs)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows, width", [(1, 4096), (3, 3584), (37, 128), (1000, 5120), (5, 8), (2, 2056), (129, 64)])
def test_rms_norm_matches_transformers(rows, width, dtype):
    norm = llama.LlamaRMSNorm(width, eps=1e-5).to("cuda", dtype)
    norm.weight.data.normal_(1.0, 0.3)
    x = torch.randn(rows, width, device="cuda", dtype=dtype) * 3
    out = poisoned((rows, width), dtype)
    wavetune.rms_norm(x, norm.weight, 1e-5, out=out)
    expected = norm(x)
    # The fp32 sum of squares may be summed in another order, which can move the normalized value, and then the
    # product with the weight, by a rounding step each: at most two steps apart, and rarely.
    step = 2 ** -7 if dtype == torch.bfloat16 else 2 ** -10
    difference = (out.float() - expected.float()).abs()
    assert (difference <= 2 * step * expected.float().abs() + 1e-6).all(), difference.max()
    assert (out != expected).float().mean() < 0.01


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows, width", [(1, 4096), (3, 3584), (37, 128), (1000, 5120), (5, 8), (129, 64)])
def test_add_rms_norm_is_the_eager_addition_then_rms_norm(rows, width, dtype):
    weight = torch.empty(width, device="cuda", dtype=dtype).normal_(1.0, 0.3)
    wide = torch.randn(rows, width + 16, device="cuda", dtype=dtype) * 3
    x, residual = wide[:, 8:width + 8], torch.randn(rows, width, device="cuda", dtype=dtype) * 3  # x strided
    total, out = wavetune.add_rms_norm(x, residual, weight, 1e-5)
    assert torch.equal(total, residual + x)  # rounded as PyTorch's addition rounds it
    assert torch.equal(out, wavetune.rms_norm(total, weight, 1e-5))  # then the rms_norm kernel's arithmetic
    norm = llama.LlamaRMSNorm(width, eps=1e-5).to("cuda", dtype)
    norm.weight.data.copy_(weight)
    expected = norm(residual + x)
    step = 2 ** -7 if dtype == torch.bfloat16 else 2 ** -10  # test_rms_norm_matches_transformers' tolerance
    assert ((out.float() - expected.float()).abs() <= 2 * step * expected.float().abs() + 1e-6).all()
    batched = [t.view(1, rows, width) for t in (x.contiguous(), residual)]
    assert all(torch.equal(a.view(rows, width), b) for a, b in zip(OPS.add_rms_norm(*batched, weight, 1e-5),
                                                                   (total, out)))


@pytest.mark.gpu
def test_patched_decoder_layers_run_add_rms_norm(monkeypatch):
    model = tiny("LlamaForCausalLM", "LlamaConfig", device="cuda")
    patched = copy.deepcopy(model)
    report = wavetune.patch(patched, attention=False)
    assert "model.layers.0" in report.layers and "forward" in patched.model.layers[0].__dict__
    calls = []
    original = fused.add_norm

    def counted(norm, x, residual):
        result = original(norm, x, residual)
        calls.append(torch.equal(result[0], residual + x))
        return result

    monkeypatch.setattr(fused, "add_norm", counted)
    tokens = torch.randint(0, TINY["vocab_size"], (2, 9), device="cuda")
    with torch.no_grad():
        logits, reference = patched(tokens).logits.float(), model(tokens).logits.float()
    assert calls == [True] * TINY["num_hidden_layers"]
    assert ((logits - reference).norm() / reference.norm()).item() < 2e-2


@pytest.mark.gpu
def test_the_next_norm_computed_ahead_is_what_the_norm_returns_and_changes_no_bit(monkeypatch):
    model = tiny("LlamaForCausalLM", "LlamaConfig", device="cuda", num_hidden_layers=3)
    patched = copy.deepcopy(model)
    wavetune.patch(patched, attention=False)
    tokens = torch.randint(0, TINY["vocab_size"], (2, 9), device="cuda")
    with torch.no_grad(), monkeypatch.context() as apart:
        before = patched(tokens).logits
        for layer in patched.model.layers:  # unlinked: PyTorch's addition, then each norm by its own call
            layer.__dict__["unlinked"] = layer.__dict__.pop(fused.NEXT_NORM)
        apart.setattr(fused.GatedMLP, "_down_proj_adds", lambda self, hidden, residual: False)
        unlinked = patched(tokens).logits
        for layer in patched.model.layers:
            layer.__dict__[fused.NEXT_NORM] = layer.__dict__.pop("unlinked")
    assert torch.equal(before, unlinked)
    served = norms_served_ahead(monkeypatch)
    with torch.no_grad():
        assert torch.equal(patched(tokens).logits, before)
    # each layer's input norm (the first's computed then, the others' ahead) and the final norm; the
    # post-attention norms run inside add_rms_norm (fused.add_norm), not through their forward
    assert served == [False, True, True, True]
    with torch.inference_mode():  # no version counters: kept where nothing between can write in place
        served.clear()
        assert torch.equal(patched(tokens).logits, before) and served == [False, True, True, True]
        served.clear()
        hook = patched.model.layers[1].register_forward_hook(lambda module, args, output: None)
        assert torch.equal(patched(tokens).logits, before) and served == [False, True, False, True]
        hook.remove()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(1, 14336), (7, 8), (300, 18944 // 2), (2, 3, 1408)])
def test_silu_and_mul_is_what_the_mlp_computes(shape, dtype):
    gate_up = torch.randn(*shape[:-1], 2 * shape[-1], device="cuda", dtype=dtype) * 4
    gate, up = gate_up.chunk(2, dim=-1)
    out = poisoned(shape, dtype)
    wavetune.silu_and_mul(gate_up, out=out)
    assert torch.equal(out, torch.nn.functional.silu(gate) * up)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("batch, seq, heads_q, heads_k, head_dim, cos_batch",
                         [(1, 1, 32, 8, 128, 1), (3, 17, 28, 4, 128, 3), (2, 5, 8, 8, 64, 1), (1, 9, 4, 1, 256, 1)])
def test_rotary_embedding_is_transformers_apply_rotary_pos_emb(batch, seq, heads_q, heads_k, head_dim, cos_batch,
                                                               dtype):
    # q and k as transformers hands them over: [batch, seq, heads, dim] projections seen as [batch, heads, seq, dim]
    q = torch.randn(batch, seq, heads_q, head_dim, device="cuda", dtype=dtype).transpose(1, 2)
    k = torch.randn(batch, seq, heads_k, head_dim, device="cuda", dtype=dtype).transpose(1, 2)
    angles = torch.rand(cos_batch, seq, head_dim // 2, device="cuda") * 100
    cos, sin = (torch.cat([f(angles)] * 2, dim=-1).to(dtype) for f in (torch.cos, torch.sin))
    expected = llama.apply_rotary_pos_emb(q, k, cos, sin)
    q_before, k_before = q.clone(), k.clone()
    got = wavetune.rotary_embedding(q, k, cos, sin)
    for ours, theirs, source in zip(got, expected, (q, k)):
        assert ours.stride() == source.stride() and torch.equal(ours, theirs)
    assert torch.equal(q, q_before) and torch.equal(k, k_before)  # out of place


@pytest.mark.gpu
def test_pdl_on_and_off_give_the_same_bits_and_a_graph_replays_new_inputs():
    from wavetune import _C

    x = torch.randn(4, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    q = torch.randn(4, 1, 32, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    k = torch.randn(4, 1, 8, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    cos, sin = (torch.randn(1, 1, 128, device="cuda", dtype=torch.bfloat16) for _ in "cs")

    def step():
        h = OPS.rms_norm(x, w, 1e-6)
        return OPS.silu_and_mul(h), *OPS.rotary_embedding(q, k, cos, sin)

    before = _C.programmatic_launch()
    try:
        results = []
        for on in (True, False):
            _C.set_programmatic_launch(on)
            results.append(step())
    finally:
        _C.set_programmatic_launch(before)
    assert all(torch.equal(a, b) for a, b in zip(*results))
    graph, captured = capture_graph(step)
    x.copy_(torch.randn_like(x))
    q.copy_(torch.randn_like(q))
    graph.replay()
    assert all(torch.equal(a, b) for a, b in zip(captured, step()))


@pytest.mark.gpu
def test_merged_projections_run_one_gemm_per_layer_and_replay_in_a_graph():
    """Eager: the merged query, key and value GEMM runs once per layer and step, and the model computes what it
    does with the three projections apart (each on wavetune's GEMM); a CUDA graph captured the way PyTorch
    documents replays new tokens as eager mode computes them."""
    model = tiny("Qwen2ForCausalLM", "Qwen2Config", device="cuda", hidden_size=1024, intermediate_size=2048,
                 num_attention_heads=8, num_key_value_heads=2)
    apart, merged = copy.deepcopy(model), model
    wavetune.patch(merged, attention=False)
    wavetune.patch(apart, attention=False, layers=False)
    assert all(isinstance(layer.self_attn.k_proj, fused.ProjectionSlice) for layer in merged.model.layers)
    calls = []
    for layer in merged.model.layers:
        layer.self_attn.q_proj.merged.register_forward_hook(lambda *_: calls.append(1))
    tokens = torch.randint(0, TINY["vocab_size"], (3, 1), device="cuda")
    with torch.no_grad():
        expected, got = apart(tokens).logits.float(), merged(tokens).logits.float()
    assert len(calls) == TINY["num_hidden_layers"]  # Qwen2's projections have biases: merged with them
    assert ((got - expected).norm() / expected.norm()).item() < 2e-2
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        merged(tokens)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        captured = merged(tokens).logits
    tokens.copy_(torch.randint(0, TINY["vocab_size"], tokens.shape, device="cuda"))
    graph.replay()
    with torch.no_grad():
        assert torch.equal(captured, merged(tokens).logits)


@pytest.mark.gpu
def test_torch_compile_traces_a_patched_model_without_breaks():
    model = tiny("Qwen3ForCausalLM", "Qwen3Config", device="cuda", hidden_size=1024, intermediate_size=2048,
                 num_attention_heads=8, num_key_value_heads=2, head_dim=128)
    patched = copy.deepcopy(model)
    report = wavetune.patch(patched, attention=False)
    # per layer: 4 norms, MLP, rope, the residual addition with its norm; the final norm
    assert len(report.layers) == 2 * 7 + 1 and not report.layers_skipped
    tokens = torch.randint(0, TINY["vocab_size"], (2, 33), device="cuda")
    compiled = torch.compile(patched, fullgraph=True)
    with torch.no_grad():
        reference, eager, traced = (m(tokens).logits.float() for m in (model, patched, compiled))
    # Compiled, the layers run transformers' code through Inductor (fp32 inside its fused norms, rotary and
    # activation) against the ops' roundings in eager mode: 1.1% apart on an H200.
    assert ((traced - eager).norm() / eager.norm()).item() < 2e-2
    assert ((eager - reference).norm() / reference.norm()).item() < 2e-2


@pytest.mark.gpu
def test_torch_compile_traces_transformers_code_for_inductor_to_fuse():
    model = tiny("LlamaForCausalLM", "LlamaConfig", device="cuda", hidden_size=1024, intermediate_size=2048,
                 num_attention_heads=8, num_key_value_heads=2)
    report = wavetune.patch(model, attention=False)
    assert report.layers and not report.layers_skipped
    traced = []

    def recording_backend(gm, example_inputs):
        traced.extend(node for node in gm.graph.nodes if node.op in ("call_function", "call_method", "call_module"))
        return gm.forward

    tokens = torch.randint(0, TINY["vocab_size"], (1, 9), device="cuda")
    torch._dynamo.reset()  # a fresh trace through recording_backend, whatever other tests compiled
    with torch.no_grad():
        eager = model(tokens).logits.float()
        compiled = torch.compile(model, backend=recording_backend, fullgraph=True)(tokens).logits.float()
    targets = [str(node.target) for node in traced]
    assert not [t for t in targets if any(op in t for op in ("rms_norm", "silu_and_mul", "rotary_embedding"))]
    # As in eager mode, one GEMM per layer for the MLP's gate and up projections (2 x 2048 wide) and one for the
    # query, key and value projections (1024 + 2 x 256 wide): four a layer with the output and down projections,
    # and the LM head where patch swapped it.
    widths = [getattr(node.meta.get("example_value"), "shape", (0,))[-1] for node in traced
              if "wavetune.linear" in str(node.target)]
    assert widths.count(2 * 2048) == widths.count(1024 + 2 * 256) == TINY["num_hidden_layers"]
    assert len(widths) == 4 * TINY["num_hidden_layers"] + isinstance(model.lm_head, wavetune.nn.Linear)
    assert all(layer.self_attn.q_proj._traced is None for layer in model.model.layers)  # no tensor kept
    assert ((compiled - eager).norm() / eager.norm()).item() < 2e-2

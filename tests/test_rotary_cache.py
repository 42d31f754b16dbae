"""Rotary embedding and the static-cache write in one kernel (wavetune.rotary_cache_write, wavetune.rotary_cache).
CPU tier: input checks, the native checks, which attention forwards can hand their rotation to the cache update
(transformers' classes and forwards that read the rotated tensors first), which caches take it, the patched
update without a waiting rotation, a forward that returns with its rotation still waiting running again, and
generate() over a static cache with transformers' arithmetic standing in for the kernels (the hand-overs and the
next norms computed ahead give transformers' tokens and cache).
GPU tier: the kernel against transformers' apply_rotary_pos_emb and StaticLayer.update (bit-identical) over
batch, prompt and decode lengths and projection slices; a CUDA graph replaying decode steps; a patched model's
static-cache generation identical to the unpatched model's; a write past the cache's end failing loudly."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import wavetune  # noqa: E402
from wavetune import fused, rotary_cache  # noqa: E402
from wavetune.families.layer_ops import api  # noqa: E402
from transformers import cache_utils  # noqa: E402
from transformers.models.llama import modeling_llama as llama  # noqa: E402

from conftest import capture_graph, norms_served_ahead  # noqa: E402

ROTARY = fused.ROTARY
CONFIG = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=512)


def operands(batch=2, seq=3, heads_q=4, heads_k=2, head_dim=64, capacity=16, device="cpu", dtype=torch.bfloat16):
    q = torch.randn(batch, seq, heads_q, head_dim, device=device, dtype=dtype).transpose(1, 2)
    k, v = (torch.randn(batch, seq, heads_k, head_dim, device=device, dtype=dtype).transpose(1, 2) for _ in "kv")
    angles = torch.rand(batch, seq, head_dim // 2, device=device) * 100
    cos, sin = (torch.cat([f(angles)] * 2, dim=-1).to(dtype) for f in (torch.cos, torch.sin))
    keys, values = (torch.randn(batch, heads_k, capacity, head_dim, device=device, dtype=dtype) for _ in "kv")
    length = torch.zeros((), dtype=torch.int64, device=device)
    arrivals = torch.zeros(1, dtype=torch.int32, device=device)
    return q, k, v, cos, sin, keys, values, length, arrivals


def static_cache(capacity=32, config=None):
    return transformers.StaticCache(config=config or transformers.LlamaConfig(**CONFIG), max_cache_len=capacity)


# ---- CPU tier -------------------------------------------------------------------------------------------------

def test_bad_inputs_name_the_problem():
    q, k, v, cos, sin, keys, values, length, arrivals = operands()
    check = api.check_cache_write
    with pytest.raises(ValueError, match=r"v \(2, 2, 3, 32\) must be shaped as k"):
        check(torch, q, k, v[..., :32], cos, sin, None, keys, values, length, arrivals)
    with pytest.raises(ValueError, match=r"key_cache must be \[batch, heads_k, capacity, head_dim\]"):
        check(torch, q, k, v, cos, sin, None, keys[:, :1], values[:, :1], length, arrivals)
    with pytest.raises(ValueError, match="value_cache must be laid out as key_cache"):
        check(torch, q, k, v, cos, sin, None, keys, values.transpose(1, 2).contiguous().transpose(1, 2), length,
              arrivals)
    with pytest.raises(ValueError, match="length must be a one-element torch.int64 tensor"):
        check(torch, q, k, v, cos, sin, None, keys, values, length.int(), arrivals)
    with pytest.raises(ValueError, match="arrivals must be a one-element torch.int32 tensor"):
        check(torch, q, k, v, cos, sin, None, keys, values, length, torch.zeros(2, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"out must be a torch.bfloat16 \(2, 4, 3, 64\) tensor"):
        check(torch, q, k, v, cos, sin, q.float(), keys, values, length, arrivals)
    with pytest.raises(TypeError, match="key_cache must be torch.bfloat16"):
        check(torch, q, k, v, cos, sin, None, keys.half(), values.half(), length, arrivals)
    with pytest.raises(ValueError, match="CUDA"):
        wavetune.rotary_cache_write(q, k, v, cos, sin, keys, values, length, arrivals)
    with pytest.raises(ValueError, match="CUDA"):
        torch.ops.wavetune.rotary_cache_write(q, k, v, cos, sin, torch.empty_like(q), keys, values, length, arrivals)


def test_the_native_checks_need_no_gpu():
    from wavetune._C import cache_write_error

    heads = lambda address: (address, 3 * 4 * 64, 64, 4 * 64)  # noqa: E731  [batch, heads, seq, dim] of [b, s, h, d]
    sizes, tables = (2, 3, 4, 2, 64), (16, 16, 3 * 64, 64)

    def error(values=heads(16), cache=16, capacity=16, length=16, arrivals=16):
        cache_write = (values, cache, cache, 2 * 16 * 64, 16 * 64, 64, capacity, length, arrivals)
        return cache_write_error(sizes, heads(16), heads(16), heads(16), tables, cache_write, 0)

    assert error() == ""
    assert "capacity must be non-negative" in error(capacity=-1)
    assert "null pointer" in error(length=0)
    assert "16-byte aligned" in error(cache=8)
    assert "16-byte aligned" in error(values=(16, 3 * 4 * 64, 64, 4))
    assert "aligned to their sizes" in error(length=20)


@pytest.mark.parametrize("module, name", [("llama", "LlamaAttention"), ("qwen2", "Qwen2Attention"),
                                          ("mistral", "MistralAttention"), ("qwen3", "Qwen3Attention"),
                                          ("qwen3_moe", "Qwen3MoeAttention"), ("qwen2_moe", "Qwen2MoeAttention")])
def test_transformers_attention_forwards_hand_their_rotation_to_the_update(module, name):
    import importlib

    attention = getattr(importlib.import_module(f"transformers.models.{module}.modeling_{module}"), name)
    assert rotary_cache.cache_write_reason(attention.forward, ROTARY) is None


def _reads_query_first(self, hidden_states, position_embeddings, past_key_values=None):
    q, k = apply_rotary_pos_emb(hidden_states, hidden_states, *position_embeddings)  # noqa: F821
    scaled = q * self.scaling
    k, v = past_key_values.update(k, hidden_states, self.layer_idx)
    return scaled


def _reads_keys_first(self, hidden_states, position_embeddings, past_key_values=None):
    q, k = apply_rotary_pos_emb(hidden_states, hidden_states, *position_embeddings)  # noqa: F821
    k = k.float()
    k, v = past_key_values.update(k, hidden_states, self.layer_idx)
    return q


def _updates_another_cache(self, hidden_states, position_embeddings, cache=None):
    q, k = apply_rotary_pos_emb(hidden_states, hidden_states, *position_embeddings)  # noqa: F821
    k, v = cache.update(k, hidden_states, self.layer_idx)
    return q


def _rotates_twice(self, hidden_states, position_embeddings, past_key_values=None):
    q, k = apply_rotary_pos_emb(hidden_states, hidden_states, *position_embeddings)  # noqa: F821
    q, k = apply_rotary_pos_emb(q, k, *position_embeddings)  # noqa: F821
    k, v = past_key_values.update(k, hidden_states, self.layer_idx)
    return q


@pytest.mark.parametrize("forward, reason", [(_reads_query_first, "reads the rotated queries or keys"),
                                             (_reads_keys_first, "reads the rotated queries or keys"),
                                             (_updates_another_cache, "calls no past_key_values.update"),
                                             (_rotates_twice, "calls apply_rotary_pos_emb 2 times")])
def test_forwards_that_read_the_rotation_first_keep_it(forward, reason):
    assert reason in rotary_cache.cache_write_reason(forward, ROTARY)


def test_patch_reports_attentions_whose_rotation_stays_apart():
    model = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(
        vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=1, num_attention_heads=4))
    assert rotary_cache.cache_write_reason(type(model.gpt_neox.layers[0].attention).forward, ROTARY) is not None
    attention = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).model.layers[0].self_attn
    skipped = {}
    fused.patch_rotary(attention, "attention", skipped)
    assert attention.forward.__func__ is rotary_cache.cache_writing_forward(fused._rotary_forward(type(attention).forward))
    assert "attention.rotary_cache_write" not in skipped


def test_only_static_layers_of_a_plain_cache_take_the_rotation():
    attention = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).model.layers[1].self_attn
    cache = static_cache()
    layer = rotary_cache._static_layer(cache, attention)
    assert layer is cache.layers[1]
    assert all("update" in layer.__dict__ for layer in cache.layers)  # every layer writes through
    assert rotary_cache._static_layer(transformers.DynamicCache(), attention) is None
    assert rotary_cache._static_layer(None, attention) is None
    cache.offloading = True
    assert rotary_cache._static_layer(cache, attention) is None
    foreign = static_cache()
    foreign.layers[1].update = lambda *args, **kwargs: None  # someone else's: the rotation must not wait for it
    assert rotary_cache._static_layer(foreign, attention) is None
    sliding = static_cache(config=transformers.MistralConfig(**CONFIG, sliding_window=8))
    assert type(sliding.layers[1]) is not cache_utils.StaticLayer
    assert rotary_cache._static_layer(sliding, attention) is None


def test_a_patched_update_without_a_waiting_rotation_is_static_layer_update():
    ours, theirs = static_cache(), static_cache()
    rotary_cache._static_layer(ours, types_module(layer_idx=0))
    for seq in (5, 1, 1):
        k, v = (torch.randn(2, 2, seq, 32) for _ in "kv")
        got, expected = ours.update(k, v, 0), theirs.update(k, v, 0)
        assert all(torch.equal(a, b) for a, b in zip(got, expected))
    assert int(ours.layers[0].cumulative_length) == int(theirs.layers[0].cumulative_length) == 7


def types_module(**attributes):
    module = torch.nn.Module()
    module.__dict__.update(attributes)
    return module


def test_the_write_counter_is_never_made_inside_a_graph_capture(monkeypatch):
    layer = static_cache().layers[0]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert rotary_cache._arrivals(layer, torch.device("cuda")) is None  # its memory would be the graph's
    made = rotary_cache._arrivals(layer, torch.device("cpu"))
    assert made.dtype == torch.int32 and int(made) == 0
    assert rotary_cache._arrivals(layer, torch.device("cuda")) is made  # made before: used in captures too


def test_a_forward_returning_with_its_rotation_waiting_runs_again_unfused():
    calls = []

    def rotated(self, hidden_states, past_key_values=None):  # skips the update its bytecode promised
        waiting = rotary_cache.wait_for_update(hidden_states, hidden_states, hidden_states, hidden_states)
        calls.append(waiting is not None)
        return hidden_states * 2 if waiting is None else waiting[0]

    forward = rotary_cache.cache_writing_forward(rotated)
    x = torch.randn(1, 2, 3, 32)
    out = forward(types_module(layer_idx=0), x, past_key_values=static_cache())
    assert calls == [True, False] and torch.equal(out, x * 2)
    assert rotary_cache._WAITING.armed is None and rotary_cache._WAITING.pending is None


def transformers_norm(x, weight, eps):
    """LlamaRMSNorm's arithmetic."""
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return weight * (x.float() * torch.rsqrt(variance + eps)).to(x.dtype)


REFERENCE_KERNELS = {  # transformers' arithmetic standing in for the CUDA kernels on the CPU
    "rms_norm": transformers_norm,
    "add_rms_norm": lambda x, residual, weight, eps: (residual + x, transformers_norm(residual + x, weight, eps)),
    "rotary_embedding": llama.apply_rotary_pos_emb,
    "rotary_cache_write": lambda q, k, v, cos, sin, q_out, keys, values, length, arrivals: q_out.copy_(
        transformers_write(q, k, v, cos, sin, keys, values, length)),
}


@pytest.mark.parametrize("name, config", [("LlamaForCausalLM", "LlamaConfig"), ("Qwen3ForCausalLM", "Qwen3Config")])
def test_the_hand_overs_generate_what_transformers_does_with_reference_kernels(name, config, monkeypatch):
    """The Python side of the fusions end to end on the CPU: transformers' arithmetic stands in for the kernels, so
    the rotation handed to the static cache's update, the next norms computed ahead and the fallbacks must give
    transformers' own tokens and cache."""
    torch.manual_seed(0)
    model = getattr(transformers, name)(getattr(transformers, config)(**{**CONFIG, "num_hidden_layers": 3})).eval()
    prompt = torch.randint(0, CONFIG["vocab_size"], (2, 7))
    options = dict(max_new_tokens=6, do_sample=False, attention_mask=torch.ones_like(prompt), disable_compile=True)
    expected_cache = static_cache(config=model.config)
    expected = model.generate(prompt, past_key_values=expected_cache, **options)
    monkeypatch.setattr(fused, "device_reason", lambda module: None)
    fused.patch_layers(model)
    for op, kernel in REFERENCE_KERNELS.items():
        monkeypatch.setattr(torch.ops.wavetune, op, kernel)
    monkeypatch.setattr(fused, "rotary_takes", lambda q, k, cos, sin, unsqueeze_dim: unsqueeze_dim == 1)
    monkeypatch.setattr(fused.RMSNorm, "takes", lambda self, x: True)
    served = norms_served_ahead(monkeypatch)
    cache = static_cache(config=model.config)
    for mode in (torch.no_grad, torch.inference_mode):
        cache.reset()
        served.clear()
        with mode():
            assert torch.equal(model.generate(prompt, past_key_values=cache, **options), expected)
        assert sum(served) == 3 * options["max_new_tokens"]  # per forward: layers 2 and 3's input norms, the final
        assert all("_wavetune_arrivals" in layer.__dict__ for layer in cache.layers)  # the one kernel wrote them
        for ours, theirs in zip(cache.layers, expected_cache.layers):
            assert torch.equal(ours.keys, theirs.keys) and torch.equal(ours.values, theirs.values)
            assert int(ours.cumulative_length) == int(theirs.cumulative_length)
    dynamic = model.generate(prompt, **options)  # a dynamic cache: the rotation is not handed over
    assert torch.equal(dynamic, expected)


def test_a_patched_model_over_a_written_through_cache_traces_in_one_graph(monkeypatch):
    """torch.compile(fullgraph=True) of a decode step after an eager prefill patched the cache layers' update: the
    hand-over machinery (the forward wrapper, the layers' own update, the next norms) steps aside while tracing."""
    monkeypatch.setattr(fused, "device_reason", lambda module: None)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).eval()
    fused.patch_layers(model)
    cache = static_cache(config=model.config)
    with torch.no_grad():
        model(torch.randint(0, CONFIG["vocab_size"], (2, 7)), past_key_values=cache)
        assert all("update" in layer.__dict__ for layer in cache.layers)
        torch._dynamo.reset()
        step = torch.compile(model, backend="eager", fullgraph=True)
        assert step(torch.randint(0, CONFIG["vocab_size"], (2, 1)), past_key_values=cache).logits.shape == (2, 1, 256)
    assert int(cache.layers[0].cumulative_length) == 8
    torch._dynamo.reset()


# ---- GPU tier -------------------------------------------------------------------------------------------------

def transformers_write(q, k, v, cos, sin, keys, values, length):
    """What transformers computes: apply_rotary_pos_emb, then StaticLayer.update's writes."""
    q_rotated, k_rotated = llama.apply_rotary_pos_emb(q, k, cos, sin)
    positions = torch.arange(k.shape[2], device=k.device) + length
    keys.index_copy_(2, positions, k_rotated)
    values.index_copy_(2, positions, v)
    length.add_(k.shape[2])
    return q_rotated


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("batch, seq, heads_q, heads_k, head_dim", [(1, 1, 32, 8, 128), (3, 17, 28, 4, 128),
                                                                     (2, 5, 8, 8, 64), (1, 9, 4, 1, 256)])
def test_the_kernel_is_apply_rotary_pos_emb_then_static_layer_update(batch, seq, heads_q, heads_k, head_dim, dtype):
    q, k, v, cos, sin, keys, values, length, arrivals = operands(batch, seq, heads_q, heads_k, head_dim, 64, "cuda",
                                                                 dtype)
    theirs = [t.clone() for t in (keys, values, length)]
    for _ in range(3):  # prompt, then the cache's next positions
        out = torch.full_like(api.rotary_output(torch, q), float("nan"))
        wavetune.rotary_cache_write(q, k, v, cos, sin, keys, values, length, arrivals, out=out)
        assert torch.equal(out, transformers_write(q, k, v, cos, sin, *theirs))
    assert torch.equal(keys, theirs[0]) and torch.equal(values, theirs[1])
    assert int(length) == int(theirs[2]) == 3 * seq and int(arrivals) == 0


@pytest.mark.gpu
def test_projection_slices_go_in_without_copies_and_a_graph_replays_decode_steps():
    batch, heads_q, heads_k, head_dim, capacity = 4, 32, 8, 128, 8
    merged = torch.randn(batch, 1, (heads_q + 2 * heads_k) * head_dim, device="cuda", dtype=torch.bfloat16)
    q, k, v = (part.view(batch, 1, -1, head_dim).transpose(1, 2)
               for part in merged.split([heads_q * head_dim, heads_k * head_dim, heads_k * head_dim], dim=-1))
    cos, sin = operands(batch, 1, head_dim=head_dim, device="cuda")[3:5]
    keys, values = (torch.zeros(batch, heads_k, capacity, head_dim, device="cuda", dtype=torch.bfloat16) for _ in "kv")
    length, arrivals = torch.zeros((), dtype=torch.int64, device="cuda"), torch.zeros(1, dtype=torch.int32,
                                                                                       device="cuda")
    out = api.rotary_output(torch, q)
    graph, _ = capture_graph(lambda: torch.ops.wavetune.rotary_cache_write(q, k, v, cos, sin, out, keys, values,
                                                                           length, arrivals))
    keys.zero_(), values.zero_(), length.zero_()
    theirs = [torch.zeros_like(t) for t in (keys, values, length)]
    for _ in range(capacity):
        merged.copy_(torch.randn_like(merged))
        graph.replay()
        assert torch.equal(out, transformers_write(q, k, v, cos, sin, *theirs))
    assert torch.equal(keys, theirs[0]) and torch.equal(values, theirs[1]) and int(length) == capacity


@pytest.mark.gpu
@pytest.mark.parametrize("name, config", [("LlamaForCausalLM", "LlamaConfig"), ("Qwen3ForCausalLM", "Qwen3Config")])
def test_a_patched_model_generates_what_it_did_over_a_static_cache(name, config, monkeypatch):
    """The hand-over against the same patched model with it turned off (the plain rotary kernel, then transformers'
    update; every other kernel the same): the same tokens, keys and values."""
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = getattr(transformers, name)(getattr(transformers, config)(**CONFIG)).to(torch.bfloat16).eval()
    prompt = torch.randint(0, CONFIG["vocab_size"], (2, 9), device="cuda")
    options = dict(max_new_tokens=12, do_sample=False, attention_mask=torch.ones_like(prompt), disable_compile=True)
    report = wavetune.patch(model, decode_graphs=False)
    assert not any(key.endswith("rotary_cache_write") for key in report.layers_skipped)
    caches = [static_cache(config=model.config) for _ in range(2)]
    with monkeypatch.context() as off:
        off.setattr(rotary_cache, "_static_layer", lambda cache, module: None)
        expected = model.generate(prompt, past_key_values=caches[0], **options)
    assert not any("_wavetune_arrivals" in layer.__dict__ for layer in caches[0].layers)
    assert torch.equal(model.generate(prompt, past_key_values=caches[1], **options), expected)
    assert all("_wavetune_arrivals" in layer.__dict__ for layer in caches[1].layers)  # written by the one kernel
    for plain, handed_over in zip(*(cache.layers for cache in caches)):
        assert torch.equal(plain.keys, handed_over.keys) and torch.equal(plain.values, handed_over.values)


@pytest.mark.gpu
def test_a_write_past_the_cache_end_fails_loudly():
    code = """
import torch, wavetune
q = torch.randn(1, 4, 2, 64, device="cuda", dtype=torch.bfloat16)
k = torch.randn(1, 2, 2, 64, device="cuda", dtype=torch.bfloat16)
cos = torch.randn(1, 2, 64, device="cuda", dtype=torch.bfloat16)
keys = torch.zeros(1, 2, 3, 64, device="cuda", dtype=torch.bfloat16)
length = torch.full((), 2, dtype=torch.int64, device="cuda")
wavetune.rotary_cache_write(q, k, k, cos, cos, keys, keys.clone(), length, torch.zeros(1, dtype=torch.int32, device="cuda"))
torch.cuda.synchronize()
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "device-side assert" in result.stderr
    # the assert's own line, or the count printed beside it (whichever thread gets there first)
    assert any(text in result.stdout + result.stderr for text in ("within the cache's capacity", "overflow the cache"))

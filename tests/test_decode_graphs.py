"""A patched transformers model's decode steps from CUDA graphs (wavetune.decode_graphs). CPU tier: which calls a
graph would replay and which run eagerly (the GPU check mocked), the graph keys and cache signatures, the replay's
copies in and out with a stand-in graph, and install/remove on a real model. GPU tier: greedy generate() with a
static cache gives the same tokens with graphs on and off (Llama and Qwen3-MoE), a second batch size captures a
second graph, a dynamic cache runs eagerly."""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import wavetune  # noqa: E402
from wavetune import decode_graphs  # noqa: E402

COMMON = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=512)


def llama(**overrides):
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**COMMON, **overrides})).eval()


def filled_cache(model, batch=2, max_cache_len=32, prompt=5):
    cache = transformers.StaticCache(config=model.config, max_cache_len=max_cache_len)
    with torch.no_grad():
        model(torch.randint(0, 256, (batch, prompt)), past_key_values=cache, use_cache=True)
    return cache


def decode_kwargs(cache, batch=2, **extra):
    return dict(input_ids=torch.randint(0, 256, (batch, 1)), position_ids=torch.full((batch, 1), 5),
                past_key_values=cache, logits_to_keep=1, use_cache=True, return_dict=True, **extra)


@pytest.fixture
def on_gpu(monkeypatch):
    """CPU tensors pass for GPU tensors: the decision logic without a GPU."""
    monkeypatch.setattr(decode_graphs, "on_gpu", lambda tensor: True)
    monkeypatch.setattr(decode_graphs, "capturing", lambda: False)


def test_a_decode_step_over_a_filled_static_cache_is_captured(on_gpu):
    model = llama()
    cache = filled_cache(model)
    lengths = torch.full((2, 1, 1, 1), 6, dtype=torch.int32)  # wavetune's key-count mask
    with torch.no_grad():
        assert decode_graphs.step_reason((), decode_kwargs(cache)) is None
        assert decode_graphs.step_reason((), decode_kwargs(cache, attention_mask=lengths)) is None


def test_what_runs_eagerly(on_gpu):
    model = llama()
    cache = filled_cache(model)
    kwargs = decode_kwargs(cache)
    with torch.no_grad():
        reason = decode_graphs.step_reason
        assert "prefill" in reason((), {**kwargs, "input_ids": torch.zeros(2, 3, dtype=torch.long)})
        assert "DynamicCache" in reason((), {**kwargs, "past_key_values": transformers.DynamicCache()})
        assert "empty cache" in reason((), {**kwargs, "past_key_values": transformers.StaticCache(
            config=model.config, max_cache_len=32)})
        padding = torch.ones(2, 1, 1, 32, dtype=torch.bool)
        assert "attention mask" in reason((), {**kwargs, "attention_mask": padding})
        assert "positional" in reason((kwargs["input_ids"],), {})
        assert "use_cache" in reason((), {**kwargs, "use_cache": False})
        assert "of type object" in reason((), {**kwargs, "extra": object()})
        sliding = transformers.MistralForCausalLM(transformers.MistralConfig(**COMMON, sliding_window=4)).eval()
        assert "sliding" in reason((), {**kwargs, "past_key_values": filled_cache(sliding)})
    assert "gradients" in reason((), kwargs)  # outside no_grad


def test_cpu_tensors_run_eagerly():
    model = llama()
    with torch.no_grad():
        assert "cpu" in decode_graphs.step_reason((), decode_kwargs(filled_cache(model)))


def test_graphs_are_keyed_by_shapes_and_bound_to_one_cache():
    model = llama()
    cache = filled_cache(model)
    key = decode_graphs.graph_key
    assert key(decode_kwargs(cache)) == key(decode_kwargs(cache))  # new values, same shapes: one graph
    assert key(decode_kwargs(cache)) != key(decode_kwargs(cache, batch=3))  # a batch size of its own
    assert key(decode_kwargs(cache)) != key({**decode_kwargs(cache), "logits_to_keep": 0})
    signature = decode_graphs.cache_signature
    assert signature(cache) == signature(cache)
    assert signature(cache) != signature(filled_cache(model))  # another cache object and buffers
    assert signature(cache) != signature(filled_cache(model, max_cache_len=48))


class StandInGraph:
    """A captured graph's stand-in: replay doubles the token buffer into the output buffer."""

    def __init__(self, buffers, output):
        self.buffers, self.output, self.replays = buffers, output, 0

    def replay(self):
        self.replays += 1
        self.output["logits"].copy_(self.buffers["input_ids"] * 2)


def test_replay_copies_the_arguments_in_and_the_output_out(on_gpu, monkeypatch):
    model = llama()
    cache = filled_cache(model)
    runner = decode_graphs.DecodeGraphs(model.forward)
    captured = []

    def capture(key, kwargs):  # the stand-in for capture: buffers and a graph over them
        buffers = {name: value.clone() for name, value in kwargs.items() if isinstance(value, torch.Tensor)}
        output = {"logits": torch.zeros(2, 1, dtype=torch.long)}
        runner.graphs[key] = (StandInGraph(buffers, output), buffers, output)
        captured.append(key)
        return "eager"

    monkeypatch.setattr(runner, "capture", capture)
    with torch.no_grad():
        assert runner(**decode_kwargs(cache)) == "eager"
        step = decode_kwargs(cache)
        first = runner(**step)
        second = runner(**decode_kwargs(cache))
        assert torch.equal(first["logits"], step["input_ids"] * 2)  # the output of its own step, copied out
        assert first["logits"] is not second["logits"]
        assert len(captured) == 1 and runner.graphs[captured[0]][0].replays == 2
        runner(**decode_kwargs(filled_cache(model)))  # another cache: the graphs go, capture again
        assert len(captured) == 2 and len(runner.graphs) == 1
        runner(**decode_kwargs(filled_cache(model, batch=3), batch=3))  # a batch size of its own
        assert len(captured) == 3 and captured[2] != captured[1]


def test_a_stored_output_holds_no_cache_and_a_replayed_one_the_callers():
    from transformers.modeling_outputs import CausalLMOutputWithPast

    old, new, logits = object(), object(), torch.ones(2, 1, 8)
    stored = decode_graphs.outputs_like(CausalLMOutputWithPast(logits=logits, past_key_values=old), old,
                                        decode_graphs.CACHE, copy_tensors=False)
    assert stored.past_key_values is decode_graphs.CACHE and stored.logits is logits
    replayed = decode_graphs.outputs_like(stored, decode_graphs.CACHE, new, copy_tensors=True)
    assert type(replayed) is CausalLMOutputWithPast and replayed.past_key_values is new
    assert torch.equal(replayed.logits, logits) and replayed.logits.data_ptr() != logits.data_ptr()
    assert decode_graphs.outputs_like((logits, old), old, new, copy_tensors=False)[1] is new  # return_dict=False


def test_a_failed_capture_is_remembered_and_the_step_runs_eagerly(on_gpu):
    model = llama()
    cache = filled_cache(model)
    runner = decode_graphs.DecodeGraphs(lambda **kwargs: "eager")
    kwargs = decode_kwargs(cache)
    runner.graphs[decode_graphs.graph_key(kwargs)] = "capture failed: an operation graphs cannot hold"
    runner.cache = decode_graphs.cache_signature(cache)
    with torch.no_grad():
        assert runner(**kwargs) == "eager"


def test_a_capture_takes_a_new_pool_once_no_graph_holds_the_last_one(monkeypatch):
    handles = iter(range(10))
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: next(handles))
    runner = decode_graphs.DecodeGraphs(lambda **kwargs: "eager")
    assert runner.capture_pool() == 0
    runner.graphs["failed"] = "capture failed: an operation graphs cannot hold"
    assert runner.capture_pool() == 1  # a failed capture holds no pool
    runner.graphs["captured"] = (object(), {}, None)
    assert runner.capture_pool() == 1 and runner.capture_pool() == 1  # the captured graphs share theirs
    runner.reset()  # their pool is released with them: reusing its handle fails PyTorch's allocator
    assert runner.capture_pool() == 2


def test_install_keeps_the_signature_and_replaces_the_automatic_compile():
    model = llama()
    prompt = torch.randint(0, 256, (1, 6))
    options = dict(max_new_tokens=4, do_sample=False, cache_implementation="static",
                   attention_mask=torch.ones_like(prompt))
    expected = model.generate(prompt, **options)
    assert decode_graphs.install(model) and decode_graphs.install(model)  # twice: one wrapper
    assert "input_ids" in inspect.signature(model.forward).parameters and "logits_to_keep" in inspect.signature(
        model.forward).parameters
    assert model.get_compiled_call(None) == model.__call__
    assert torch.equal(model.generate(prompt, **options), expected)  # CPU tensors: every step eager
    assert decode_graphs.installed(model).captures == 0
    assert decode_graphs.remove(model) and not decode_graphs.remove(model)
    assert "forward" not in model.__dict__ and "get_compiled_call" not in model.__dict__


def test_a_deep_copy_runs_itself_with_graphs_of_its_own():
    import copy

    model = llama()
    decode_graphs.install(model)
    twin = copy.deepcopy(model)
    assert twin.forward.__self__ is twin and decode_graphs.installed(twin).forward.__self__ is twin
    assert decode_graphs.installed(twin) is not decode_graphs.installed(model)
    assert twin.get_compiled_call(None) == twin.__call__
    with torch.no_grad():
        twin.model.embed_tokens.weight.zero_()
        tokens = torch.randint(0, 256, (1, 4))
        assert not torch.equal(twin(input_ids=tokens).logits, model(input_ids=tokens).logits)


def test_remove_puts_back_a_forward_the_instance_had():
    model = llama()
    hook = model.forward
    model.forward = hook  # as accelerate's hooks set one
    decode_graphs.install(model)
    assert model.forward is not hook
    decode_graphs.remove(model)
    assert model.__dict__["forward"] is hook


def test_patch_installs_on_gpu_models_only_and_unpatch_removes():
    model = llama().to(torch.bfloat16)
    assert not wavetune.patch(model, decode_graphs=True).decode_graphs  # a CPU model: nothing to capture
    assert decode_graphs.installed(model) is None
    assert "decode_graphs" not in wavetune.unpatch(model)


# GPU tier ------------------------------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def grouped_kernels_whatever_the_build(request, monkeypatch):
    """As in test_hf.py: the GPU tests' experts run wavetune's grouped kernels whatever variants the build has."""
    if "gpu" in request.keywords:
        from wavetune import hf

        monkeypatch.setattr(hf, "grouped_variants_pending", lambda device, dtype: 0)


def gpu_model(name: str, **overrides):
    from test_hf import bf16_pair

    return bf16_pair(name, decode_graphs=True, num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                     **overrides)[1]


def generate(model, batch: int, cache: str = "static", new_tokens: int = 16, **options):
    """Greedy tokens and logits; without graphs, ``disable_compile=True`` keeps the steps eager (transformers
    would otherwise compile a static cache's steps)."""
    torch.manual_seed(1)
    prompt = torch.randint(0, COMMON["vocab_size"], (batch, 12), device="cuda")
    with torch.no_grad():
        return model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                              cache_implementation=cache, attention_mask=torch.ones_like(prompt),
                              output_logits=True, return_dict_in_generate=True, **options)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["LlamaForCausalLM", "Qwen3MoeForCausalLM"])
def test_static_cache_generate_gives_the_same_tokens_and_logits_from_graphs(name):
    model = gpu_model(name)
    with_graphs = generate(model, batch=1)  # transformers would compile these steps: the graphs run instead
    runner = decode_graphs.installed(model)
    assert runner.captures == 1, runner.graphs  # one capture, every later step replayed
    assert all(not isinstance(entry, str) for entry in runner.graphs.values()), runner.graphs
    assert "_compiled_call" not in model.__dict__
    assert torch.equal(generate(model, batch=1, disable_compile=True).sequences, with_graphs.sequences)
    assert runner.captures == 2  # a new cache: captured again
    decode_graphs.remove(model)
    eager = generate(model, batch=1, disable_compile=True)
    assert torch.equal(with_graphs.sequences, eager.sequences)
    for step, (got, want) in enumerate(zip(with_graphs.logits, eager.logits)):
        assert torch.equal(got, want), f"step {step}: the replayed logits differ from the eager step's"


@pytest.mark.gpu
def test_a_second_batch_size_captures_a_second_graph_and_a_dynamic_cache_runs_eagerly():
    model = gpu_model("LlamaForCausalLM")
    runner = decode_graphs.installed(model)
    generate(model, batch=1)
    first = set(runner.graphs)
    two = generate(model, batch=2)
    assert runner.captures == 2 and set(runner.graphs) != first
    (key,) = runner.graphs
    assert dict(key[1:])["input_ids"][0] == (2, 1)
    generate(model, batch=2, cache="dynamic")
    assert runner.captures == 2  # the dynamic cache's steps ran eagerly
    decode_graphs.remove(model)
    assert torch.equal(generate(model, batch=2, disable_compile=True).sequences, two.sequences)


@pytest.mark.gpu
def test_a_padded_batch_runs_eagerly():
    model = gpu_model("LlamaForCausalLM")
    prompt = torch.randint(0, COMMON["vocab_size"], (2, 12), device="cuda")
    mask = torch.ones_like(prompt)
    mask[0, :4] = 0
    with torch.no_grad():
        model.generate(prompt, max_new_tokens=4, do_sample=False, cache_implementation="static", attention_mask=mask)
    assert decode_graphs.installed(model).captures == 0

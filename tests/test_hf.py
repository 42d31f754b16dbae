"""wavetune.patch on Hugging Face transformers model classes (wavetune.hf): three dense and three
mixture-of-experts classes from tiny configs with random weights. CPU tier: what patch switches and
reports, that every call falls back where the kernels do not apply (CPU tensors: logits unchanged), and
unpatch. GPU tier: logits against the unpatched model and greedy generation, in bf16."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if not hasattr(transformers.integrations, "moe") or not hasattr(transformers.integrations.moe, "ExpertsInterface"):
    pytest.skip(f"transformers {transformers.__version__} has no experts registry (wavetune[hf] pins 5.17)",
                allow_module_level=True)

import wavetune  # noqa: E402
from wavetune import hf  # noqa: E402
from wavetune.hf_models import MODELS  # noqa: E402

COMMON = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=512)
MOE = dict(num_local_experts=8, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
           shared_expert_intermediate_size=64, decoder_sparse_step=1, mlp_only_layers=[])
CLASSES = {
    "LlamaForCausalLM": ("LlamaConfig", {}),
    "Qwen2ForCausalLM": ("Qwen2Config", {}),
    "MistralForCausalLM": ("MistralConfig", {"sliding_window": None}),
    "MixtralForCausalLM": ("MixtralConfig", MOE),
    "Qwen3MoeForCausalLM": ("Qwen3MoeConfig", MOE),
    "Qwen2MoeForCausalLM": ("Qwen2MoeConfig", MOE),
}
MOE_CLASSES = {"MixtralForCausalLM", "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM"}


@pytest.fixture(autouse=True)
def grouped_kernels_whatever_the_build(request, monkeypatch):
    """GPU tests run the experts on wavetune's grouped kernels even where the build lacks the variants the
    GPU's grouped table chooses from (the experts then wait for them: tested on its own below)."""
    if "gpu" in request.keywords and "grouped_variants_pending" not in request.node.name:
        monkeypatch.setattr(hf, "grouped_variants_pending", lambda device, dtype: 0)


def build(name: str, device="cpu", dtype=torch.float32, **overrides) -> torch.nn.Module:
    config_name, extra = CLASSES[name]
    config = getattr(transformers, config_name)(**{**COMMON, **extra, **overrides})
    torch.manual_seed(0)
    with torch.device(device):
        model = getattr(transformers, name)(config).to(dtype).eval()
    if name in MOE_CLASSES:
        model.set_experts_implementation("grouped_mm")  # transformers' capturable default for serving
    return model


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_patch_switches_and_reports_and_a_cpu_model_runs_as_before(name):
    model = build(name, dtype=torch.bfloat16)
    tokens = torch.randint(0, COMMON["vocab_size"], (2, 9))
    with torch.no_grad():
        before = model(tokens).logits
    report = wavetune.patch(model)
    expected = {"attention": "sdpa", **({"experts": "grouped_mm"} if name in MOE_CLASSES else {})}
    assert report.switched == expected
    assert model.config._attn_implementation == hf.IMPLEMENTATION
    # Every layer stays on the CPU; Qwen2-MoE's one-output shared-expert gates also have a width wavetune
    # does not run.
    assert report.skipped and not report.patched
    assert all("on cpu" in reason or "multiples of 8" in reason for reason in report.skipped.values())
    assert "attention: sdpa -> wavetune" in str(report)
    with torch.no_grad():
        after = model(tokens).logits
    assert torch.equal(after, before)  # every call fell back: CPU tensors
    assert wavetune.patch(model).switched == expected  # patching twice keeps the first record
    restored = wavetune.unpatch(model)
    assert restored == list(expected)
    assert model.config._attn_implementation == "sdpa"
    if name in MOE_CLASSES:
        assert model.config._experts_implementation == "grouped_mm"
    assert not hasattr(model.config, hf.PREVIOUS)


def test_patch_switches_only_what_it_is_asked_to():
    model = build("Qwen3MoeForCausalLM", dtype=torch.bfloat16)
    assert wavetune.patch(model, attention=False).switched == {"experts": "grouped_mm"}
    assert model.config._attn_implementation == "sdpa" and model.config._experts_implementation == hf.IMPLEMENTATION
    assert wavetune.patch(model, experts=False).switched == {"experts": "grouped_mm", "attention": "sdpa"}
    assert wavetune.unpatch(model)[-2:] == ["experts", "attention"]
    assert (model.config._attn_implementation, model.config._experts_implementation) == ("sdpa", "grouped_mm")
    assert wavetune.patch(build("LlamaForCausalLM"), attention=False, experts=False).switched == {}


def test_why_a_call_falls_back():
    model = build("MixtralForCausalLM")
    experts = next(m for m in model.modules() if hasattr(m, "gate_up_proj"))
    attention = model.model.layers[0].self_attn
    x = torch.zeros(3, COMMON["hidden_size"])
    q = torch.zeros(1, 4, 5, 32)
    assert "cpu" in hf.experts_fallback_reason(experts, x)
    assert "cpu" in hf.attention_fallback_reason(attention, q, None, 0.0)
    meta = torch.zeros(1, 4, 5, 32, device="meta", dtype=torch.bfloat16)
    assert "meta" in hf.attention_fallback_reason(attention, meta, None, 0.0)


def test_experts_wait_for_the_variants_their_table_chooses(monkeypatch):
    """Until the variants the GPU's grouped table names for a dtype are compiled, the experts keep the model's
    own implementation (a build without them runs the table's choices on whatever variant it has); variants
    added at run time end the wait."""
    from types import SimpleNamespace

    from wavetune.runtime import jit, tables

    missing = [SimpleNamespace(dtype="bf16"), SimpleNamespace(dtype="bf16"), SimpleNamespace(dtype="fp16")]
    monkeypatch.setattr(tables, "ensure_table", lambda device, family: None)
    monkeypatch.setattr(tables, "loaded_table", lambda device, family: "grouped.wtt" if device == 0 else None)
    monkeypatch.setattr(jit, "working_set", lambda path, family: missing)
    hf._grouped_variants_pending.cache_clear()
    assert hf.grouped_variants_pending(0, torch.bfloat16) == 2
    assert hf.grouped_variants_pending(0, torch.float16) == 1
    assert hf.grouped_variants_pending(1, torch.bfloat16) == 0  # no table: nothing to wait for
    missing.clear()
    assert hf.grouped_variants_pending(0, torch.bfloat16) == 2  # remembered until variants are added
    tables.variants_added("grouped_gemm")
    assert hf.grouped_variants_pending(0, torch.bfloat16) == 0
    hf._grouped_variants_pending.cache_clear()


def test_torch_compile_runs_the_host_checks_once_instead_of_tracing_them(monkeypatch, tmp_path):
    """The experts' and the attention's checks of the build and the tables read files and the native library,
    which torch.compile cannot trace: it runs them once as it traces, and the model's graph has no break."""
    from types import SimpleNamespace

    from wavetune.runtime import jit, tables

    table, reads = tmp_path / "grouped.wtt", []
    table.write_text("bf16")
    monkeypatch.setattr(tables, "ensure_table", lambda device, family: None)
    monkeypatch.setattr(tables, "loaded_table", lambda device, family: str(table))
    monkeypatch.setattr(jit, "working_set", lambda path, family: reads.append(path) or
                        [SimpleNamespace(dtype=open(path).read())])
    hf._grouped_variants_pending.cache_clear()

    def step(x):  # the arguments as experts_fallback_reason and attention_fallback_reason pass them
        pending = hf.grouped_variants_pending(x.device.index, x.dtype)
        compiled = hf.head_dim_compiled(x.shape[-1], x.dtype)
        return x * pending + compiled

    traced = torch.compile(step, fullgraph=True, backend="eager")  # a graph break raises
    expected = 1 + (128 in hf.compiled_head_dims(torch.bfloat16))
    assert traced(torch.ones(2, 128, dtype=torch.bfloat16)).tolist() == [[expected] * 128] * 2
    assert len(reads) == 1
    hf._grouped_variants_pending.cache_clear()


@pytest.mark.parametrize("name", ["LlamaForCausalLM", "Qwen3MoeForCausalLM"])
def test_torch_compile_traces_the_fallbacks_without_a_graph_break(name):
    """Where wavetune's attention and experts do not apply (here: CPU tensors), the previous implementations
    they hand the call to trace into one graph too."""
    model = build(name)
    tokens = torch.randint(0, COMMON["vocab_size"], (2, 9))
    with torch.no_grad():
        before = model(tokens).logits
        wavetune.patch(model)
        traced = torch.compile(model, fullgraph=True, backend="eager")(tokens).logits  # a graph break raises
    torch.testing.assert_close(traced, before)


@pytest.mark.gpu
def test_grouped_variants_pending_counts_what_the_build_lacks():
    """On the GPU, with this build and the shipped table: the bf16 variants the grouped table names that are
    not compiled, and the experts' fallback reason says so exactly when there are some."""
    from pathlib import Path

    from wavetune.codegen.config_space import table_file_variant_names
    from wavetune.runtime import tables

    device = torch.cuda.current_device()
    pending = hf.grouped_variants_pending(device, torch.bfloat16)
    path = tables.loaded_table(device, "grouped_gemm")
    if path is None:
        assert pending == 0
        pytest.skip("no grouped table for this GPU")
    named = {n for n in table_file_variant_names(Path(path)) if n.startswith("grouped_bf16_")}
    assert pending == len(named - {c.name for c in wavetune.grouped_configs()})
    experts = next(m for m in build("MixtralForCausalLM", device="cuda", dtype=torch.bfloat16).modules()
                   if hasattr(m, "gate_up_proj"))
    reason = hf.experts_fallback_reason(experts, torch.zeros(3, COMMON["hidden_size"], device="cuda",
                                                             dtype=torch.bfloat16))
    assert (reason is not None and "not compiled yet" in reason) == (pending > 0), reason


def reference_grouped_gemm(x, w, offsets, batch_invariance=None):
    """wavetune.grouped_gemm's contract on the CPU: rows of expert e times w[e].T (one order at any level)."""
    out, start = torch.zeros(x.shape[0], w.shape[1], dtype=x.dtype), 0
    for e, end in enumerate(offsets.tolist()):
        out[start:end] = x[start:end] @ w[e].t()
        start = end
    return out


def reference_attention(q, k, v, causal, scale, batch_invariance=None):
    """wavetune.attention's contract ([batch, tokens, heads, dim], bottom-right causal) on the CPU."""
    q, k, v = (t.transpose(1, 2).float() for t in (q, k, v))
    k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    scores = q @ k.transpose(-1, -2) * scale
    if causal:
        rows, cols = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(rows, cols).tril(cols - rows) == 0, float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2).to(q.dtype)


@pytest.mark.parametrize("name", ["MixtralForCausalLM", "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM"])
def test_the_wavetune_paths_compute_what_the_model_does(name, monkeypatch):
    """The experts' sorting, gating and routing weights and the attention's layouts, masks and cache
    handling, with the kernels replaced by their contracts on the CPU (the GPU tier runs the kernels)."""
    model = build(name)
    tokens = torch.randint(0, COMMON["vocab_size"], (2, 11))
    with torch.no_grad():
        before = model(tokens).logits
        cached = model.generate(tokens[:1], max_new_tokens=6, do_sample=False)
    wavetune.patch(model)
    monkeypatch.setattr(hf, "run_grouped_gemm", reference_grouped_gemm)
    monkeypatch.setattr(hf, "run_attention", reference_attention)
    monkeypatch.setattr(hf, "experts_fallback_reason", lambda *args: None)
    monkeypatch.setattr(hf, "attention_fallback_reason", lambda module, q, mask, *args, **kwargs:
                        None if mask is None else "a mask")
    with torch.no_grad():
        after = model(tokens).logits
        generated = model.generate(tokens[:1], max_new_tokens=6, do_sample=False)
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)
    assert torch.equal(generated, cached)  # prefill, then decode steps over a dynamic cache


def test_routed_experts_runs_the_routing_kernels_only_where_they_apply(monkeypatch):
    """The routing kernels take bf16 or fp16 rows on the GPU; anything else (the fp32 references of the GPU
    tests) routes in PyTorch operations."""
    from types import SimpleNamespace

    calls = []
    monkeypatch.setattr(hf, "fused_routed_experts", lambda *args: calls.append("kernels"))
    monkeypatch.setattr(hf, "torch_routed_experts", lambda *args: calls.append("torch"))
    experts, index = SimpleNamespace(num_experts=8), torch.zeros(3, 2, dtype=torch.int64)
    for is_cuda, dtype in [(True, torch.bfloat16), (True, torch.float16), (True, torch.float32),
                           (False, torch.bfloat16)]:
        hf.routed_experts(experts, SimpleNamespace(is_cuda=is_cuda, dtype=dtype), index, None, None)
    hf.routed_experts(SimpleNamespace(num_experts=hf.MOE_MAX_EXPERTS + 1), SimpleNamespace(is_cuda=True,
                      dtype=torch.bfloat16), index, None, None)
    assert calls == ["kernels", "kernels", "torch", "torch", "torch"]


def test_experts_drop_the_pairs_routed_past_the_experts(monkeypatch):
    """Expert parallelism marks the pairs another rank serves with an id past this rank's experts: they add
    nothing, as in transformers' own grouped_mm path (the grouped GEMM leaves their rows unwritten)."""
    from transformers.integrations.moe import grouped_mm_experts_forward

    def unwritten_past_the_offsets(x, w, offsets, batch_invariance=None):
        out = reference_grouped_gemm(x, w, offsets)
        out[int(offsets[-1]):] = float("nan")
        return out

    monkeypatch.setattr(hf, "run_grouped_gemm", unwritten_past_the_offsets)
    monkeypatch.setattr(hf, "experts_fallback_reason", lambda *args: None)
    experts = next(m for m in build("MixtralForCausalLM").modules() if hasattr(m, "gate_up_proj"))
    x = torch.randn(5, COMMON["hidden_size"])
    index = torch.tensor([[0, 3], [8, 1], [2, 8], [7, 7], [5, 0]])  # 8: another rank's expert
    weights = torch.rand(5, 2)
    expected = grouped_mm_experts_forward(experts, x, index, weights)
    torch.testing.assert_close(hf.experts_forward(experts, x, index, weights), expected, rtol=1e-5, atol=1e-5)


def test_a_meta_model_gets_its_linear_layers_patched():
    model = build("Qwen3MoeForCausalLM", device="meta", dtype=torch.bfloat16)
    report = wavetune.patch(model)
    assert "lm_head" in report.patched and any(".self_attn.q_proj" in name for name in report.patched)
    assert report.switched == {"attention": "sdpa", "experts": "grouped_mm"}


def bf16_pair(name: str, decode_graphs: bool = False, **overrides):
    """The model in bf16 on the GPU, and a patched copy of it."""
    import copy

    model = build(name, device="cuda", dtype=torch.bfloat16, **overrides)
    patched = copy.deepcopy(model)
    report = wavetune.patch(patched, decode_graphs=decode_graphs)
    assert report.patched and all("multiples of 8" in reason for reason in report.skipped.values()), report
    return model, patched


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CLASSES))
def test_logits_match_the_unpatched_model(name):
    # Head dim 128: the one every kernel set compiles (a filtered set may leave it out).
    if not hf.head_dim_compiled(128, torch.bfloat16):
        pytest.skip("no bf16 attention variant for head dim 128 in this build")
    model, patched = bf16_pair(name, hidden_size=1024, intermediate_size=1024, num_attention_heads=8,
                               num_key_value_heads=2, moe_intermediate_size=256, head_dim=128)
    tokens = torch.randint(0, COMMON["vocab_size"], (2, 37), device="cuda")
    attention = patched.model.layers[0].self_attn
    q = torch.empty(2, 8, 37, 128, device="cuda", dtype=torch.bfloat16)
    assert hf.attention_fallback_reason(attention, q, None, 0.0) is None
    with torch.no_grad():
        reference, logits = model(tokens).logits.float(), patched(tokens).logits.float()
    # bf16 tolerance: both round every GEMM and attention output to bf16 (different kernels, different sums).
    error = ((logits - reference).norm() / reference.norm()).item()
    assert error < 2e-2, error


@pytest.mark.gpu
def test_torch_compile_traces_a_patched_moe_model_whole():
    """A mixture-of-experts class with wavetune's attention, experts and layer ops compiles as one graph."""
    model, patched = bf16_pair("Qwen3MoeForCausalLM", hidden_size=1024, intermediate_size=1024,
                               num_attention_heads=8, num_key_value_heads=2, moe_intermediate_size=256, head_dim=128)
    tokens = torch.randint(0, COMMON["vocab_size"], (2, 37), device="cuda")
    compiled = torch.compile(patched, fullgraph=True)  # a graph break raises
    with torch.no_grad():
        reference, traced = model(tokens).logits.float(), compiled(tokens).logits.float()
    assert ((traced - reference).norm() / reference.norm()).item() < 2e-2


@pytest.mark.gpu
@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("name", ["LlamaForCausalLM", "Qwen3MoeForCausalLM"])
def test_greedy_generation_follows_the_unpatched_model(name, cache):
    model, patched = bf16_pair(name, num_attention_heads=2, num_key_value_heads=1, head_dim=128)
    prompt = torch.randint(0, COMMON["vocab_size"], (1, 16), device="cuda")
    options = dict(max_new_tokens=32, do_sample=False, min_new_tokens=32, cache_implementation=cache,
                   attention_mask=torch.ones_like(prompt))
    with torch.no_grad():
        expected = model.generate(prompt, **options, output_logits=True, return_dict_in_generate=True)
        generated = patched.generate(prompt, **options)
    # Random weights make near-ties likely, and a tie broken the other way changes every later token. The
    # first 8 new tokens must agree, and where the two part, the unpatched model's logits for its token and
    # for the patched model's must be within bf16 rounding of each other (2% of the largest logit).
    new_expected, new_generated = expected.sequences[0, 16:], generated[0, 16:]
    assert torch.equal(new_expected[:8], new_generated[:8])
    differ = (new_expected != new_generated).nonzero()
    if len(differ):
        first = differ[0].item()
        logits = expected.logits[first][0].float()
        gap = (logits[new_expected[first]] - logits[new_generated[first]]).item()
        assert gap <= 2e-2 * logits.abs().max().item(), f"token {first}: the unpatched model led by {gap}"


def reference_paged_attention(q, k_cache, v_cache, block_table, seq_lens, max_seq_len, scale, batch_invariance=None):
    """wavetune.paged_attention's contract for one query per sequence over a dense cache, on the CPU: query b
    sees the first seq_lens[b] keys of its sequence."""
    assert block_table is None and max_seq_len == k_cache.shape[1]
    out = torch.empty_like(q)
    for b, n in enumerate(seq_lens.tolist()):
        k, v = (t[b, :n].transpose(0, 1).float() for t in (k_cache, v_cache))  # [heads_kv, n, dim]
        k, v = (t.repeat_interleave(q.shape[1] // t.shape[0], dim=0) for t in (k, v))
        weights = (q[b].float().unsqueeze(1) @ k.transpose(-1, -2) * scale).softmax(-1)
        out[b] = (weights @ v).squeeze(1).to(q.dtype)
    return out


@pytest.mark.parametrize("name", ["LlamaForCausalLM", "Qwen3MoeForCausalLM"])
def test_static_cache_decode_reads_the_filled_slots(name, monkeypatch):
    """generate() over a static cache: each decode step's mask is the keys each sequence holds, counted on the
    GPU by the cache (no host value), and the step runs paged attention on the cache's own buffers; a padded
    batch gets SDPA's mask and falls back. The kernels are replaced by their contracts on the CPU."""
    model = build(name)
    tokens = torch.randint(0, COMMON["vocab_size"], (2, 11))
    padding = torch.ones_like(tokens)
    padding[1, :3] = 0  # the second prompt left-padded
    options = dict(max_new_tokens=6, do_sample=False, cache_implementation="static", pad_token_id=0)
    with torch.no_grad():
        expected = model.generate(tokens, attention_mask=torch.ones_like(tokens), **options)
        expected_padded = model.generate(tokens, attention_mask=padding, **options)
    wavetune.patch(model)
    paged = []
    monkeypatch.setattr(hf, "run_attention", reference_attention)
    monkeypatch.setattr(hf, "run_paged_attention", lambda *args, **kwargs: paged.append(args[4].clone())
                        or reference_paged_attention(*args, **kwargs))
    monkeypatch.setattr(hf, "experts_fallback_reason", lambda *args: None)
    monkeypatch.setattr(hf, "run_grouped_gemm", reference_grouped_gemm)
    monkeypatch.setattr(hf, "attention_fallback_reason", lambda module, q, mask, *args, **kwargs:
                        None if mask is None or hf.key_lengths(mask) is not None else "a mask")
    with torch.no_grad():
        generated = model.generate(tokens, attention_mask=torch.ones_like(tokens), **options)
        steps = len(paged)
        generated_padded = model.generate(tokens, attention_mask=padding, **options)
    assert torch.equal(generated, expected)
    layers = COMMON["num_hidden_layers"]
    assert steps == 5 * layers  # every decode step after the prompt, in every layer
    assert [lengths.tolist() for lengths in paged[::layers]] == [[n, n] for n in range(12, 17)]
    assert torch.equal(generated_padded, expected_padded) and len(paged) == steps  # padding: SDPA's mask


def test_static_cache_masks_without_a_graph_or_padding_only():
    """The mask function's key counts stand for exactly the boolean mask SDPA's mask function builds, and it
    leaves every other case (a prompt, a dynamic cache, a sliding window) to SDPA's."""
    from transformers.masking_utils import sdpa_mask, sliding_window_causal_mask_function

    offset = torch.tensor(9)
    lengths = hf.key_lengths(hf.key_lengths_mask(3, 1, 16, offset))
    assert lengths.dtype == torch.int32 and lengths.tolist() == [10, 10, 10]
    reference = sdpa_mask(batch_size=3, q_length=1, kv_length=16, q_offset=offset, allow_is_causal_skip=False)
    assert torch.equal(torch.arange(16) < lengths.view(-1, 1, 1, 1), reference)
    assert hf.key_lengths_mask(3, 1, 10, 9) is None  # a dynamic cache: SDPA's causal flag
    assert hf.key_lengths(hf.key_lengths_mask(3, 4, 16, offset)) is None  # a chunk of several tokens
    window = hf.key_lengths_mask(3, 1, 16, offset, mask_function=sliding_window_causal_mask_function(4),
                                 local_size=4)
    assert window.dtype == torch.bool
    padded = torch.ones(3, 10, dtype=torch.bool)
    padded[0, 0] = False
    assert hf.key_lengths(hf.key_lengths_mask(3, 1, 16, offset, attention_mask=padded)) is None
    assert hf.key_lengths(hf.key_lengths_mask(3, 1, 16, offset, attention_mask=torch.ones(3, 10, dtype=torch.bool)))\
        is not None


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["Qwen2ForCausalLM", "MixtralForCausalLM"])
def test_static_cache_decode_captured_in_a_cuda_graph(name):
    """transformers' static-cache decode loop (a StaticCache, the step called without a mask) captured as
    PyTorch's docs show, warm-up on a side stream then torch.cuda.graph: each replay attends to the keys the
    cache holds by then, through paged attention, as the unpatched model does eagerly."""
    from transformers import StaticCache

    model, patched = bf16_pair(name, num_attention_heads=8, num_key_value_heads=2, head_dim=128)
    batch, prompt_length, steps = 3, 21, 6
    prompt = torch.randint(0, COMMON["vocab_size"], (batch, prompt_length), device="cuda")
    feed = torch.randint(0, COMMON["vocab_size"], (steps, batch, 1), device="cuda")
    expected, caches = [], {}
    with torch.no_grad():
        for m in (model, patched):
            caches[m] = StaticCache(config=m.config, max_cache_len=64)
            m(prompt, past_key_values=caches[m], use_cache=True)
        for i in range(steps):  # the unpatched model steps eagerly
            position = torch.full((batch, 1), prompt_length + i, device="cuda")
            expected.append(model(feed[i], position_ids=position, past_key_values=caches[model]).logits.float())
        token, position = feed[0].clone(), torch.full((batch, 1), prompt_length, device="cuda")
        step = lambda: patched(token, position_ids=position, past_key_values=caches[patched]).logits  # noqa: E731
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up: the first decode step, run eagerly
            logits = [step().float()]
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # capturing runs nothing: the cache is where the warm-up left it
            captured = step()
        for i in range(1, steps):
            token.copy_(feed[i])
            position.fill_(prompt_length + i)
            captured.fill_(float("nan"))
            graph.replay()
            logits.append(captured.float())
    for i, (got, want) in enumerate(zip(logits, expected)):
        error = ((got - want).norm() / want.norm()).item()
        assert error < 2e-2, f"step {i}: relative error {error}"


def record_routing(model: torch.nn.Module) -> list[torch.Tensor]:
    """The sorted top-k expert indices each call of the model's experts modules receives, call by call (rows:
    the flattened tokens)."""
    calls = []

    def hook(module, args, kwargs):
        calls.append((args[1] if len(args) > 1 else kwargs["top_k_index"]).sort(-1).values)

    for module in model.modules():
        if hasattr(module, "has_gate"):  # transformers' experts modules
            module.register_forward_pre_hook(hook, with_kwargs=True)
    return calls


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["llama3-8b", "qwen2.5-7b", "mistral-7b", "mixtral-8x7b", "qwen3-30b-a3b",
                                  "qwen1.5-moe-a2.7b"])
def test_real_configs_give_the_unpatched_logits(name):
    """Each class at its real model's sizes (one decoder layer, random weights), fully patched (GEMMs, layer
    ops, experts, attention): a prompt's logits, then decode steps over a static cache, against the unpatched
    model within bf16 rounding.

    NOTES: random routers put some tokens' k-th and (k+1)-th experts within rounding of each other, and then a
    rounding difference upstream routes the token differently in the two models: a different product, not an
    error. With one layer, a position's logits depend on that position's routing alone, so a row whose experts
    differ between the models is left out; at most a quarter of the rows may be."""
    import copy

    spec = MODELS[name]
    config = getattr(transformers, f"{spec['family']}Config")(**spec["sizes"], num_hidden_layers=1,
                                                              tie_word_embeddings=False)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = getattr(transformers, f"{spec['family']}ForCausalLM")(config).to(torch.bfloat16).eval()
    if spec.get("moe"):
        model.set_experts_implementation("grouped_mm")
    patched = copy.deepcopy(model)
    report = wavetune.patch(patched)
    assert report.patched and report.layers and report.switched["attention"] == "sdpa", report
    batch, length = 2, 77
    tokens = torch.randint(0, config.vocab_size, (batch, length + 4), device="cuda")
    logits, routing = {}, {m: record_routing(m) for m in (model, patched)}
    with torch.no_grad():
        for m in (model, patched):
            cache = transformers.StaticCache(config=m.config, max_cache_len=128)
            logits[m] = [m(tokens[:, :length], past_key_values=cache).logits[:, -1].float()]
            for i in range(length, length + 4):
                position = torch.full((batch, 1), i, device="cuda")
                logits[m].append(m(tokens[:, i:i + 1], position_ids=position, past_key_values=cache).logits[:, -1]
                                 .float())
    rows = torch.arange(batch, device="cuda")
    compared = flipped = 0
    for step, (got, want) in enumerate(zip(logits[patched], logits[model])):
        # The flattened token of each row's last position: (b, length - 1) of the prompt, b of a decode step.
        token = rows * length + length - 1 if step == 0 else rows
        same = torch.ones(batch, dtype=torch.bool, device="cuda")
        if routing[model]:
            same = (routing[patched][step][token] == routing[model][step][token]).all(-1)
        for b in range(batch):
            if not same[b]:
                flipped += 1
                continue
            compared += 1
            error = ((got[b] - want[b]).norm() / want[b].norm()).item()
            where = "prompt" if step == 0 else f"decode step {step}"
            assert error < 2e-2, f"{where}, sequence {b}: relative error {error}"
    assert flipped <= (compared + flipped) // 4, f"{flipped} of {compared + flipped} rows routed differently"


def fp8_checkpoint_layers(device: str):
    """A block-scaled fine-grained FP8 layer and an fbgemm per-channel one, as transformers builds them."""
    from transformers.integrations.fbgemm_fp8 import FbgemmFp8Linear
    from transformers.integrations.finegrained_fp8 import FP8Linear as FineGrainedFP8Linear

    with torch.device(device):
        block = FineGrainedFP8Linear(384, 272, block_size=(128, 128))
        channel = FbgemmFp8Linear(256, 384, bias=True)
    return torch.nn.Sequential(block, torch.nn.ReLU(), channel)


def test_fp8_checkpoint_layers_are_swapped_and_restored():
    model = fp8_checkpoint_layers("meta")
    originals = list(model)
    report = wavetune.patch(model)
    assert report.patched == ["0", "2"] and not report.skipped
    block, channel = model[0], model[2]
    assert isinstance(block, wavetune.nn.FP8Linear) and block.block_scales and block.weight_scale.shape == (3, 3)
    assert isinstance(channel, wavetune.nn.FP8Linear) and not channel.block_scales and channel.bias is not None
    assert wavetune.unpatch(model) == ["0", "2"] and list(model) == originals
    unsupported = fp8_checkpoint_layers("meta")
    unsupported[0].block_size = (64, 64)
    assert hf.fp8_layer_parameters(unsupported[0]) is None
    assert "subclass of nn.Linear" in wavetune.patch(unsupported).skipped["0"]


@pytest.mark.gpu
def test_a_patched_fp8_checkpoint_layer_computes_the_dequantized_product():
    model = fp8_checkpoint_layers("cuda")
    block = model[0]
    g = torch.Generator(device="cuda").manual_seed(3)
    with torch.no_grad():
        weight = (torch.randn(272, 384, device="cuda", generator=g) * 100).clamp(-448, 448)
        block.weight.copy_(weight.to(torch.float8_e4m3fn))
        block.weight_scale_inv.copy_(torch.rand(3, 3, device="cuda", generator=g) * 1e-3 + 1e-4)
    scales = block.weight_scale_inv.repeat_interleave(128, 0)[:272].repeat_interleave(128, 1)[:, :384]
    x = torch.randn(5, 384, device="cuda", generator=g, dtype=torch.bfloat16)
    want = x.float() @ (block.weight.float() * scales).t()
    wavetune.patch(model)
    with torch.inference_mode():
        got = model[0](x).float()
    assert ((got - want).norm() / want.norm()).item() < 0.05  # activations rounded to e4m3 per 128-group


def fp8_experts(device: str, block_size=(128, 128)):
    """A fine-grained FP8 checkpoint's experts module (8 experts, hidden 256, intermediate 192: a partial
    128-block), as transformers' FP8 quantizer builds it, switched to wavetune's experts."""
    from transformers.integrations.finegrained_fp8 import ALL_FP8_EXPERTS_FUNCTIONS, FP8Experts
    from transformers.integrations.moe import use_experts_implementation

    config = transformers.Qwen3MoeConfig(hidden_size=256, moe_intermediate_size=192, num_experts=8, hidden_act="silu")
    config._experts_implementation = hf.IMPLEMENTATION
    experts_class = use_experts_implementation(experts_class=FP8Experts, experts_interface=ALL_FP8_EXPERTS_FUNCTIONS,
                                               has_bias=False, has_gate=True)
    with torch.device(device):
        return experts_class(config=config, block_size=block_size)


def test_fp8_checkpoint_experts_get_wavetune_or_say_why_not(monkeypatch):
    from types import SimpleNamespace

    from transformers.integrations.finegrained_fp8 import ALL_FP8_EXPERTS_FUNCTIONS

    hf.register()
    assert ALL_FP8_EXPERTS_FUNCTIONS.get_interface(hf.IMPLEMENTATION, None) is hf.fp8_experts_forward
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    assert hf.fp8_experts_fallback_reason(fp8_experts("meta"), x) == "hidden states on cpu"
    assert "128x128 blocks" in hf.fp8_experts_fallback_reason(fp8_experts("meta", block_size=(64, 64)), x)
    static = fp8_experts("meta")
    static.activation_scheme = "static"
    assert hf.fp8_experts_fallback_reason(static, x) == "static activation scales"
    monkeypatch.setattr(hf, "_block_scaled_output_dtypes", lambda: frozenset({torch.float16}))
    on_gpu = SimpleNamespace(is_cuda=True, dtype=torch.bfloat16)  # what the check reads of the hidden states
    assert "no block-scaled FP8 grouped variant with torch.bfloat16" in hf.fp8_experts_fallback_reason(
        fp8_experts("meta"), on_gpu)


@pytest.mark.gpu
def test_fp8_checkpoint_experts_compute_the_dequantized_product():
    """wavetune's FP8 experts forward on the module's own e4m3 weights and 128x128 block scales against the
    same routing in float32 on the dequantized weights."""
    from wavetune.families.grouped_gemm.measure import dequantize_experts

    if not hf.block_scaled_variant_compiled(torch.bfloat16):
        pytest.skip("no block-scaled FP8 grouped variant with bf16 output in this build")
    hf.register()
    experts = fp8_experts("cuda")
    g = torch.Generator(device="cuda").manual_seed(5)
    with torch.no_grad():
        for name in ("gate_up", "down"):
            weight, scale = getattr(experts, f"{name}_proj"), getattr(experts, f"{name}_proj_scale_inv")
            weight.copy_((torch.randn(weight.shape, device="cuda", generator=g) * 100).clamp(-448, 448).to(weight.dtype))
            scale.copy_(torch.rand(scale.shape, device="cuda", generator=g) * 1e-3 + 1e-4)
    x = torch.randn(37, 256, device="cuda", generator=g, dtype=torch.bfloat16)
    index = torch.randint(0, 8, (37, 2), device="cuda", generator=g)
    weights = torch.rand(37, 2, device="cuda", generator=g)
    assert hf.fp8_experts_fallback_reason(experts, x) is None
    with torch.inference_mode():
        got = experts(x, index, weights).float()
        dequantized = {name: dequantize_experts(getattr(experts, f"{name}_proj"),
                                                getattr(experts, f"{name}_proj_scale_inv"), 128, torch.float32)
                       for name in ("gate_up", "down")}

        def project(rows, name, offsets):
            ends = offsets.tolist()
            return torch.cat([rows[start:end] @ dequantized[name][e].t()
                              for e, (start, end) in enumerate(zip([0, *ends[:-1]], ends))])

        want = hf.routed_experts(experts, x.float(), index, weights, project)
    assert got.shape == want.shape
    assert ((got - want).norm() / want.norm()).item() < 0.05  # activations rounded to e4m3 per 128-group

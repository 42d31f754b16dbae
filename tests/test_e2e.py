"""benchmarks/e2e.py without a GPU: its attention (a decode step equals the prefill's last position), its
own decoder against transformers', the patched twin, tracing with torch.compile(fullgraph=True), the
options, and the report from a synthetic JSONL. transformers and matplotlib are optional."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from conftest import load_benchmark

torch = pytest.importorskip("torch")
pytest.importorskip("wavetune.nn")


e2e = load_benchmark(Path(__file__).resolve().parents[1] / "benchmarks" / "e2e.py")


def tiny_spec(family: str) -> dict:
    return dict(family=family, qkv_bias=family == "Qwen2", sizes=dict(
        hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
        rms_norm_eps=1e-6, rope_theta=10000.0, max_position_embeddings=512))


def context(batch=2, layers=2, length=8, dtype=torch.float32, device="cpu"):
    """Static per-layer key/value caches of ``length`` tokens plus the slot a decode step writes."""
    return [tuple(torch.randn(batch, 2, length + 1, 16, dtype=dtype, device=device) for _ in "kv")
            for _ in range(layers)]


def test_a_decode_step_attends_like_the_prefills_last_position():
    layer = torch.nn.Module()
    layer.layer_idx = 0
    q, k, v = torch.randn(2, 4, 9, 16), torch.randn(2, 2, 9, 16), torch.randn(2, 2, 9, 16)
    prefill, _ = e2e.context_attention(layer, q, k, v)
    cache = [(torch.cat([k[:, :, :-1], torch.zeros_like(k[:, :, -1:])], 2),
              torch.cat([v[:, :, :-1], torch.zeros_like(v[:, :, -1:])], 2))]
    decode, _ = e2e.context_attention(layer, q[:, :, -1:], k[:, :, -1:], v[:, :, -1:], context_kv=cache)
    assert decode.shape == (2, 1, 4, 16)
    torch.testing.assert_close(decode[:, 0], prefill[:, -1])
    torch.testing.assert_close(cache[0][0], k)  # the new key went into the last slot


@pytest.mark.parametrize("family", ["Llama", "Qwen2"])
def test_own_decoder_matches_transformers(family):
    pytest.importorskip("transformers")
    spec = tiny_spec(family)
    reference, source = e2e.build_model(spec, 2, "cpu")
    assert source.startswith("transformers") and f"{family}ForCausalLM" in source
    own = e2e.OwnDecoder(spec, 2).to(torch.bfloat16)  # rotary frequencies rounded to bf16 as in reference
    own.load_state_dict(reference.state_dict())  # the same module names and parameters
    reference, own = reference.float(), own.float()
    tokens, position = torch.randint(0, 256, (2, 12)), torch.full((2, 1), 8)
    cache = context()
    with torch.inference_mode():
        torch.testing.assert_close(e2e.step_function(own)(tokens), e2e.step_function(reference)(tokens))
        decoded = e2e.step_function(own)(tokens[:, :1], position, copy.deepcopy(cache))
        assert decoded.shape == (2, 1, 256)
        torch.testing.assert_close(decoded, e2e.step_function(reference)(tokens[:, :1], position, cache))


def test_without_transformers_the_own_decoder_is_built_and_said_so(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    model, source = e2e.build_model(tiny_spec("Llama"), 2, "cpu")
    assert isinstance(model, e2e.OwnDecoder) and source == "own decoder (transformers missing)"
    assert next(model.parameters()).dtype == torch.bfloat16 and not model.training
    assert "transformers is not available" in capsys.readouterr().err


def meta_own_decoder():
    with torch.device("meta"):  # patch leaves a CPU model alone
        return e2e.OwnDecoder(tiny_spec("Qwen2"), 2).to(torch.bfloat16)


def test_patched_twin_shares_the_weights_and_leaves_the_model_alone():
    model = meta_own_decoder()
    twin, report = e2e.patched_twin(model)
    assert len(report.patched) == 2 * 7 + 1 and not report.skipped  # q k v o gate up down per layer, lm_head
    assert "model.layers.1.self_attn.q_proj" in report.patched and "lm_head" in report.patched
    assert all(type(module) is torch.nn.Linear for module in model.modules() if isinstance(module, torch.nn.Linear))
    assert dict(twin.named_parameters()).keys() == dict(model.named_parameters()).keys()
    assert all(p is q for p, q in zip(twin.parameters(), model.parameters()))


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_the_patched_twin_traces_in_one_graph(phase):
    model = meta_own_decoder()
    twin, _ = e2e.patched_twin(model)
    graphs = []

    def recording_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    tokens = torch.zeros(2, 12 if phase == "prefill" else 1, dtype=torch.long, device="meta")
    args = (tokens,) if phase == "prefill" else (tokens, torch.zeros(2, 1, dtype=torch.long, device="meta"),
                                                  context(dtype=torch.bfloat16, device="meta"))
    with torch.inference_mode():
        step = torch.compile(e2e.step_function(twin), fullgraph=True, dynamic=False, backend=recording_backend)
        logits = step(*args)
    assert (logits.shape, logits.dtype) == ((2, 1, 256), torch.bfloat16)
    assert [str(n.target) for n in graphs[0].graph.nodes].count("wavetune.linear.default") == 15


@pytest.mark.parametrize("name", sorted(e2e.MODELS))
def test_every_model_builds_as_its_transformers_class(name):
    """The real configs' sizes are accepted by their classes (on the meta device: no memory), and each
    twin adds its part: experts from +grouped on (MoE models), the attention mark from +attention."""
    pytest.importorskip("transformers")
    spec = e2e.MODELS[name]
    model, source = e2e.build_model(spec, 1, "meta")
    assert source.endswith(f"{spec['family']}ForCausalLM")
    assert model.lm_head.weight.shape == (spec["sizes"]["vocab_size"], spec["sizes"]["hidden_size"])
    twin, report = e2e.patched_twin(model, e2e.WAVETUNE)
    assert "lm_head" in report.patched and report.switched == {}
    twin, report = e2e.patched_twin(model, e2e.GROUPED)
    assert report.switched == ({"experts": "grouped_mm"} if spec.get("moe") else {})
    assert model.config._experts_implementation != "wavetune"  # the twin's own config changed, not the model's
    twin, _ = e2e.patched_twin(model, e2e.WAVETUNE_ATTENTION)
    assert all(m.wavetune_attention for m in twin.modules() if hasattr(m, "layer_idx"))


def test_a_tensor_parallel_slice_keeps_the_head_dim():
    pytest.importorskip("transformers")
    spec = e2e.sliced(e2e.MODELS["llama3-8b"], 4)
    model, _ = e2e.build_model(spec, 1, "meta")
    attention, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    assert attention.q_proj.weight.shape == (8 * 128, 4096) and attention.k_proj.weight.shape == (2 * 128, 4096)
    assert attention.o_proj.weight.shape == (4096, 1024) and mlp.down_proj.weight.shape == (4096, 3584)
    assert model.lm_head.weight.shape == (128256 // 4, 4096)
    assert e2e.sliced(e2e.MODELS["qwen3-30b-a3b"], 8)["sizes"]["num_key_value_heads"] == 1  # 4 KV heads, 8 ranks
    assert e2e.model_label("llama3-8b", 4) == "llama3-8b.tp4" and e2e.model_label("llama3-8b", 1) == "llama3-8b"
    with pytest.raises(SystemExit):
        e2e.sliced(e2e.MODELS["qwen2.5-7b"], 8)  # 28 heads


def test_kernel_names_are_sorted_into_gemm_attention_and_the_rest():
    assert [e2e.kernel_kind(n) for n in (
        "nvjet_tst_128x64_64x6_2x1_v_bz_coopA_TNN", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
        "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<...>>",
        "void wavetune::detail::decode::decode_gemm_kernel<...>", "triton_tem_fused_mm_0",
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, ...>",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop", "void flash::flash_fwd_kernel<...>",
        "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "void at::native::elementwise_kernel<...>")] == [
        "gemm", "gemm", "gemm", "gemm", "gemm", "gemm", "attention", "attention", "other", "other"]


def test_options():
    args = e2e.parse_args(["--modes", "max-autotune,compile", "--decode-batches", "", "--lengths", "128,4096"])
    assert args.modes == ["eager", "compile", "max-autotune"]  # eager always: the reference
    assert args.decode_batches == [] and args.lengths == [128, 4096]
    assert e2e.shapes(args) == [("prefill", 1, 128), ("prefill", 1, 4096)]
    with pytest.raises(SystemExit):
        e2e.parse_args(["--models", "gpt-5"])
    assert e2e.parse_args([]).suffixes == [e2e.WAVETUNE, e2e.GROUPED]
    pdl = e2e.parse_args(["--pdl-off"])
    assert e2e.model_suffixes(pdl, e2e.MODELS["mixtral-8x7b"]) == [e2e.WAVETUNE, e2e.GROUPED, e2e.GROUPED + e2e.NO_PDL]
    assert e2e.model_suffixes(pdl, e2e.MODELS["llama3-8b"]) == [e2e.WAVETUNE, e2e.WAVETUNE + e2e.NO_PDL]
    both = e2e.parse_args(["--pdl-off", "--batch-invariant", "--wavetune", "gemm,layers"])
    assert e2e.model_suffixes(both, e2e.MODELS["llama3-8b"]) == [e2e.WAVETUNE, e2e.LAYERS, e2e.LAYERS + e2e.NO_PDL,
                                                                e2e.LAYERS + e2e.INVARIANT]
    assert e2e.parse_args(["--wavetune", "attention,gemm"]).suffixes == [e2e.WAVETUNE, e2e.WAVETUNE_ATTENTION]
    with pytest.raises(SystemExit):
        e2e.parse_args(["--wavetune", "fp8"])


def record(phase, batch, length, ms, **extra):
    return {"type": "shape", "model": "llama3-8b", "source": "test", "layers": 4, "phase": phase, "batch": batch,
            "length": length, "reps": 3, "ms": ms, "error": {m: 0.01 for m in ms},
            "warmup_s": {m: 1.0 for m in ms}, **extra}


def test_report_from_a_jsonl(tmp_path):
    header = {"type": "header", "device": "NVIDIA H100 80GB HBM3", "date": "2026-11-23 10:00 UTC", "torch": "2.13",
              "cuda": "13.0", "transformers": "5.23.0", "wavetune": "0.1.0", "command": "e2e.py"}
    records = [
        record("prefill", 1, 128, {"eager": 2.0, "eager+wavetune": 2.5}),
        record("prefill", 1, 2048, {"eager": 10.0, "eager+wavetune": 8.0}),
        record("decode", 16, 1024, {"eager": 1.0, "eager+wavetune": 0.9, "eager+wavetune-pdl": 0.99,
                                    "eager+wavetune-invariant": 0.945},
               failed={"compile": "RuntimeError: ..."},
               kernel_ms={"eager": {"gemm": 0.6, "attention": 0.1, "other": 0.3},
                          "eager+wavetune": {"gemm": 0.5, "attention": 0.1, "other": 0.3}}, step_bytes=2.7e9),
        # a later run adds compile at 2048, interleaved with its own eager
        record("prefill", 1, 2048, {"eager": 11.0, "compile": 10.0, "compile+wavetune": 5.5}),
    ]
    records[0]["error"]["eager+wavetune"] = 0.2
    path = tmp_path / "e2e_nvidia-h100-80gb-hbm3.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [header, *records]))
    e2e.main(["--out", str(tmp_path), "--plot"])

    table = e2e.merged(records)
    at_2048 = table[("llama3-8b", 4, "prefill", 1, 2048)]
    assert at_2048["speedup"] == {"eager": 1.0, "eager+wavetune": 1.25, "compile": 1.1, "compile+wavetune": 2.0}
    assert at_2048["gain"] == {e2e.WAVETUNE: {"eager": 1.25, "compile": 10.0 / 5.5}}  # each within its own record
    markdown = path.with_suffix(".md").read_text()
    assert "NVIDIA H100 80GB HBM3" in markdown and "2026-11-23" in markdown
    columns = "eager | eager+wavetune | eager+wavetune-pdl | eager+wavetune-invariant | compile | compile+wavetune"
    assert f"| batch | prompt length | {columns} |" in markdown
    assert "| batch | context | eager |" in markdown
    assert "- eager+wavetune against eager: 1.000x geomean, from 0.80x to 1.25x over 2 shapes" in markdown
    assert "- compile+wavetune against compile: 1.818x geomean" in markdown
    assert "| 1 | 128 | 2.000 | 2.500 (0.80x) (!) |  |  |  |  |" in markdown  # slower, and its error flagged
    assert "| 16 | 1024 | 1.000 | 0.900 (1.11x) | 0.990 (1.01x) | 0.945 (1.06x) | failed |  |" in markdown
    assert ("- batch-invariant mode in eager+wavetune: 1.050x geomean of its time (eager+wavetune-invariant over "
            "eager+wavetune; above 1: slower)") in markdown
    assert "- GEMMs' share of kernel time (one profiled replay per shape): eager 60%, eager+wavetune 56%" in markdown
    assert "- PDL in eager+wavetune: 1.100x geomean over eager+wavetune-pdl" in markdown
    assert ("- effective bandwidth, TB/s (the bytes a step must read over its time): batch 16: eager 2.70, "
            "eager+wavetune 3.00, eager+wavetune-pdl 2.73, eager+wavetune-invariant 2.86") in markdown
    shapes = json.loads(path.with_suffix(".json").read_text())["shapes"]
    assert [(s["phase"], s["length"]) for s in shapes] == [("decode", 1024), ("prefill", 128), ("prefill", 2048)]
    assert path.with_suffix(".png").exists() == (importlib.util.find_spec("matplotlib") is not None)


def test_run_appends_each_shape_resumes_and_keeps_to_the_budget(tmp_path, monkeypatch):
    """run's bookkeeping with the GPU parts replaced: the model is built on the CPU and not run."""
    measured = []

    def measure(steps, inputs, reps, stream, profile):
        measured.append(sorted(steps))
        return {"ms": {m: 1.0 for m in steps}, "error": {m: 0.0 for m in steps}, "warmup_s": {m: 0.0 for m in steps}}

    monkeypatch.setattr(e2e, "device_slug", lambda: "test-gpu")
    monkeypatch.setattr(e2e, "header", lambda: {"type": "header", "device": "test GPU"})
    monkeypatch.setattr(e2e, "build_model", lambda spec, layers, device, attention: (
        e2e.OwnDecoder(tiny_spec("Llama"), layers).to(torch.bfloat16), "own decoder"))
    monkeypatch.setattr(e2e, "shape_inputs", lambda *args, **kwargs: {})
    monkeypatch.setattr(e2e, "measure_shape", measure)
    monkeypatch.setattr(torch.cuda, "Stream", lambda: None)
    options = ["--out", str(tmp_path), "--lengths", "128,512", "--decode-batches", "8"]

    path = e2e.run(e2e.parse_args(options + ["--modes", "eager"]))
    assert path == tmp_path / "e2e_test-gpu.jsonl"
    headers, records = e2e.read_records(path)
    assert [(r["phase"], r["batch"], r["length"]) for r in records] == [
        ("prefill", 1, 128), ("prefill", 1, 512), ("decode", 8, 1024)]
    assert measured == [["eager", "eager+wavetune"]] * 3

    e2e.run(e2e.parse_args(options + ["--modes", "eager"]))  # measured already: nothing to do
    assert len(measured) == 3
    e2e.run(e2e.parse_args(options + ["--modes", "eager,compile", "--time-budget-s", "0"]))  # no time left
    assert len(measured) == 3
    e2e.run(e2e.parse_args(options + ["--modes", "eager,compile", "--lengths", "512", "--decode-batches", ""]))
    assert measured[3:] == [["compile", "compile+wavetune", "eager", "eager+wavetune"]]
    headers, records = e2e.read_records(path)
    assert len(headers) == 4 and len(records) == 4


@pytest.mark.gpu
@pytest.mark.parametrize("phase, modes", [("prefill", ["eager"]), ("decode", ["eager", "compile"])])
def test_a_shape_is_measured_on_the_gpu(phase, modes):
    """The benchmark's own path on a tiny model (transformers' where installed): warm-up, compile, capture
    and interleaved replays of every method, the patched ones matching eager."""
    spec = tiny_spec("Qwen2")
    model, _ = e2e.build_model(spec, 2, "cuda")
    twin, report = e2e.patched_twin(model)
    assert len(report.patched) == 15
    inputs = e2e.shape_inputs(spec, 2, phase, 2, 40)
    result = e2e.measure_shape(e2e.methods(model, {e2e.WAVETUNE: twin}, modes), inputs, 3, torch.cuda.Stream())
    assert result["failed"] == {}
    assert set(result["ms"]) == {m + s for m in modes for s in ("", e2e.WAVETUNE)}
    assert all(ms > 0 for ms in result["ms"].values())
    assert all(error < e2e.MAX_ERROR for error in result["error"].values()), result["error"]


@pytest.mark.gpu
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_wavetune_attention_twin_matches_sdpa(phase):
    """The attention route: a twin on wavetune's attention (head dim 64) gives eager's logits, prefill (causal,
    torch.ops.wavetune.attention) and decode (paged attention over a static KV cache's strided views)."""
    configs = __import__("wavetune").attention_configs()
    if not any(c.tile[2] == 64 and c.dtype == "bf16" and not c.from_library for c in configs):
        pytest.skip("no bf16 head_dim 64 attention variant in this build")
    spec = tiny_spec("Llama")
    spec["sizes"].update(hidden_size=256, num_attention_heads=4, num_key_value_heads=2)
    model, _ = e2e.build_model(spec, 2, "cuda")
    inputs = e2e.shape_inputs(spec, 2, phase, 2, 200)
    twin, _ = e2e.patched_twin(model, e2e.WAVETUNE_ATTENTION)
    result = e2e.measure_shape(e2e.methods(model, {e2e.WAVETUNE_ATTENTION: twin}, ["eager"]), inputs, 3,
                               torch.cuda.Stream())
    assert result["failed"] == {}
    assert result["error"]["eager" + e2e.WAVETUNE_ATTENTION] < e2e.MAX_ERROR, result["error"]


def test_fp8_twins_share_one_set_of_fp8_weights():
    from wavetune.nn import FP8Linear

    model = e2e.OwnDecoder(tiny_spec("Qwen2"), 2).to(torch.bfloat16)
    for block in (False, True):
        twins = e2e.fp8_twins(model, block)
        fast, plain = twins[e2e.FP8], twins[e2e.FP8_TORCH]
        layers = [m for m in fast.modules() if isinstance(m, FP8Linear)]
        baselines = [m for m in plain.modules() if isinstance(m, e2e.TorchFP8Linear)]
        assert len(layers) == len(baselines) == 2 * 7
        for m in layers:
            blocks = (-(-m.out_features // 128), -(-m.in_features // 128))
            assert tuple(m.weight_scale.shape) == (blocks if block else (m.out_features, 1))
        assert all(a.weight is b.weight and a.weight_scale is b.weight_scale for a, b in zip(layers, baselines))
        assert type(fast.lm_head) is torch.nn.Linear  # the head stays in bf16, as FP8 checkpoints keep it
        assert all(type(m) is torch.nn.Linear for m in model.modules() if isinstance(m, torch.nn.Linear))


def test_the_decode_step_of_the_layers_alone():
    """--no-lm-head: a step returns the last position's hidden state, and records name the model so."""
    args = e2e.parse_args(["--no-lm-head", "--layers", "1"])
    assert args.lm_head is False and e2e.parse_args([]).lm_head is True
    assert e2e.model_label("llama3-8b", 4, lm_head=False) == "llama3-8b.tp4.no-lm-head"
    model = e2e.OwnDecoder(tiny_spec("Llama"), 1)
    tokens, position = torch.randint(0, 256, (2, 1)), torch.full((2, 1), 8)
    with torch.inference_mode():
        hidden = e2e.step_function(model, lm_head=False)(tokens, position, context(layers=1))
        logits = e2e.step_function(model)(tokens, position, context(layers=1))
    assert hidden.shape == (2, 1, 64) and logits.shape == (2, 1, 256)


def test_a_decode_step_over_transformers_static_cache():
    """--static-cache: the step decodes over a StaticCache of unfilled slots beyond the context, every replay
    writing the same slot, as the same model over this script's context of the filled slots does; the
    +attention twin takes wavetune's transformers attention."""
    pytest.importorskip("transformers")
    args = e2e.parse_args(["--static-cache", "2048", "--context", "1024"])
    assert e2e.model_label("llama3-8b", 1, static_cache=args.static_cache) == "llama3-8b.static-cache2048"
    with pytest.raises(SystemExit):
        e2e.parse_args(["--static-cache", "1024", "--context", "1024"])  # no slot for the new token
    spec = tiny_spec("Llama")
    model, _ = e2e.build_model(spec, 2, "cpu", "sdpa")
    inputs = e2e.shape_inputs(spec, 2, "decode", 2, 8, device="cpu", static_cache=(model.config, 16))
    cache = inputs["past_key_values"]
    step = e2e.step_function(model)
    with torch.inference_mode():
        first, again = step(**inputs), step(**inputs)
        context = [(layer.keys[:, :, :9].clone(), layer.values[:, :, :9].clone()) for layer in cache.layers]
        own = e2e.twin_of(model)
        own.set_attn_implementation(e2e.ATTENTION)
        expected = e2e.step_function(own)(inputs["input_ids"], inputs["position_ids"], context)
    assert torch.equal(first, again) and all(int(layer.cumulative_length) == 9 for layer in cache.layers)
    torch.testing.assert_close(first, expected, rtol=2e-2, atol=2e-2)
    twin, report = e2e.patched_twin(model, e2e.WAVETUNE_ATTENTION)
    assert report.switched == {"attention": "sdpa"} and twin.config._attn_implementation == "wavetune"


def test_the_torch_routing_twin_is_the_grouped_twin_with_pytorchs_routing():
    """--torch-routing: MoE models get the +grouped twin again with PyTorch's routing around the grouped GEMMs
    (on the CPU every experts call falls back, so its logits are the model's)."""
    pytest.importorskip("transformers")
    args = e2e.parse_args(["--wavetune", "layers,grouped", "--torch-routing"])
    moe = dict(family="Mixtral", moe=True, sizes=dict(
        tiny_spec("Llama")["sizes"], num_local_experts=4, num_experts_per_tok=2, sliding_window=None))
    assert e2e.model_suffixes(args, moe) == [e2e.LAYERS, e2e.GROUPED, e2e.GROUPED + e2e.TORCH_ROUTING]
    assert e2e.model_suffixes(args, tiny_spec("Llama")) == [e2e.LAYERS]
    model, _ = e2e.build_model(moe, 1, "cpu")
    model.set_experts_implementation("grouped_mm")
    twin = e2e.torch_routing_twin(model)
    assert twin.config._experts_implementation == e2e.TORCH_ROUTING_EXPERTS
    tokens = torch.randint(0, 256, (2, 5))
    with torch.inference_mode():
        torch.testing.assert_close(e2e.step_function(twin)(tokens), e2e.step_function(model)(tokens))


def test_fp8_twins_of_an_moe_model_share_its_fp8_experts():
    """--fp8 rowwise on an MoE model: both FP8 twins' experts read one set of e4m3 weights with per-channel
    scales (within e4m3 rounding of the bf16 ones) through the script's two experts implementations."""
    pytest.importorskip("transformers")
    spec = dict(family="Mixtral", moe=True, sizes=dict(
        tiny_spec("Llama")["sizes"], num_local_experts=4, num_experts_per_tok=2, sliding_window=None))
    model, _ = e2e.build_model(spec, 1, "cpu")
    twins = e2e.fp8_twins(model, block=False)
    experts = {suffix: next(m for m in twin.modules() if hasattr(m, "fp8_weights")) for suffix, twin in twins.items()}
    assert experts[e2e.FP8].fp8_weights is experts[e2e.FP8_TORCH].fp8_weights
    assert {suffix: twin.config._experts_implementation for suffix, twin in twins.items()} == e2e.FP8_EXPERTS
    original = next(m for m in model.modules() if hasattr(m, "gate_up_proj"))
    for name, (weight, scale) in experts[e2e.FP8].fp8_weights.items():
        reference = getattr(original, f"{name}_proj").float()
        assert weight.dtype == torch.float8_e4m3fn and scale.shape == reference.shape[:2]
        error = (weight.float() * scale[..., None] - reference).norm() / reference.norm()
        assert error < 2 ** -4, (name, error)
    assert model.config._experts_implementation not in e2e.FP8_EXPERTS.values()


def test_a_decode_steps_bytes_are_its_weights_and_its_cache():
    transformers = pytest.importorskip("transformers")
    from wavetune.hf_models import decode_step_bytes

    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    weights = sum(p.numel() for p in model.parameters()) * 2
    embedding_rows = 3 * 64 * 2  # one row per sequence, not the table
    cache = 2 * 2 * 3 * 2 * 16 * 100 * 2  # keys and values, layers, batch, KV heads, head dim, tokens, bytes
    assert decode_step_bytes(model, 100, 3) == weights - 256 * 64 * 2 + embedding_rows + cache
    assert decode_step_bytes(model, 100, 3, lm_head=False) == weights - 2 * 256 * 64 * 2 + embedding_rows + cache
    moe = transformers.MixtralForCausalLM(transformers.MixtralConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2)).to(torch.bfloat16)
    experts = sum(p.numel() for name, p in moe.named_parameters() if ".experts." in name) * 2
    one, many = (decode_step_bytes(moe, 10, batch) for batch in (1, 1000))
    assert many - one == pytest.approx(experts * ((1 - 1 / 8) ** 2 - (1 - 1 / 8) ** 2000) + 999 * (64 * 2 + 2 * 2 * 16 * 10 * 2))


"""Time to first token and the decode step of real LLM architectures, with and without wavetune.

    python benchmarks/e2e.py --out $OUT                      # GPU: the default sweep (sized for ~6 minutes)
    python benchmarks/e2e.py --out $OUT --models qwen2.5-7b --modes eager,max-autotune --lengths 2048
    python benchmarks/e2e.py --out $OUT --plot               # no GPU: table, JSON, picture from the JSONL
    WAVETUNE_ARCH=sm80 python benchmarks/e2e.py --out $OUT   # the kernels an Ampere GPU runs (docs/kernels.md)

Models (--models): Llama-3-8B, Qwen2.5-7B and Mistral-7B (dense), Mixtral-8x7B, Qwen3-30B-A3B and
Qwen1.5-MoE-A2.7B (mixture of experts), each its transformers class (LlamaForCausalLM, Qwen2ForCausalLM,
MistralForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM, Qwen2MoeForCausalLM) built from the real
config's sizes (nothing is downloaded) with random bf16 weights and --layers of its decoder layers (every
linear layer and expert keeps its real shape; fewer layers keep memory and compile time down). Experts run
transformers' default for these classes (``grouped_mm``: torch._grouped_mm). Without transformers, the
dense models use a minimal decoder of the same shapes and the output says so; the MoE models need it.

Methods: PyTorch eager, torch.compile (default mode) and torch.compile with max-autotune (Inductor's own
GEMM autotuning; its CUDA graphs off, since every method is captured the same way), each also on twins of
the model sharing its weights with wavetune's parts added one at a time (--wavetune): ``+wavetune`` its
GEMMs (``wavetune.patch(attention=False, experts=False, layers=False)``), ``+layers`` and its layer ops (norms,
gated MLPs with gate and up merged, rotary embeddings), ``+grouped`` and its experts (``wavetune.grouped_gemm``;
MoE models), ``+attention`` all of those and its attention (torch.ops.wavetune.attention for prompts,
torch.ops.wavetune.paged_attention for decode steps). Attention: SDPA for the rest (context_attention
below). Phases:
- prefill (TTFT): a forward over --batches x --lengths prompt tokens, logits of the last position;
- decode: one new token per sequence for --decode-batches sequences, attending to --context cached tokens
  (a static cache, every slot filled: no mask; with --static-cache, transformers' StaticCache with unfilled
  slots beyond them and each attention implementation's own mask). With --layers 1 --no-lm-head its time
  is the time per output token (TPOT) of one decoder layer; --tp N makes the model one tensor-parallel
  rank's slice, --profile adds the share of kernel time in GEMMs, and --pdl-off the fullest twin without
  programmatic dependent launch.
Each (phase, batch, length) is one shape. Per shape every method runs eagerly (compiling where it does,
and checked against eager's logits), is captured as a CUDA graph on one stream, and the graphs are
replayed interleaved (the order rotating) --reps times between CUDA events; the median is kept. Compiles
are static per shape (dynamic=False): Inductor's best case. CUDA graphs keep host time out: the host
cost per call is what `benchmarks/compare.py overhead` measures.

Under WAVETUNE_ARCH the device is labelled "<name>, sm<NN> kernels". Each shape appends one record to
<out>/e2e_<device>.jsonl as soon as it is measured, so a run cut short loses at most the shape in progress;
a new run skips the shapes measured already (with the same methods) and stops starting shapes after
--time-budget-s. --plot (also run at the end of a measuring run) writes
e2e_<device>.md, .json and .png beside it.
"""

from __future__ import annotations

import argparse
import collections
import copy
import datetime
import json
import math
import re
import statistics
import sys
import time
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F

from wavetune.hf_models import MODELS, decode_step_bytes

# Method prefix -> torch.compile mode (None: eager). Inductor's CUDA graphs are off in both compiled
# modes: every method is captured the same way, by this script.
MODES = {"eager": None, "compile": "default", "max-autotune": "max-autotune-no-cudagraphs"}
WAVETUNE, LAYERS, GROUPED, WAVETUNE_ATTENTION = "+wavetune", "+layers", "+grouped", "+attention"
# --wavetune part -> the twin's suffix and what it adds (cumulative, in this order).
PARTS = {"gemm": WAVETUNE, "layers": LAYERS, "grouped": GROUPED, "attention": WAVETUNE_ATTENTION}
SUFFIXES = tuple(PARTS.values())
NO_PDL = "-pdl"  # --pdl-off: the fullest twin again, captured with programmatic dependent launch off
INVARIANT = "-invariant"  # --batch-invariant: the fullest twin again, patched in batch-invariant mode
RERUNS = (NO_PDL, INVARIANT)  # the fullest twin's reruns, each timed against the twin itself
# --torch-routing: the +grouped twin with PyTorch's routing around its grouped GEMMs (what the MoE routing ops bring)
TORCH_ROUTING, TORCH_ROUTING_EXPERTS = "-torch-routing", "wavetune_e2e_torch_routing"
# --fp8: the model's linear layers (not the LM head) quantized to e4m3, run by PyTorch and by wavetune.
FP8_TORCH, FP8 = "+fp8-torch", "+fp8"
ATTENTION = "wavetune_e2e_sdpa"  # the name context_attention is registered under in transformers
WARMUP = 3  # eager calls per method before capture (the first compiles)
MAX_ERROR = 5e-2  # relative error of a method's logits against eager's above which the report flags it


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("e2e-results"), help="directory of the JSONL and the report")
    p.add_argument("--plot", action="store_true", help="only write the report from the JSONL files in --out")
    p.add_argument("--models", default="llama3-8b", help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--layers", type=int, default=4, help="decoder layers per model")
    p.add_argument("--modes", default="eager,compile",
                   help=f"comma-separated, of {', '.join(MODES)} (eager always runs: it is the reference)")
    p.add_argument("--twin-modes", default=None,
                   help="comma-separated modes in which the wavetune twins also run (default: every --modes); e.g. "
                        "eager: max-autotune compiles the unpatched model only")
    p.add_argument("--lengths", type=ints, default=[128, 512, 2048, 8192], help="prefill prompt lengths")
    p.add_argument("--batches", type=ints, default=[1], help="prefill batch sizes")
    p.add_argument("--decode-batches", type=ints, default=[1, 16, 64], help="decode batch sizes (empty: none)")
    p.add_argument("--context", type=int, default=1024, help="cached tokens each decode step attends to")
    p.add_argument("--static-cache", type=int, metavar="SLOTS", default=None,
                   help="decode over transformers' own StaticCache of SLOTS slots (at least --context + 1; the "
                        "rest stay unfilled, as in generate()) through the attention implementations' own masks: "
                        "SDPA for the unpatched model, wavetune's (paged attention) for +attention")
    p.add_argument("--reps", type=int, default=15, help="interleaved replays per method and shape")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree: the model is one rank's slice "
                   "(query and KV heads, MLP and expert widths and the vocabulary divided; no all-reduce)")
    p.add_argument("--pdl-off", action="store_true",
                   help=f"also capture the fullest wavetune twin with programmatic dependent launch off (suffix "
                        f"{NO_PDL}): what PDL alone brings")
    p.add_argument("--batch-invariant", action="store_true",
                   help=f"also the fullest wavetune twin patched in batch-invariant mode (suffix {INVARIANT}): what "
                        "results that do not depend on the batch cost")
    p.add_argument("--torch-routing", action="store_true",
                   help=f"MoE models: also the {GROUPED} twin with PyTorch's routing (sort, histogram, gathers) around its "
                        f"grouped GEMMs instead of wavetune's routing kernels (suffix {GROUPED}{TORCH_ROUTING})")
    p.add_argument("--no-lm-head", dest="lm_head", action="store_false",
                   help="time the decoder layers alone (the last position's hidden state, no LM head): with "
                        "--layers 1, a decoder layer's time per output token")
    p.add_argument("--profile", action="store_true",
                   help="also replay each method's graph once under torch.profiler: its kernel time in GEMMs, "
                        "attention and the rest")
    p.add_argument("--time-budget-s", type=float, default=360.0, help="start no new shape after this")
    p.add_argument("--fp8", choices=("rowwise", "block"),
                   help=f"also twins with FP8 linear layers (per-channel weights and per-token activations, or "
                        f"128-blocks): {FP8_TORCH} runs them as PyTorch does (torch._scaled_mm; block scales: "
                        f"weights dequantized to bf16 per call), {FP8} on wavetune.nn.FP8Linear; an MoE model's "
                        f"experts too (torch._scaled_grouped_mm, block scales: dequantized weights and "
                        f"torch._grouped_mm; wavetune.scaled_grouped_gemm)")
    p.add_argument("--wavetune", default="gemm,grouped",
                   help="comma-separated twins to compare (none: \"\"), each adding a part of wavetune to the one before: "
                        + ", ".join(f"{part} ({suffix})" for part, suffix in PARTS.items()))
    args = p.parse_args(argv)
    args.models, modes = args.models.split(","), {"eager", *args.modes.split(",")}
    unknown = [m for m in args.models if m not in MODELS] + sorted(modes - set(MODES))
    if unknown:
        p.error(f"unknown model or mode: {', '.join(unknown)}")
    args.modes = [m for m in MODES if m in modes]
    twin_modes = set(args.modes if args.twin_modes is None else args.twin_modes.split(","))
    if not twin_modes <= set(args.modes):
        p.error(f"--twin-modes {args.twin_modes} must be among --modes {','.join(args.modes)}")
    args.twin_modes = [m for m in args.modes if m in twin_modes]
    parts = [part for part in args.wavetune.split(",") if part]  # "": no twin but --fp8's
    if not set(parts) <= set(PARTS):
        p.error(f"--wavetune takes {', '.join(PARTS)}, got {args.wavetune}")
    args.suffixes = [suffix for part, suffix in PARTS.items() if part in parts]
    if args.static_cache is not None and args.static_cache <= args.context:
        p.error(f"--static-cache {args.static_cache} must exceed --context {args.context} (the new token's slot)")
    return args


# ------------------------------------------------------------------------------------------------
# Models
# ------------------------------------------------------------------------------------------------


def context_attention(module, query, key, value, attention_mask=None, scaling=None, context_kv=None, **_):
    """Causal attention of the new tokens ([batch, heads, tokens, head_dim]); with ``context_kv`` (per layer, a
    static [batch, kv_heads, context + 1, head_dim] key and value cache) a decode step: the new token's key
    and value go into the last slot and it attends to all of it. transformers' attention-function signature;
    masks are not needed (no padding), which also keeps the step free of host syncs for CUDA graphs. SDPA,
    or on modules marked ``wavetune_attention`` wavetune's attention for prompts and its paged attention for
    decode steps (both take [batch, seq, heads, dim] views, so nothing is transposed in memory)."""
    if context_kv is not None:
        keys, values = context_kv[module.layer_idx]
        keys[:, :, -1:].copy_(key)
        values[:, :, -1:].copy_(value)
        key, value = keys, values
    if getattr(module, "wavetune_attention", False):
        if context_kv is not None:  # as wavetune.hf decodes over a static cache: paged attention on its buffers
            out = torch.ops.wavetune.paged_attention(query[:, :, 0], key.transpose(1, 2), value.transpose(1, 2),
                                                     None, None, None, scaling)
            return out.unsqueeze(1), None
        return torch.ops.wavetune.attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                            True, scaling), None
    out = F.scaled_dot_product_attention(query, key, value, is_causal=context_kv is None, scale=scaling,
                                         enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class OwnLayer(torch.nn.Module):
    """A Llama/Qwen2 decoder layer with transformers' module names (so patch reports read the same)."""

    def __init__(self, s: dict, qkv_bias: bool, layer_idx: int):
        super().__init__()
        hidden, intermediate = s["hidden_size"], s["intermediate_size"]
        self.head_dim, self.layer_idx = hidden // s["num_attention_heads"], layer_idx
        kv = s["num_key_value_heads"] * self.head_dim
        self.self_attn = torch.nn.ModuleDict(dict(
            q_proj=torch.nn.Linear(hidden, hidden, bias=qkv_bias), k_proj=torch.nn.Linear(hidden, kv, bias=qkv_bias),
            v_proj=torch.nn.Linear(hidden, kv, bias=qkv_bias), o_proj=torch.nn.Linear(hidden, hidden, bias=False)))
        self.mlp = torch.nn.ModuleDict(dict(gate_proj=torch.nn.Linear(hidden, intermediate, bias=False),
                                            up_proj=torch.nn.Linear(hidden, intermediate, bias=False),
                                            down_proj=torch.nn.Linear(intermediate, hidden, bias=False)))
        self.input_layernorm = torch.nn.RMSNorm(hidden, eps=s["rms_norm_eps"])
        self.post_attention_layernorm = torch.nn.RMSNorm(hidden, eps=s["rms_norm_eps"])

    def heads(self, t: torch.Tensor) -> torch.Tensor:
        """[batch, tokens, heads * head_dim] -> [batch, heads, tokens, head_dim]"""
        return t.unflatten(-1, (-1, self.head_dim)).transpose(1, 2)

    def forward(self, x, cos, sin, context_kv):
        a, m = self.self_attn, self.mlp
        h = self.input_layernorm(x)
        q, k = rotate(self.heads(a.q_proj(h)), cos, sin), rotate(self.heads(a.k_proj(h)), cos, sin)
        attention, _ = context_attention(self, q, k, self.heads(a.v_proj(h)), context_kv=context_kv)
        x = x + a.o_proj(attention.flatten(-2))
        h = self.post_attention_layernorm(x)
        return x + m.down_proj(F.silu(m.gate_proj(h)) * m.up_proj(h))


class BodyOutput(NamedTuple):  # what the step reads of transformers' BaseModelOutputWithPast
    last_hidden_state: torch.Tensor


class OwnBody(torch.nn.Module):
    """Embedding, decoder layers with rotary positions, final norm: transformers' ``model.model`` interface."""

    def __init__(self, s: dict, qkv_bias: bool, layers: int):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(s["vocab_size"], s["hidden_size"])
        self.layers = torch.nn.ModuleList(OwnLayer(s, qkv_bias, i) for i in range(layers))
        self.norm = torch.nn.RMSNorm(s["hidden_size"], eps=s["rms_norm_eps"])
        head_dim = s["hidden_size"] // s["num_attention_heads"]
        inv_freq = s["rope_theta"] ** -(torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, input_ids, position_ids=None, context_kv=None, use_cache=False):
        x = self.embed_tokens(input_ids)
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        angles = (position_ids[..., None].float() * self.inv_freq).repeat(1, 1, 2)[:, None]
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, context_kv)
        return BodyOutput(self.norm(x))


class OwnDecoder(torch.nn.Module):
    def __init__(self, spec: dict, layers: int):
        super().__init__()
        self.model = OwnBody(spec["sizes"], spec["qkv_bias"], layers)
        self.lm_head = torch.nn.Linear(spec["sizes"]["hidden_size"], spec["sizes"]["vocab_size"], bias=False)


def sliced(spec: dict, tp: int) -> dict:
    """``spec`` as one of ``tp`` tensor-parallel ranks holds it (Megatron's split: column-parallel q/k/v,
    gate/up, experts' gate/up and the LM head; row-parallel o and down): heads, KV heads (at least one),
    MLP and expert widths and the vocabulary divided by ``tp``; the head dim kept."""
    if tp == 1:
        return spec
    s = dict(spec["sizes"])
    s.setdefault("head_dim", s["hidden_size"] // s["num_attention_heads"])
    for key in ("num_attention_heads", "intermediate_size", "moe_intermediate_size",
                "shared_expert_intermediate_size", "vocab_size"):
        if key in s:
            if s[key] % tp:
                raise SystemExit(f"{key}={s[key]} does not split over {tp} ranks")
            s[key] //= tp
    s["num_key_value_heads"] = max(1, s["num_key_value_heads"] // tp)
    return {**spec, "sizes": s}


def model_label(name: str, tp: int, lm_head: bool = True, static_cache: int | None = None) -> str:
    """How records name a model: with its tensor-parallel degree, ``.no-lm-head`` without its LM head, and
    ``.static-cache<slots>`` when it decodes over transformers' StaticCache."""
    return (name + (f".tp{tp}" if tp > 1 else "") + ("" if lm_head else ".no-lm-head")
            + (f".static-cache{static_cache}" if static_cache else ""))


def build_model(spec: dict, layers: int, device: str, attention: str = ATTENTION) -> tuple[torch.nn.Module, str]:
    """(model with random bf16 weights in eval mode, what built it) for a MODELS entry; ``attention``: its
    transformers attention implementation (this script's context_attention, or "sdpa" to decode over
    transformers' own caches)."""
    try:
        import transformers
        from transformers import AttentionInterface
    except ImportError as exc:
        if spec.get("moe") or attention != ATTENTION:
            raise SystemExit(f"the {spec['family']} model (or --static-cache) needs transformers ({exc})") from None
        print(f"transformers is not available ({exc}): using this script's own {spec['family']}-shaped decoder "
              "(same linear layers, RMSNorm, rotary positions, SDPA)", file=sys.stderr)
        builder, source = (lambda: OwnDecoder(spec, layers)), "own decoder (transformers missing)"
    else:
        AttentionInterface.register(ATTENTION, context_attention)
        config = getattr(transformers, f"{spec['family']}Config")(
            **spec["sizes"], num_hidden_layers=layers, tie_word_embeddings=False, attn_implementation=attention)
        model_class = getattr(transformers, f"{spec['family']}ForCausalLM")
        builder, source = (lambda: model_class(config)), f"transformers {transformers.__version__} {model_class.__name__}"
    with torch.device(device):
        model = builder()
    return model.to(torch.bfloat16).eval(), source


def twin_of(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` sharing its parameters."""
    return copy.deepcopy(model, memo={id(p): p for p in model.parameters()})


def patched_twin(model: torch.nn.Module, suffix: str = WAVETUNE, batch_invariant: bool = False):
    """A twin of ``model`` with wavetune's parts up to ``suffix``'s (PARTS), in batch-invariant mode where asked;
    and the patch report. A model on this script's context_attention keeps it, on wavetune's kernels from
    ``+attention`` on (its mark), since a decode step attends to the static context it is given; one on
    transformers' own attention takes wavetune's implementation of it (``wavetune.hf``) from ``+attention`` on."""
    import wavetune

    twin = twin_of(model)
    added = SUFFIXES[:SUFFIXES.index(suffix) + 1]
    own_attention = getattr(getattr(model, "config", None), "_attn_implementation", ATTENTION) == ATTENTION
    report = wavetune.patch(twin, attention=suffix == WAVETUNE_ATTENTION and not own_attention,
                            experts=GROUPED in added, layers=LAYERS in added, batch_invariant=batch_invariant)
    if suffix == WAVETUNE_ATTENTION and own_attention:
        for module in twin.modules():
            if hasattr(module, "layer_idx"):
                module.wavetune_attention = True
    return twin, report


def torch_routing_twin(model: torch.nn.Module) -> torch.nn.Module:
    """The +grouped twin of ``model`` with its experts' routing in PyTorch operations (``torch_routed_experts``):
    wavetune's grouped GEMMs and layer ops, PyTorch's sort, histogram and gathers."""
    from transformers.integrations.moe import ExpertsInterface

    from wavetune import hf

    def forward(self, hidden_states, top_k_index, top_k_weights):
        if hf.experts_fallback_reason(self, hidden_states) is not None:  # as the +grouped twin falls back
            return hf.experts_forward(self, hidden_states, top_k_index, top_k_weights)
        return hf.torch_routed_experts(self, hidden_states, top_k_index, top_k_weights, lambda rows, name, offsets:
                                       hf.run_grouped_gemm(rows, getattr(self, f"{name}_proj"), offsets))

    ExpertsInterface.register(TORCH_ROUTING_EXPERTS, forward)
    twin, _ = patched_twin(model, GROUPED)
    twin.set_experts_implementation(TORCH_ROUTING_EXPERTS)
    return twin


class TorchFP8Linear(torch.nn.Module):
    """The PyTorch way to run an FP8 layer (wavetune.nn.FP8Linear's parameters, shared): per-token activation
    scales from torch ops and torch._scaled_mm; with 128-block scales, the weight dequantized to bf16 on each
    call and F.linear (what transformers' FP8 layer falls back to without its kernels)."""

    def __init__(self, layer):
        import wavetune
        from wavetune.families.grouped_gemm.measure import quantize_rows

        super().__init__()
        self.dequantize = wavetune.dequantize_fp8  # plain torch ops, in the activations' dtype
        self.quantize = quantize_rows  # plain torch ops, per token
        self.weight, self.weight_scale, self.bias, self.block = layer.weight, layer.weight_scale, layer.bias, \
            layer.block_scales

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, k = self.weight.shape
        if self.block:
            return F.linear(x, self.dequantize(self.weight, self.weight_scale, dtype=x.dtype), self.bias)
        q, scale = self.quantize(x.reshape(-1, k))
        out = torch._scaled_mm(q, self.weight.t(), scale.unsqueeze(-1), self.weight_scale.view(1, -1),
                               bias=self.bias, out_dtype=x.dtype)
        return out.reshape(*x.shape[:-1], n)


# --fp8 on an MoE model: its experts in e4m3 too, with the linear layers' scales (per expert output channel
# and per token, or per 128x128 weight block and 1x128 token group), as transformers experts implementations
# of this script's (registered under these names). wavetune's twin quantizes activations with
# wavetune.quantize_fp8 and runs wavetune.scaled_grouped_gemm; PyTorch's quantizes per token with torch ops
# and runs torch._scaled_grouped_mm, or with block scales runs torch._grouped_mm on its bf16 activations and
# the weights dequantized per call (it has no block-scaled grouped GEMM on Hopper), as its linear layers do.
FP8_EXPERTS = {FP8: "wavetune_e2e_fp8", FP8_TORCH: "wavetune_e2e_fp8_torch"}


def fp8_experts_forward(quantize, run, routing):
    """An experts forward on the module's e4m3 weights (``quantize_experts``): ``quantize(rows)`` gives the
    GEMM's activations and their scales, ``run(q, w, q_scale, w_scale, offsets)`` the grouped GEMM, ``routing``
    (``wavetune.hf.routed_experts`` or PyTorch's ``torch_routed_experts``) the rest."""
    def forward(self, hidden_states, top_k_index, top_k_weights):
        def project(rows, name, offsets):
            weight, weight_scale = self.fp8_weights[name]
            q, q_scale = quantize(rows)
            return run(q, weight, q_scale, weight_scale, offsets)

        return routing(self, hidden_states, top_k_index, top_k_weights, project)

    return forward


def register_fp8_experts(block: bool) -> None:
    from transformers.integrations.moe import ExpertsInterface

    from wavetune import hf
    from wavetune.families.grouped_gemm.measure import BLOCK, dequantize_experts, quantize_rows

    group_size = BLOCK if block else None
    ExpertsInterface.register(FP8_EXPERTS[FP8], fp8_experts_forward(
        lambda rows: torch.ops.wavetune.quantize_fp8(rows, None, group_size),
        lambda q, w, qs, ws, offsets: torch.ops.wavetune.scaled_grouped_gemm(q, w, qs, ws, offsets, torch.bfloat16),
        hf.routed_experts))
    if block:
        torch_experts = fp8_experts_forward(lambda rows: (rows, None), lambda x, w, _, ws, offsets: torch._grouped_mm(
            x, dequantize_experts(w, ws, BLOCK, x.dtype).transpose(-2, -1), offs=offsets), hf.torch_routed_experts)
    else:
        torch_experts = fp8_experts_forward(quantize_rows, lambda q, w, qs, ws, offsets: torch._scaled_grouped_mm(
            q, w.transpose(-2, -1), qs, ws, offs=offsets, out_dtype=torch.bfloat16), hf.torch_routed_experts)
    ExpertsInterface.register(FP8_EXPERTS[FP8_TORCH], torch_experts)


def quantize_experts(model: torch.nn.Module, block: bool) -> dict:
    """Each experts module of ``model`` -> {weight name: (e4m3 weights [experts, N, K], float32 scales
    [experts, N], or [experts, N/128, K/128] with ``block``)} of its gate/up and down weights."""
    from wavetune.families.grouped_gemm.measure import quantize

    weights = {}
    for module in model.modules():
        if hasattr(module, "has_gate") and hasattr(module, "down_proj"):
            names = ("gate_up" if module.has_gate else "up", "down")
            weights[module] = {name: quantize(getattr(module, f"{name}_proj").detach(), "block128" if block else "row",
                                              "w") for name in names}
    return weights


def fp8_twins(model: torch.nn.Module, block: bool) -> dict:
    """{FP8_TORCH: ..., FP8: ...}: twins of ``model`` whose linear layers (LM head aside) and experts hold the
    same e4m3 weights and scales, run by PyTorch and by wavetune."""
    import wavetune.nn

    fast = twin_of(model)
    wavetune.nn.quantize_model(fast, block_scales=block)
    plain = twin_of(fast)
    for name, module in list(plain.named_modules()):
        if isinstance(module, wavetune.nn.FP8Linear):
            parent, _, attribute = name.rpartition(".")
            setattr(plain.get_submodule(parent), attribute, TorchFP8Linear(module))
    twins = {FP8_TORCH: plain, FP8: fast}
    experts = quantize_experts(model, block)
    if experts:
        register_fp8_experts(block)
        by_name = {name: experts[module] for name, module in model.named_modules() if module in experts}
        for suffix, twin in twins.items():
            for name, module in twin.named_modules():
                if name in by_name:
                    module.fp8_weights = by_name[name]
            twin.set_experts_implementation(FP8_EXPERTS[suffix])
    return twins


def step_function(model: torch.nn.Module, lm_head: bool = True):
    """The step a method times: the decoder layers, then the LM head on the last position (the next token's
    logits: all TTFT needs), or without ``lm_head`` that position's hidden state."""
    def step(input_ids, position_ids=None, context_kv=None, past_key_values=None):
        if past_key_values is None:
            hidden = model.model(input_ids=input_ids, position_ids=position_ids, context_kv=context_kv,
                                 use_cache=False).last_hidden_state
        else:  # every replay writes the same slot: each layer's count goes back to the position first
            for layer in past_key_values.layers:
                layer.cumulative_length.copy_(position_ids[0, 0])
            hidden = model.model(input_ids=input_ids, position_ids=position_ids, past_key_values=past_key_values,
                                 use_cache=True).last_hidden_state
        return model.lm_head(hidden[:, -1:]) if lm_head else hidden[:, -1:]

    return step


def methods(model, twins: dict, modes: list[str], lm_head: bool = True, twin_modes: list[str] | None = None) -> dict:
    """Method name -> its step function (compiled lazily, statically per shape, by torch.compile); ``twins``:
    suffix -> a twin of the model, run in ``twin_modes`` (default: every mode)."""
    steps = {}
    for mode in modes:
        for suffix, m in (("", model), *(twins.items() if twin_modes is None or mode in twin_modes else ())):
            step = step_function(m, lm_head)
            step = step if MODES[mode] is None else torch.compile(step, mode=MODES[mode], dynamic=False)
            steps[mode + suffix] = without_pdl(step) if suffix.endswith(NO_PDL) else step
    return steps


def without_pdl(step):
    """``step`` with wavetune's programmatic dependent launch off while it runs (and is captured)."""
    from wavetune import _C

    def run(**inputs):
        before = _C.programmatic_launch()
        _C.set_programmatic_launch(False)
        try:
            return step(**inputs)
        finally:
            _C.set_programmatic_launch(before)

    return run


# ------------------------------------------------------------------------------------------------
# Measuring (GPU)
# ------------------------------------------------------------------------------------------------


def shape_inputs(spec: dict, layers: int, phase: str, batch: int, length: int, device: str = "cuda",
                 static_cache: tuple | None = None) -> dict:
    """Static inputs of one shape: prompt tokens, or one token per sequence after ``length`` cached ones: in
    per-layer context tensors, or with ``static_cache`` = (model config, slots) in a transformers StaticCache
    whose other slots stay unfilled."""
    s = spec["sizes"]
    if phase == "prefill":
        return dict(input_ids=torch.randint(0, s["vocab_size"], (batch, length), device=device))
    head_dim = s.get("head_dim", s["hidden_size"] // s["num_attention_heads"])
    inputs = dict(input_ids=torch.randint(0, s["vocab_size"], (batch, 1), device=device),
                  position_ids=torch.full((batch, 1), length, device=device))
    if static_cache is None:
        shape = (batch, s["num_key_value_heads"], length + 1, head_dim)
        inputs["context_kv"] = [tuple(torch.randn(shape, device=device, dtype=torch.bfloat16) for _ in "kv")
                                for _ in range(layers)]
        return inputs
    from transformers import StaticCache

    config, slots = static_cache
    cache = StaticCache(config=config, max_cache_len=slots)
    cache.early_initialization(batch, s["num_key_value_heads"], head_dim, torch.bfloat16, torch.device(device))
    for layer in cache.layers:
        layer.keys[:, :, :length].normal_()
        layer.values[:, :, :length].normal_()
    return dict(inputs, past_key_values=cache)


def relative_error(result: torch.Tensor, reference: torch.Tensor) -> float:
    return ((result.float() - reference).norm() / reference.norm()).item()


def capture(step, inputs: dict, stream, pool) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """A CUDA graph of one step, after WARMUP eager steps (compiling, where it does) on the capture stream
    (wavetune sizes its split-K workspace per stream); and the eager logits."""
    stream.wait_stream(torch.cuda.current_stream())  # the inputs were made on the current stream
    with torch.cuda.stream(stream):
        for _ in range(WARMUP):
            logits = step(**inputs)
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, stream=stream):
        step(**inputs)
    return graph, logits


def capture_all(steps: dict, inputs: dict, stream) -> tuple[dict, dict]:
    """The methods' graphs, and the record's fields: each method's logits error against eager's, its warm-up
    seconds (compile time included), and the methods that failed, with the error. One memory pool for all
    graphs: they are replayed one at a time on one stream."""
    graphs, fields = {}, {"error": {}, "warmup_s": {}, "failed": {}}
    pool, reference = torch.cuda.graph_pool_handle(), None
    for name, step in steps.items():
        start = time.perf_counter()
        try:
            graphs[name], logits = capture(step, inputs, stream, pool)
        except Exception as exc:  # one method's failure (a compile error, out of memory) must not end the run
            fields["failed"][name] = f"{type(exc).__name__}: {exc}"[:500]
            print(f"{name} failed: {fields['failed'][name]}", file=sys.stderr, flush=True)
            continue
        fields["warmup_s"][name] = round(time.perf_counter() - start, 2)
        reference = logits.float() if name == "eager" else reference
        fields["error"][name] = None if reference is None else relative_error(logits, reference)
    return graphs, fields


def time_interleaved(graphs: dict, reps: int, stream) -> dict:
    """Median ms per method over ``reps`` rounds that replay every graph once, in a rotating order."""
    names = list(graphs)
    samples = {name: [] for name in names}
    with torch.cuda.stream(stream):
        for graph in [*graphs.values()] * 2:
            graph.replay()  # the first replay uploads the graph; both warm the clocks
        for rep in range(reps):
            order = names[rep % len(names):] + names[:rep % len(names)]
            events = {name: (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for name in order}
            for name in order:
                events[name][0].record()
                graphs[name].replay()
                events[name][1].record()
            stream.synchronize()
            for name, (start, end) in events.items():
                samples[name].append(start.elapsed_time(end))
    return {name: statistics.median(times) for name, times in samples.items()}


# What a kernel's name says it is, for --profile: GEMMs (cuBLAS's nvjet/xmma/gemm kernels and the reduction of
# its split-K kernels, CUTLASS's, wavetune's decode and grouped kernels, Inductor's matmul templates), attention
# (FlashAttention, cuDNN, CUTLASS's FMHA), and the rest (norms, rotary, activations, copies).
KERNEL_KINDS = (("gemm", re.compile(r"gemm|gemv|nvjet|xmma|cutlass|decode_gemm|splitKreduce|tem_fused_.*mm|_mm_",
                                    re.I)),
                ("attention", re.compile(r"attention|flash|fmha|cudnn|sdpa", re.I)))
KINDS = (*(kind for kind, _ in KERNEL_KINDS), "other")


def kernel_kind(name: str) -> str:
    return next((kind for kind, pattern in KERNEL_KINDS if pattern.search(name)), KINDS[-1])


def kernel_ms(graphs: dict, stream) -> dict:
    """Per method, ms of GPU kernel time in one replay of its graph by kernel kind (torch.profiler), and the
    five longest kernels of kind "other" (name, ms)."""
    from torch.profiler import ProfilerActivity, profile

    out = {}
    with torch.cuda.stream(stream):
        for name, graph in graphs.items():
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                graph.replay()
                stream.synchronize()
            kinds = dict.fromkeys(KINDS, 0.0)
            others = collections.Counter()
            for event in prof.events():  # the kernels, as device events
                if event.device_type == torch.autograd.DeviceType.CUDA:
                    kind, ms = kernel_kind(event.name), event.time_range.elapsed_us() / 1e3
                    kinds[kind] += ms
                    if kind == KINDS[-1]:
                        others[event.name[:120]] += ms
            out[name] = {**kinds, "longest_other": others.most_common(5)}
    return out


def measure_shape(steps: dict, inputs: dict, reps: int, stream, profile: bool = False) -> dict:
    with torch.inference_mode():
        graphs, fields = capture_all(steps, inputs, stream)
        ms = time_interleaved(graphs, reps, stream) if graphs else {}
        if profile and graphs:
            fields["kernel_ms"] = kernel_ms(graphs, stream)
    del graphs
    torch._dynamo.reset()  # static compiles: drop this shape's code (and keep under the recompile limit)
    torch.cuda.empty_cache()
    return {"ms": ms, **fields}


def shapes(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    prefill = [("prefill", b, length) for b in args.batches for length in args.lengths]
    return prefill + [("decode", b, args.context) for b in args.decode_batches]


def device_label() -> str:
    """The GPU's name, and the architecture its kernels are served as where WAVETUNE_ARCH names an older one."""
    from wavetune import _C

    major, minor = torch.cuda.get_device_capability()
    served = _C.served_compute_capability()
    name = torch.cuda.get_device_name()
    return name if served in (0, 10 * major + minor) else f"{name}, sm{served} kernels"


def device_slug() -> str:
    from wavetune.runtime.tables import table_slug

    return table_slug(device_label())


def header() -> dict:
    import wavetune

    try:
        import transformers
        transformers_version = transformers.__version__
    except ImportError:
        transformers_version = None
    return {"type": "header", "device": device_label(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers_version,
            "wavetune": wavetune.__version__, "command": " ".join(sys.argv)}


def read_records(path: Path) -> tuple[list[dict], list[dict]]:
    """(headers, shape records) of a JSONL file written by ``run``."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return [r for r in lines if r.get("type") == "header"], [r for r in lines if r.get("type") == "shape"]


def shape_key(record: dict) -> tuple:
    return record["model"], record["layers"], record["phase"], record["batch"], record["length"]


def model_suffixes(args: argparse.Namespace, spec: dict) -> list[str]:
    """The twins a model gets of those asked for: +grouped only with experts (else it is +wavetune); with
    --pdl-off, the last of them again without PDL; with --batch-invariant, in batch-invariant mode."""
    suffixes = [suffix for suffix in args.suffixes if suffix != GROUPED or spec.get("moe")]
    suffixes += [GROUPED + TORCH_ROUTING] if args.torch_routing and spec.get("moe") else []
    reruns = [rerun for rerun, asked in zip(RERUNS, (args.pdl_off, args.batch_invariant)) if asked]
    return suffixes + [suffixes[-1] + rerun for rerun in reruns] if suffixes else suffixes


def pending(args: argparse.Namespace, name: str, done: list[dict]) -> list[tuple[str, int, int]]:
    """The shapes of model ``name`` (at --tp) that no record has measured with every requested method yet."""
    fp8 = (FP8_TORCH, FP8) if args.fp8 else ()
    twins = (*model_suffixes(args, MODELS[name]), *fp8)
    wanted = set(args.modes) | {mode + suffix for mode in args.twin_modes for suffix in twins}
    measured: dict[tuple, set] = {}
    for r in done:
        if r["model"] == model_label(name, args.tp, args.lm_head, args.static_cache) and r["layers"] == args.layers:
            measured.setdefault(shape_key(r)[2:], set()).update(r["ms"])
    return [shape for shape in shapes(args) if not wanted <= measured.get(shape, set())]


def measure_model(args: argparse.Namespace, name: str, todo: list, path: Path, stream, deadline: float) -> None:
    """Build the model and its patched twin, then measure and append each shape until the deadline."""
    spec, label = sliced(MODELS[name], args.tp), model_label(name, args.tp, args.lm_head, args.static_cache)
    model, source = build_model(spec, args.layers, "cuda", ATTENTION if args.static_cache is None else "sdpa")
    twins = {}
    for suffix in model_suffixes(args, spec):
        if suffix.endswith(NO_PDL):
            twins[suffix] = twins[suffix.removesuffix(NO_PDL)]  # the same twin; methods() turns PDL off
            continue
        if suffix.endswith(INVARIANT):
            twins[suffix], report = patched_twin(model, suffix.removesuffix(INVARIANT), batch_invariant=True)
            print(f"{label} ({source}, {args.layers} layers) {suffix}: {report}", flush=True)
            continue
        if suffix.endswith(TORCH_ROUTING):
            twins[suffix] = torch_routing_twin(model)
            continue
        twins[suffix], report = patched_twin(model, suffix)
        print(f"{label} ({source}, {args.layers} layers) {suffix}: {report}", flush=True)
    if args.fp8:
        twins.update(fp8_twins(model, args.fp8 == "block"))
    steps = methods(model, twins, args.modes, args.lm_head, args.twin_modes)
    for phase, batch, length in todo:
        if time.monotonic() > deadline:
            print(f"time budget of {args.time_budget_s:.0f} s spent: not starting {name} {phase} batch {batch} "
                  f"length {length} or later shapes", flush=True)
            return
        cache = None if args.static_cache is None else (model.config, args.static_cache)
        result = measure_shape(steps, shape_inputs(spec, args.layers, phase, batch, length, static_cache=cache),
                               args.reps, stream, args.profile)
        record = {"type": "shape", "model": label, "source": source, "layers": args.layers, "phase": phase,
                  "batch": batch, "length": length, "reps": args.reps, **result}
        if phase == "decode" and hasattr(model, "config"):  # the new token's key and value are read too
            record["step_bytes"] = decode_step_bytes(model, length + 1, batch, args.lm_head)
        with path.open("a") as log:
            log.write(json.dumps(record) + "\n")
        print(f"{label} {phase} batch {batch} length {length}: " +
              ", ".join(f"{m} {t:.3f} ms" for m, t in result["ms"].items()), flush=True)


def run(args: argparse.Namespace) -> Path:
    """Measure what the options ask for and the JSONL lacks; returns the JSONL's path."""
    deadline = time.monotonic() + args.time_budget_s
    path = args.out / f"e2e_{device_slug()}.jsonl"
    args.out.mkdir(parents=True, exist_ok=True)
    _, done = read_records(path)
    with path.open("a") as log:
        log.write(json.dumps(header()) + "\n")
    stream = torch.cuda.Stream()  # one capture stream for the whole run (wavetune's workspaces are per stream)
    for name in args.models:
        todo = pending(args, name, done)
        if todo and time.monotonic() < deadline:
            measure_model(args, name, todo, path, stream, deadline)
            torch.cuda.empty_cache()
    return path


# ------------------------------------------------------------------------------------------------
# Report (no GPU)
# ------------------------------------------------------------------------------------------------


def merged(records: list[dict]) -> dict:
    """Shape key -> {"ms": {method: ms}, "speedup": {method: eager ms / ms}, "gain": {suffix: {mode: mode ms /
    (mode + suffix) ms}}, "error": {...}, "failed": {...}}, each method from the latest record that has it;
    ratios only within one record (interleaved measurements)."""
    table: dict[tuple, dict] = {}
    for r in records:
        entry = table.setdefault(shape_key(r), {"ms": {}, "speedup": {}, "gain": {}, "error": {}, "failed": {},
                                                "kernel_ms": {}})
        entry["failed"].update(r.get("failed", {}))
        entry["kernel_ms"].update(r.get("kernel_ms", {}))
        entry["step_bytes"] = r.get("step_bytes", entry.get("step_bytes"))
        for method, ms in r["ms"].items():
            entry["ms"][method], entry["error"][method] = ms, r["error"][method]
            if "eager" in r["ms"]:
                entry["speedup"][method] = r["ms"]["eager"] / ms
            for suffix in SUFFIXES:
                if method.endswith(suffix) and (base := method.removesuffix(suffix)) in r["ms"]:
                    entry["gain"].setdefault(suffix, {})[base] = r["ms"][base] / ms
            for rerun in RERUNS:  # the rerun's time over the twin's
                if method.endswith(rerun) and (twin := method.removesuffix(rerun)) in r["ms"]:
                    entry["gain"].setdefault(rerun, {})[twin] = ms / r["ms"][twin]
            if method.endswith(FP8) and (plain := method.removesuffix(FP8) + FP8_TORCH) in r["ms"]:
                entry["gain"].setdefault(FP8, {})[method.removesuffix(FP8)] = r["ms"][plain] / ms
    return table


def method_order(table: dict) -> list[str]:
    present = {m for entry in table.values() for m in (*entry["ms"], *entry["failed"])}
    return [m + s for m in MODES
            for s in ("", *SUFFIXES, GROUPED + TORCH_ROUTING, *(x + r for r in RERUNS for x in SUFFIXES), FP8_TORCH,
                      FP8)
            if m + s in present]


PHASES = {"prefill": "prompt length", "decode": "context"}  # report order, and what `length` is


def markdown(headers: list[dict], table: dict) -> str:
    methods_ = method_order(table)
    h = headers[-1]
    lines = [f"# End to end: {h['device']}", "",
             f"Measured {', '.join(sorted({x['date'] for x in headers}))}; torch {h['torch']} (CUDA {h['cuda']}), "
             f"transformers {h['transformers']}, wavetune {h['wavetune']}.", "",
             "Median ms per step over interleaved CUDA-graph replays, and in brackets the speedup over PyTorch "
             "eager (above 1: faster). Prefill: the prompt's forward up to the next token's logits (TTFT); decode: "
             "one token per sequence after `context` cached tokens. `+wavetune`: the same model with wavetune's "
             "GEMMs; `+layers`: and its layer ops (norms, gated MLPs, rotary embeddings); `+grouped`: and its "
             "experts; `+attention`: and its attention; `-pdl`: without programmatic dependent launch; "
             "`-invariant`: patched in batch-invariant mode; "
             "`+fp8-torch` and `+fp8`: the "
             "model's linear layers in FP8 (e4m3), run by PyTorch and by wavetune. Errors: relative error of a "
             "method's logits against eager's; "
             f"flagged (!) above {MAX_ERROR} or where eager failed; the JSON has them, the compile times and "
             "why a method failed.", ""]
    groups = sorted({k[:3] for k in table}, key=lambda g: (g[0], g[1], list(PHASES).index(g[2])))
    for model, layers, phase in groups:
        keys = sorted(k for k in table if k[:3] == (model, layers, phase))
        lines += [f"## {model}, {layers} layers, {phase}", "",
                  f"| batch | {PHASES[phase]} | " + " | ".join(methods_) + " |", "|---|---|" + "---|" * len(methods_)]
        lines += [f"| {k[3]} | {k[4]} | " + " | ".join(cell(table[k], m) for m in methods_) + " |" for k in keys]
        lines += ["", *wavetune_summary([table[k] for k in keys]), *gemm_shares([table[k] for k in keys]),
                  *bandwidths([(k[3], table[k]) for k in keys]), ""]
    return "\n".join(lines)


def bandwidths(entries: list[tuple[int, dict]]) -> list[str]:
    """Per decode batch, each method's effective bandwidth: the bytes a step must read (weights once, the routed
    share of the experts, the keys and values cached: hf_models.decode_step_bytes) over its time."""
    rows = [f"batch {batch}: " + ", ".join(f"{method} {e['step_bytes'] / (ms * 1e-3) / 1e12:.2f}"
                                          for method, ms in e["ms"].items())
            for batch, e in entries if e.get("step_bytes")]
    return ["- effective bandwidth, TB/s (the bytes a step must read over its time): " + "; ".join(rows)] if rows else []


def gemm_shares(entries: list[dict]) -> list[str]:
    """Per method, the share of its kernel time spent in GEMMs (--profile), over the shapes that have it."""
    shares: dict[str, list[float]] = {}
    for e in entries:
        for method, kinds in e.get("kernel_ms", {}).items():
            total = sum(kinds[kind] for kind in KINDS)
            if total > 0:
                shares.setdefault(method, []).append(kinds["gemm"] / total)
    if not shares:
        return []
    return ["- GEMMs' share of kernel time (one profiled replay per shape): " + ", ".join(
        f"{method} {100 * statistics.fmean(v):.0f}%" for method, v in shares.items())]


def wavetune_summary(entries: list[dict]) -> list[str]:
    """Per mode, how wavetune (its GEMMs; + experts; + attention) changes its time over the shapes (merged's
    "gain")."""
    lines = []
    for suffix, against, meaning in [*((s, "", "above 1: wavetune faster") for s in SUFFIXES),
                                     (FP8, FP8_TORCH, "FP8 layers on wavetune against PyTorch")]:
        for mode in MODES:
            ratios = [e["gain"][suffix][mode] for e in entries if mode in e["gain"].get(suffix, {})]
            if ratios:
                geomean = math.exp(statistics.fmean(map(math.log, ratios)))
                lines.append(f"- {mode}{suffix} against {mode}{against}: {geomean:.3f}x geomean, from "
                             f"{min(ratios):.2f}x to {max(ratios):.2f}x over {len(ratios)} shapes ({meaning})")
    for method, ratios in rerun_ratios(entries, NO_PDL).items():
        geomean = math.exp(statistics.fmean(map(math.log, ratios)))
        lines.append(f"- PDL in {method}: {geomean:.3f}x geomean over {method}{NO_PDL}, from {min(ratios):.2f}x to "
                     f"{max(ratios):.2f}x over {len(ratios)} shapes")
    for method, ratios in rerun_ratios(entries, INVARIANT).items():
        geomean = math.exp(statistics.fmean(map(math.log, ratios)))
        lines.append(f"- batch-invariant mode in {method}: {geomean:.3f}x geomean of its time ({method}{INVARIANT} "
                     f"over {method}; above 1: slower), from {min(ratios):.2f}x to {max(ratios):.2f}x over "
                     f"{len(ratios)} shapes")
    return lines


def rerun_ratios(entries: list[dict], rerun: str) -> dict[str, list[float]]:
    """Per twin with that rerun, the rerun's time over the twin's, per shape that has both."""
    methods_ = sorted({m for e in entries for m in e["gain"].get(rerun, {})})
    return {m: [e["gain"][rerun][m] for e in entries if m in e["gain"].get(rerun, {})] for m in methods_}


def cell(entry: dict, method: str) -> str:
    if method not in entry["ms"]:
        return "failed" if method in entry["failed"] else ""
    error = entry["error"][method]
    flag = " (!)" if error is None or error > MAX_ERROR else ""
    speedup = entry["speedup"].get(method)
    return f"{entry['ms'][method]:.3f}" + (f" ({speedup:.2f}x)" if speedup and method != "eager" else "") + flag


def plot(table: dict, title: str, path: Path) -> bool:
    """Speedup over eager: per (model, prefill batch) against prompt length, per (model, decode context)
    against batch."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no picture", file=sys.stderr)
        return False
    # (model, layers, phase, what stays fixed) -> the keys along the x axis, and its index in the key
    panels: dict[tuple, list] = {}
    for k in sorted(table):
        fixed = k[3] if k[2] == "prefill" else k[4]
        panels.setdefault((*k[:3], fixed), []).append(k)
    if not panels:
        return False
    models = sorted({p[:2] for p in panels})
    columns = max(sum(p[:2] == m for p in panels) for m in models)
    figure, axes = plt.subplots(len(models), columns, figsize=(5 * columns, 3.6 * len(models)), squeeze=False)
    for row, model in enumerate(models):
        mine = sorted((p for p in panels if p[:2] == model), key=lambda p: (list(PHASES).index(p[2]), p[3]))
        for ax, panel in zip(axes[row], mine):
            keys, x = panels[panel], 4 if panel[2] == "prefill" else 3
            for method in [m for m in method_order(table) if m != "eager"]:
                points = [(k[x], table[k]["speedup"][method]) for k in keys if method in table[k]["speedup"]]
                if points:
                    ax.plot(*zip(*points), marker="o", linestyle="-" if "+" in method else "--", label=method)
            ax.axhline(1.0, color="gray", linewidth=0.8)
            what = (f"prefill, batch {panel[3]}", "prompt length (tokens)", "TTFT") if panel[2] == "prefill" else \
                (f"decode, {panel[3]} cached", "batch", "TPOT")
            ax.set(xscale="log", xlabel=what[1], ylabel=f"{what[2]} speedup over eager",
                   title=f"{model[0]} ({model[1]} layers), {what[0]}")
            ax.set_xticks([k[x] for k in keys], [str(k[x]) for k in keys])
            ax.minorticks_off()
            ax.legend(fontsize=7)
        for ax in axes[row][len(mine):]:
            ax.axis("off")
    figure.suptitle(title, fontsize=10)
    figure.tight_layout(rect=(0, 0, 1, 1 - 0.4 / figure.get_figheight()))  # room for the title
    figure.savefig(path, dpi=110)
    return True


def report(out: Path) -> None:
    paths = sorted(out.glob("e2e_*.jsonl"))
    if not paths:
        sys.exit(f"no e2e_*.jsonl in {out}: measure first (without --plot)")
    for path in paths:
        headers, records = read_records(path)
        if not records:
            continue
        table = merged(records)
        path.with_suffix(".md").write_text(markdown(headers, table))
        rows = [dict(zip(("model", "layers", "phase", "batch", "length"), k), **v) for k, v in sorted(table.items())]
        path.with_suffix(".json").write_text(json.dumps({"headers": headers, "shapes": rows}, indent=1) + "\n")
        dates = ", ".join(sorted({h["date"][:10] for h in headers}))
        drew = plot(table, f"{headers[-1]['device']}, {dates}: with and without wavetune", path.with_suffix(".png"))
        print(f"wrote {path.with_suffix('.md')}, .json{', .png' if drew else ''}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not args.plot:
        if not torch.cuda.is_available():
            sys.exit("measuring needs a CUDA GPU (a Hopper one for wavetune); --plot reports without one")
        run(args)
    report(args.out)


if __name__ == "__main__":
    main()

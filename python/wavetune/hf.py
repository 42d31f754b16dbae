"""wavetune inside Hugging Face ``transformers`` model classes (the ``wavetune[hf]`` extra).

``register()`` adds an implementation named ``"wavetune"`` to transformers' own registries: an experts
forward (``ExpertsInterface``: every class decorated with ``use_experts_implementation``, e.g. Mixtral,
Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-V3) that runs the routed experts through ``wavetune.grouped_gemm``,
one for the experts of FP8 checkpoints (``FP8ExpertsInterface``: the fine-grained FP8 integration's
``FP8Experts``, e4m3 weights with float32 scales per 128x128 block) that runs them through
``wavetune.scaled_grouped_gemm`` on the checkpoint's own tensors, and an attention function
(``AttentionInterface``) with its mask function (``AttentionMaskInterface``): prompts run
``wavetune.attention``, decode steps over a static cache ``wavetune.paged_attention`` on the cache's own
buffers, reading only the filled slots. ``wavetune.patch`` calls ``patch_model`` for a transformers model:
it registers them, switches the model to them and reports what it switched.

Each falls back, per call, to the implementation the model had before the patch where wavetune's kernels
do not apply: a CPU tensor, a dtype other than bf16/fp16, expert biases or transposed expert weights, grouped
variants the GPU's grouped table chooses from that are not compiled yet, FP8 experts with other scales (FP4,
per-row, static activation scales), a head dim no compiled attention variant takes, an attention mask
(padding, a sliding window that binds, a padding mask that cannot be read while a graph is captured or
compiled), dropout in training, soft-capping or attention sinks. Which of these a model hits depends on its
inputs, so the patch report names the implementations switched, and
``experts_fallback_reason`` / ``attention_fallback_reason`` say why a call would fall back.

FP8 checkpoints' linear layers (``fp8_layer_parameters``: the fine-grained FP8 ``FP8Linear`` with 128x128
block or per-tensor scales, fbgemm's ``FbgemmFp8Linear``) are swapped by ``wavetune.patch`` for
``wavetune.nn.FP8Linear`` on their own tensors.
"""

from __future__ import annotations

import functools
import sys

import torch

from . import torch_ops  # noqa: F401  (registers torch.ops.wavetune)
from .families.layer_ops.api import moe_max_experts
from .runtime import invariance
from .runtime.tables import on_table_change, on_variants_added

IMPLEMENTATION = "wavetune"
# Where a patched model keeps the implementations it had, for the fallbacks and for unpatch.
PREVIOUS = "_wavetune_previous"
HEAD_DIMS = (64, 128, 256)


def transformers_model(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a transformers ``PreTrainedModel`` (transformers is then imported already)."""
    transformers = sys.modules.get("transformers")
    return transformers is not None and isinstance(model, transformers.PreTrainedModel)


# The kernels, through their torch operators (CUDA graphs, torch.compile).
run_grouped_gemm = torch.ops.wavetune.grouped_gemm
run_scaled_grouped_gemm = torch.ops.wavetune.scaled_grouped_gemm
run_quantize_fp8 = torch.ops.wavetune.quantize_fp8
run_attention = torch.ops.wavetune.attention
run_paged_attention = torch.ops.wavetune.paged_attention
run_moe_align = torch.ops.wavetune.moe_align
run_moe_gather = torch.ops.wavetune.moe_gather
run_moe_combine = torch.ops.wavetune.moe_combine
run_silu_and_mul = torch.ops.wavetune.silu_and_mul
SCALE_BLOCK = 128  # FP8 checkpoints' block scales: 1x128 activation groups, 128x128 weight blocks
MOE_MAX_EXPERTS = moe_max_experts()  # the routing kernels' limit


def register() -> None:
    """Add ``"wavetune"`` to transformers' experts, attention and attention-mask registries (idempotent)."""
    from transformers import AttentionInterface
    from transformers.integrations.moe import ExpertsInterface
    from transformers.masking_utils import AttentionMaskInterface

    ExpertsInterface.register(IMPLEMENTATION, experts_forward)
    fp8_interface = _fp8_experts_interface()
    if fp8_interface is not None:
        type(fp8_interface).register(IMPLEMENTATION, fp8_experts_forward)
    AttentionInterface.register(IMPLEMENTATION, attention_forward)
    AttentionMaskInterface.register(IMPLEMENTATION, key_lengths_mask)


def _has_experts(model: torch.nn.Module) -> bool:
    return any(hasattr(type(m).forward, "__wrapped__") and hasattr(m, "has_gate") for m in model.modules())


def patch_model(model: torch.nn.Module, *, attention: bool = True, experts: bool = True) -> dict[str, str]:
    """Switch a transformers model's attention (``attention``) and its experts, if it has any
    (``experts``), to ``"wavetune"``; returns ``{"attention": previous, "experts": previous}`` for what is
    switched, and keeps the previous ones on the config for the fallbacks and ``unpatch_model``."""
    register()
    config = model.config
    previous = dict(getattr(config, PREVIOUS, {}))
    if attention and config._attn_implementation != IMPLEMENTATION:
        previous["attention"] = config._attn_implementation or "sdpa"
        model.set_attn_implementation(IMPLEMENTATION)
    if experts and _has_experts(model) and config._experts_implementation != IMPLEMENTATION:
        previous["experts"] = config._experts_implementation or "eager"
        model.set_experts_implementation(IMPLEMENTATION)
    for module in model.modules():  # sub-models' configs (a vision tower, say) share the record
        if hasattr(module, "config") and IMPLEMENTATION in (getattr(module.config, "_attn_implementation", None),
                                                            getattr(module.config, "_experts_implementation", None)):
            setattr(module.config, PREVIOUS, previous)
    return previous


def unpatch_model(model: torch.nn.Module) -> dict[str, str]:
    """Restore the implementations ``patch_model`` switched; returns them."""
    previous = dict(getattr(model.config, PREVIOUS, {}))
    if "attention" in previous:
        model.set_attn_implementation(previous["attention"])
    if "experts" in previous:
        model.set_experts_implementation(previous["experts"])
    for module in model.modules():
        if hasattr(module, "config") and hasattr(module.config, PREVIOUS):
            delattr(module.config, PREVIOUS)
    return previous


def _previous(config, kind: str, default: str) -> str:
    return getattr(config, PREVIOUS, {}).get(kind, default)


def experts_fallback_reason(experts: torch.nn.Module, hidden_states: torch.Tensor) -> str | None:
    """Why ``experts_forward`` would run the previous implementation for these inputs; None: it runs
    wavetune.grouped_gemm."""
    weights = experts.gate_up_proj if experts.has_gate else experts.up_proj
    if not hidden_states.is_cuda:
        return f"hidden states on {hidden_states.device}"
    if hidden_states.dtype not in (torch.bfloat16, torch.float16) or weights.dtype != hidden_states.dtype:
        return f"{hidden_states.dtype} hidden states with {weights.dtype} experts (bf16 or fp16, the same)"
    if experts.has_bias:
        return "the experts have biases"
    if experts.is_transposed or not experts.is_concatenated:
        return "expert weights not stored as [experts, out, in] with gate and up concatenated"
    if any(d % 8 for d in (*weights.shape[1:], experts.down_proj.shape[1])):
        return "expert widths must be multiples of 8"
    pending = grouped_variants_pending(hidden_states.device.index, hidden_states.dtype)
    if pending:
        return (f"{pending} grouped variants the GPU's table chooses from are not compiled yet (they compile in the "
                "background; `python -m wavetune build --family grouped_gemm` compiles them ahead)")
    return None


@torch.compiler.assume_constant_result
def grouped_variants_pending(device: int, dtype: torch.dtype) -> int:
    """How many of the variants the device's grouped table names for ``dtype`` this build lacks; 0 without a
    table. NOTES: without them the table's choices fall back to whatever grouped variant is compiled, which can
    run a model's experts several times slower than transformers' own implementation; until the background
    compile adds them, the experts run that implementation. torch.compile calls this once as it traces (it
    reads the table and the build: nothing to trace into)."""
    return _grouped_variants_pending(device, dtype)


@functools.cache  # cleared when variants are added or a table is loaded
def _grouped_variants_pending(device: int, dtype: torch.dtype) -> int:
    from pathlib import Path

    from .runtime import jit, tables

    tables.ensure_table(device, "grouped_gemm")
    path = tables.loaded_table(device, "grouped_gemm")
    name = {torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    return 0 if path is None else sum(v.dtype == name for v in jit.working_set(Path(path), "grouped_gemm"))


def _fp8_experts_interface():
    """transformers' registry of FP8 experts implementations, or None in a transformers without one."""
    try:
        from transformers.integrations.finegrained_fp8 import ALL_FP8_EXPERTS_FUNCTIONS
    except ImportError:
        return None
    return ALL_FP8_EXPERTS_FUNCTIONS


def fp8_experts_fallback_reason(experts: torch.nn.Module, hidden_states: torch.Tensor) -> str | None:
    """Why ``fp8_experts_forward`` would run the previous implementation for these inputs; None: it runs
    wavetune.scaled_grouped_gemm with 128-block scales."""
    if getattr(experts, "activation_scheme", "dynamic") != "dynamic":
        return "static activation scales"
    if experts.has_bias:
        return "the experts have biases"
    if tuple(experts.block_size or ()) != (SCALE_BLOCK, SCALE_BLOCK):
        return f"scales per {experts.block_size} block (wavetune takes 128x128 blocks)"
    for name in ("gate_up" if experts.has_gate else "up", "down"):
        weight, scale = getattr(experts, f"{name}_proj"), getattr(experts, f"{name}_proj_scale_inv")
        _, n, k = weight.shape
        blocks = (-(-n // SCALE_BLOCK), -(-k // SCALE_BLOCK))
        if weight.dtype != torch.float8_e4m3fn or scale.dtype != torch.float32 or tuple(scale.shape[1:]) != blocks:
            return (f"{name} weights {weight.dtype} with {scale.dtype} scales {tuple(scale.shape)} (e4m3 with float32 "
                    f"scales per 128x128 block)")
        if k % 16 or n % 8:
            return f"{name} widths N={n}, K={k} (K a multiple of 16, N of 8)"
    if not hidden_states.is_cuda:
        return f"hidden states on {hidden_states.device}"
    if hidden_states.dtype not in (torch.bfloat16, torch.float16):
        return f"{hidden_states.dtype} hidden states (bf16 or fp16)"
    if not block_scaled_variant_compiled(hidden_states.dtype):
        return (f"no block-scaled FP8 grouped variant with {hidden_states.dtype} output in this build (python -m wavetune "
                f"build --family grouped_gemm compiles them)")
    return None


@torch.compiler.assume_constant_result
def block_scaled_variant_compiled(dtype: torch.dtype) -> bool:
    """Whether one of this build's block-scaled FP8 grouped variants writes ``dtype``; torch.compile calls this
    once as it traces (it asks the native library)."""
    return dtype in _block_scaled_output_dtypes()


@functools.cache  # cleared when variants are added
def _block_scaled_output_dtypes() -> frozenset[torch.dtype]:
    from .families.grouped_gemm.api import block_scaled_grouped_configs

    names = {"bf16": torch.bfloat16, "fp16": torch.float16}
    return frozenset(names[c.dtype] for c in block_scaled_grouped_configs() if c.dtype in names)


def _previous_experts(experts: torch.nn.Module, interface):
    """The experts forward ``experts`` had before the patch, from transformers' registry ``interface``."""
    eager = type(experts).forward.__wrapped__
    return interface.get_interface(_previous(experts.config, "experts", "eager"), eager)


def experts_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                    top_k_weights: torch.Tensor) -> torch.Tensor:
    """transformers' experts forward on wavetune.grouped_gemm (``routed_experts``), or the previous
    implementation where ``experts_fallback_reason`` says it does not apply."""
    if experts_fallback_reason(self, hidden_states) is not None:
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

        return _previous_experts(self, ALL_EXPERTS_FUNCTIONS)(self, hidden_states, top_k_index, top_k_weights)
    level = invariance.level_for(self)
    return routed_experts(self, hidden_states, top_k_index, top_k_weights,
                          lambda rows, name, offsets: run_grouped_gemm(rows, getattr(self, f"{name}_proj"), offsets,
                                                                       level))


def fp8_experts_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                        top_k_weights: torch.Tensor) -> torch.Tensor:
    """An FP8 checkpoint's experts forward (``FP8Experts``) on wavetune.scaled_grouped_gemm with their own e4m3
    weights and 128x128 block scales, the activations quantized per 1x128 group by wavetune.quantize_fp8; or
    the previous implementation where ``fp8_experts_fallback_reason`` says it does not apply."""
    if fp8_experts_fallback_reason(self, hidden_states) is not None:
        return _previous_experts(self, _fp8_experts_interface())(self, hidden_states, top_k_index, top_k_weights)

    def project(rows, name, offsets):
        q, scale = run_quantize_fp8(rows, None, SCALE_BLOCK)
        return run_scaled_grouped_gemm(q, getattr(self, f"{name}_proj"), scale, getattr(self, f"{name}_proj_scale_inv"),
                                       offsets, rows.dtype)

    return routed_experts(self, hidden_states, top_k_index, top_k_weights, project)


def routed_experts(experts: torch.nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                   top_k_weights: torch.Tensor, project) -> torch.Tensor:
    """A transformers experts module's forward over grouped GEMMs: the (token, expert) pairs sorted by expert,
    offsets counted on the GPU (no host synchronization: CUDA graphs capture it), ``project(rows, name,
    offsets)`` for the expert weights ``name`` ("gate_up" or "up", then "down") over rows sorted by expert,
    then the routing weights and the sum over each token's experts in fp32. On the GPU with bf16 or fp16 rows,
    int64 ids and at most ``MOE_MAX_EXPERTS`` experts, the routing runs on the layer ops
    (``fused_routed_experts``)."""
    if (hidden_states.is_cuda and hidden_states.dtype in (torch.bfloat16, torch.float16)
            and top_k_index.dtype == torch.int64 and experts.num_experts <= MOE_MAX_EXPERTS):
        return fused_routed_experts(experts, hidden_states, top_k_index, top_k_weights, project)
    return torch_routed_experts(experts, hidden_states, top_k_index, top_k_weights, project)


def torch_routed_experts(experts: torch.nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                         top_k_weights: torch.Tensor, project) -> torch.Tensor:
    """``routed_experts`` with its routing in PyTorch operations (transformers' own ``grouped_mm`` routing)."""
    tokens, top_k = top_k_index.shape
    expert_ids, order = torch.sort(top_k_index.reshape(-1))
    rows = hidden_states[order // top_k]
    # NOTES: histc, not bincount, whose output size depends on the data (a host synchronization, which
    # CUDA-graph capture refuses). Ids past the experts (expert parallelism's sentinels) sort last and
    # fall outside the bins, so the grouped GEMMs leave their rows unwritten; they are zeroed below.
    ids = expert_ids.int() if expert_ids.is_cuda else expert_ids.float()  # what histc takes on each device
    counts = torch.histc(ids, bins=experts.num_experts, min=0, max=experts.num_experts - 1)
    offsets = counts.cumsum(0, dtype=torch.int32)
    up = project(rows, "gate_up" if experts.has_gate else "up", offsets)
    up = experts._apply_gate(up) if experts.has_gate else experts.act_fn(up)
    down = project(up.contiguous(), "down", offsets)
    down = down.masked_fill((expert_ids >= experts.num_experts).unsqueeze(-1), 0)
    weighted = down.float() * top_k_weights.reshape(-1)[order].unsqueeze(-1).float()
    out = torch.empty_like(weighted).index_copy_(0, order, weighted)  # each pair back to its token's slot
    return out.view(tokens, top_k, -1).sum(dim=1).to(hidden_states.dtype)


def fused_routed_experts(experts: torch.nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                         top_k_weights: torch.Tensor, project) -> torch.Tensor:
    """``routed_experts`` with its routing on the layer ops: the pairs sorted by expert (``moe_align``), each
    token's row copied to its experts' rows (``moe_gather``), SiLU-and-multiply for transformers' default SiLU
    gate, and the weighted sum per token (``moe_combine``): five kernels around the two grouped GEMMs where
    PyTorch's code runs about twenty."""
    top_k = top_k_index.shape[1]
    offsets, positions = run_moe_align(top_k_index, experts.num_experts)
    up = project(run_moe_gather(hidden_states, positions, top_k), "gate_up" if experts.has_gate else "up", offsets)
    up = gate(experts, up)
    down = project(up.contiguous(), "down", offsets)
    return run_moe_combine(down, positions, top_k_index, experts.num_experts, top_k_weights.float())


def gate(experts: torch.nn.Module, up: torch.Tensor) -> torch.Tensor:
    """The experts' activation of their up projection: ``wavetune.silu_and_mul`` for transformers' default gate
    with SiLU (the same bits), else the module's own."""
    if not experts.has_gate:
        return experts.act_fn(up)
    default_gate = getattr(getattr(type(experts), "_apply_gate", None), "__name__", "") == "_default_apply_gate"
    if default_gate and type(experts.act_fn).__name__ in ("SiLU", "SiLUActivation"):
        return run_silu_and_mul(up)
    return experts._apply_gate(up)


def fp8_layer_parameters(module: torch.nn.Module) -> tuple | None:
    """(weight, weight_scale, bias, input_scale) of a transformers FP8 checkpoint layer that
    ``wavetune.nn.FP8Linear`` runs as it is: ``FP8Linear`` of the fine-grained FP8 integration (e4m3 weights,
    float32 scales per 128x128 block or per tensor, dynamic activations or a static per-tensor scale) and
    fbgemm's ``FbgemmFp8Linear`` (per-channel scales, dynamic per-token activations; its activation-scale
    upper bound is not applied); None for anything else."""
    kind = f"{type(module).__module__}.{type(module).__qualname__}"
    if getattr(module, "weight", None) is None or module.weight.dtype != torch.float8_e4m3fn:
        return None
    if kind.endswith("finegrained_fp8.FP8Linear"):
        block = tuple(module.block_size) if module.block_size is not None else None
        static = getattr(module, "activation_scale", None)
        scales = module.weight_scale_inv
        if scales.dtype != torch.float32 or block not in (None, (128, 128)) or (block and static is not None):
            return None
        return module.weight, scales, module.bias, static
    if kind.endswith("fbgemm_fp8.FbgemmFp8Linear"):
        return module.weight, module.weight_scale.float(), module.bias, None
    return None


def attention_fallback_reason(module: torch.nn.Module, query: torch.Tensor, attention_mask, dropout: float,
                              **kwargs) -> str | None:
    """Why ``attention_forward`` would run the previous implementation for these inputs; None: it runs
    wavetune.attention."""
    if not query.is_cuda:
        return f"query on {query.device}"
    if query.dtype not in (torch.bfloat16, torch.float16):
        return f"{query.dtype} query (bf16 or fp16)"
    if query.shape[-1] not in HEAD_DIMS:
        return f"head dim {query.shape[-1]} (wavetune.attention takes {', '.join(map(str, HEAD_DIMS))})"
    # NOTES: batch-invariant decode takes the paged kernel, built in, where no FMHA variant is compiled: SDPA's KV
    # splits depend on the batch.
    decode_on_paged = query.shape[-2] == 1 and invariance.level_for(module) != "off"
    if not head_dim_compiled(query.shape[-1], query.dtype) and not decode_on_paged:
        return (f"no compiled attention variant for head dim {query.shape[-1]} (python -m wavetune build "
                "--family attention compiles them)")
    if attention_mask is not None and key_lengths(attention_mask) is None:
        return "an attention mask (padding or a sliding window)"
    if dropout and module.training:
        return "dropout in training"
    for name in ("softcap", "s_aux", "sinks", "position_bias"):
        if kwargs.get(name) is not None:
            return f"{name} (not supported by wavetune.attention)"
    return None


@torch.compiler.assume_constant_result
def head_dim_compiled(head_dim: int, dtype: torch.dtype) -> bool:
    """Whether one of this build's attention variants takes ``head_dim`` in ``dtype``; torch.compile calls this
    once as it traces (it asks the native library)."""
    return head_dim in compiled_head_dims(dtype)


@functools.cache  # cleared when variants are added
def compiled_head_dims(dtype: torch.dtype) -> frozenset[int]:
    """The head dims this build's FMHA variants take in ``dtype``."""
    from .families.attention.api import attention_configs

    name = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype)
    return frozenset(c.tile[2] for c in attention_configs() if c.dtype == name and not c.from_library)


# Variants compiled at run time, and tables loaded later, count from then on.
on_variants_added(compiled_head_dims.cache_clear)
on_variants_added(_block_scaled_output_dtypes.cache_clear)
on_variants_added(_grouped_variants_pending.cache_clear)
on_table_change(_grouped_variants_pending.cache_clear)


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask, dropout: float = 0.0, scaling: float | None = None,
                      is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-function interface on wavetune.attention: q, k, v of [batch, heads, tokens,
    head dim] read in place as [batch, tokens, heads, head dim]; returns that layout, as SDPA's does."""
    lengths = key_lengths(attention_mask)
    if attention_fallback_reason(module, query, attention_mask, dropout, **kwargs) is not None:
        # From the modules that define them, as transformers' models import them: torch.compile cannot trace
        # an import from the lazy top-level package.
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        if lengths is not None:  # the boolean mask the lengths stand for: each sequence's first keys
            attention_mask = torch.arange(key.shape[2], device=key.device) < lengths.view(-1, 1, 1, 1)
        fallback = ALL_ATTENTION_FUNCTIONS.get(_previous(module.config, "attention", "sdpa"), sdpa_attention_forward)
        return fallback(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                        is_causal=is_causal, **kwargs)
    if lengths is not None:  # one new token per sequence over a static cache: [batch, 1, heads, head dim]
        out = run_paged_attention(query[:, :, 0], key.transpose(1, 2), value.transpose(1, 2), None, lengths,
                                  key.shape[2], scaling, batch_invariance=invariance.level_for(module))
        return out.unsqueeze(1), None
    q_length, kv_length = query.shape[2], key.shape[2]
    # As SDPA's integration: no mask and several queries means causal, the queries filling the keys from the
    # start (a prefill into an empty static cache passes its whole buffer: the keys past the queries are cut).
    causal = q_length > 1 and (is_causal if is_causal is not None else getattr(module, "is_causal", True))
    if causal and kv_length > q_length:
        key, value = key[:, :, :q_length], value[:, :, :q_length]
    out = run_attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), causal=bool(causal),
                        scale=scaling, batch_invariance=invariance.level_for(module))
    return out, None


def key_lengths_mask(batch_size: int, q_length: int, kv_length: int, q_offset=0, kv_offset: int = 0,
                     mask_function=None, attention_mask: torch.Tensor | None = None, local_size: int | None = None,
                     **kwargs):
    """transformers' mask function for ``"wavetune"``: for a decode step over a static cache (one new token per
    sequence, the cache's whole buffer as keys, a causal mask and no padding), the keys each sequence
    attends to as an int32 [batch, 1, 1, 1] tensor (``key_lengths``), computed on the GPU from the cache's
    own count, so capturing the step in a CUDA graph or compiling it reads no host value; otherwise what
    SDPA's mask function returns (None where a causal flag says the same)."""
    from transformers.masking_utils import causal_mask_function, sdpa_mask

    mask_function = causal_mask_function if mask_function is None else mask_function
    static_cache = isinstance(q_offset, torch.Tensor)  # a static layer counts its tokens on the GPU
    if (static_cache and q_length == 1 and kv_offset == 0 and local_size is None
            and mask_function is causal_mask_function and _no_padding(attention_mask)):
        return (q_offset + q_length).to(torch.int32).reshape(1, 1, 1, 1).expand(batch_size, 1, 1, 1).contiguous()
    return sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                     kv_offset=kv_offset, mask_function=mask_function, attention_mask=attention_mask,
                     local_size=local_size, **kwargs)


def _no_padding(attention_mask: torch.Tensor | None) -> bool:
    """Whether a 2-D padding mask masks nothing. Reading it waits for the GPU, as SDPA's mask function does;
    while a graph is captured or compiled it cannot be read, and then it counts as padding."""
    from transformers.utils import is_tracing

    return attention_mask is None or (not is_tracing(attention_mask) and bool(attention_mask.all()))


def key_lengths(attention_mask) -> torch.Tensor | None:
    """The int32 [batch] key counts of a mask ``key_lengths_mask`` made, or None for any other mask."""
    if (isinstance(attention_mask, torch.Tensor) and attention_mask.dtype == torch.int32
            and attention_mask.dim() == 4 and attention_mask.shape[1:] == (1, 1, 1)):
        return attention_mask.view(-1)
    return None

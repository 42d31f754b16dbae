"""The layer ops in a model (``wavetune.patch``; docs/torch.md, "Layer ops"): per module, transformers' RMSNorm,
its gated MLP and the rotary embedding of its attention each become one kernel, the MLP's gate and up
projections one GEMM, the attention's query, key and value projections one GEMM, and each of a decoder layer's
residual additions one kernel with the norm that follows it (after attention, the post-attention norm; after
the MLP, the next layer's input norm or the final norm, computed ahead). Where the decode GEMM runs (few tokens,
in eager mode and CUDA graphs), the MLP's SiLU-and-multiply runs in its GEMM's epilogue.

Where an attention's forward hands its rotated keys straight to a ``StaticLayer``'s update, the rotary embedding
and the cache write are one kernel (``rotary_cache``).

A module is swapped only where its code is transformers' Llama code: an RMSNorm or MLP class whose ``forward``
compiles to the same bytecode as ``LlamaRMSNorm.forward`` / ``LlamaMLP.forward`` (their copies in Qwen2, Mistral,
Mixtral, Qwen2-MoE, Qwen3, Qwen3-MoE, ...; not Gemma's norm, whose weight is offset by one), an MLP whose
activation is SiLU, an attention whose module's ``apply_rotary_pos_emb`` is Llama's, a decoder layer whose
``forward`` is ``LlamaDecoderLayer.forward`` (Qwen2, Mistral, Qwen3, Qwen3-MoE, Qwen2-MoE; not Mixtral's). Each swapped module runs
what it replaced for inputs its kernel does not take (a CPU tensor, another dtype, a width not a multiple of 8),
so the model computes what it did; ``unpatch_layers`` puts the modules back.

NOTES: under ``torch.compile`` (and export) the swapped modules trace transformers' own PyTorch code instead of
the kernels, keeping only the merged GEMMs (gate and up; query, key and value): Inductor fuses that code with
what surrounds it (the residual addition before each norm, the rotary embedding with the projections and the
cache writes), which an opaque operator would leave as kernels of their own.
"""

from __future__ import annotations

import dataclasses
import dis
import functools
import inspect
import sys
import types
import weakref

import torch

from . import rotary_cache, torch_ops  # noqa: F401  (torch_ops registers torch.ops.wavetune)
from .runtime import invariance

DTYPES = (torch.bfloat16, torch.float16)
ROTARY = "apply_rotary_pos_emb"  # the function transformers' attention forwards call, from their module's globals
# Where a swapped attention module keeps what its forward was before (a class's function: its own globals).
ROTARY_PATCHED = "_wavetune_rotary"
RESIDUAL_PATCHED = "_wavetune_residual"  # marks a decoder layer running decoder_layer_forward
NEXT_NORM = "_wavetune_next_norm"  # such a layer's: the norm its output goes to next (link_next_norms)
PROJECTIONS = ("q_proj", "k_proj", "v_proj")  # an attention's projections of the same hidden states


@functools.cache
def _llama():
    from transformers.models.llama import modeling_llama

    return modeling_llama


def _same_code(function, reference) -> bool:
    code, ref = getattr(function, "__code__", None), reference.__code__
    return code is not None and code.co_code == ref.co_code and code.co_names == ref.co_names


def _original(module: torch.nn.Module) -> torch.nn.Module:
    return module._replaced  # an instance attribute (set past nn.Module.__setattr__): plain lookup finds it


class RMSNorm(torch.nn.Module):
    """A transformers RMSNorm on ``torch.ops.wavetune.rms_norm``, sharing its weight. Where the previous decoder
    layer computed this norm of its output ahead (``add_ahead``), a call on that very output, unchanged since,
    returns it."""

    def __init__(self, norm: torch.nn.Module):
        super().__init__()
        self.weight, self.eps = norm.weight, float(norm.variance_epsilon)
        object.__setattr__(self, "_replaced", norm)  # not a submodule: its weight is this module's
        self._ahead = None  # (x, x's version or None, this norm of x): computed with the addition that made x

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}, kernel=wavetune"

    def takes(self, x: torch.Tensor) -> bool:
        """Whether the kernel runs on ``x`` (else the norm it replaced does)."""
        return (not torch.compiler.is_compiling() and x.is_cuda and x.dtype in DTYPES and x.dtype == self.weight.dtype
                and x.shape[-1] % 8 == 0 and x.stride(-1) == 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.takes(x):
            ahead, self._ahead = self._ahead, None
            if ahead is not None and ahead[0] is x and (ahead[1] is None or x._version == ahead[1]):
                return ahead[2]
            return torch.ops.wavetune.rms_norm(x, self.weight, self.eps)
        return _original(self)(x)


def _adds_in_kernel(norm: torch.nn.Module, x: torch.Tensor, residual: torch.Tensor) -> bool:
    """Whether ``torch.ops.wavetune.add_rms_norm`` takes residual + x for ``norm``."""
    return (isinstance(norm, RMSNorm) and norm.takes(x) and residual.dtype == x.dtype and residual.shape == x.shape
            and residual.stride(-1) == 1)


def add_norm(norm: torch.nn.Module, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(residual + x, norm(residual + x)): one ``torch.ops.wavetune.add_rms_norm`` where ``norm`` is an ``RMSNorm``
    whose kernel takes these rows, else PyTorch's addition and the norm."""
    if _adds_in_kernel(norm, x, residual):
        return torch.ops.wavetune.add_rms_norm(x, residual, norm.weight, norm.eps)
    total = residual + x
    return total, norm(total)


@dataclasses.dataclass(frozen=True)
class NextNorm:
    """Where a decoder layer's output goes next (``link_next_norms``): ``norm``, called by ``consumer`` (the next
    layer; None: its model's forward, the final norm); ``trusted``: whether, but for hooks, nothing between can
    change the output in place (the consumer runs ``decoder_layer_forward``, the model's forward writes nothing
    in place)."""

    norm: RMSNorm
    consumer: torch.nn.Module | None
    trusted: bool


def _hooks_between(producer: torch.nn.Module, link: NextNorm) -> bool:
    """Whether a forward hook of ``producer``, a forward pre-hook of the consumer or the norm, or a global one,
    runs between the layer's output and the norm's call."""
    from torch.nn.modules import module

    callers = [link.norm] + ([link.consumer] if link.consumer is not None else [])
    return bool(producer._forward_hooks or any(m._forward_pre_hooks for m in callers)
                or module._global_forward_hooks or module._global_forward_pre_hooks)


def add_ahead(producer: torch.nn.Module, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """residual + x for decoder layer ``producer``'s output, and where its ``NextNorm`` is an ``RMSNorm`` whose
    kernel takes these rows, that norm of the sum in the same kernel, kept for the norm's call on the sum.

    NOTES: the kept result is returned only for the sum itself (any other input is normed then), unchanged since:
    checked by its version counter; inference tensors count none, so under torch.inference_mode it is kept only
    where nothing between can change the sum in place (``NextNorm.trusted``, no hooks)."""
    link = producer.__dict__.get(NEXT_NORM)
    if link is None or not _adds_in_kernel(link.norm, x, residual):
        return residual + x
    counted = not torch.is_inference_mode_enabled()
    if not counted and (not link.trusted or _hooks_between(producer, link)):
        return residual + x
    total, normed = torch.ops.wavetune.add_rms_norm(x, residual, link.norm.weight, link.norm.eps)
    link.norm._ahead = (total, total._version if counted else None, normed)
    return total


def writes_in_place(function) -> bool:
    """Whether ``function``'s code (decorators unwrapped, nested code included) may change a tensor in place: an
    in-place method (``add_``), an augmented assignment, an ``out=`` argument."""
    return _code_writes(inspect.unwrap(function).__code__)


def _code_writes(code: types.CodeType) -> bool:
    augmented = any(ins.opname.startswith("INPLACE_") or (ins.opname == "BINARY_OP" and ins.argrepr.endswith("="))
                    for ins in dis.get_instructions(code))
    return (augmented or any(name.endswith("_") and not name.endswith("__") for name in code.co_names)
            or any(isinstance(const, tuple) and "out" in const for const in code.co_consts)
            or any(_code_writes(const) for const in code.co_consts if isinstance(const, types.CodeType)))


def decoder_layer_forward(self, hidden_states: torch.Tensor, attention_mask=None, position_ids=None,
                          past_key_values=None, use_cache=False, position_embeddings=None, **kwargs) -> torch.Tensor:
    """``LlamaDecoderLayer.forward`` with the residual addition after attention and the post-attention norm in
    one kernel (``add_norm``), and the addition after the MLP with the next layer's input norm (or the model's
    final norm) in one kernel (``add_ahead``, where ``link_next_norms`` linked that norm).

    NOTES: which residual addition goes where. The one after attention meets the post-attention norm: fused with
    it (add_rms_norm), it costs no kernel whatever GEMM the output projection runs, so o_proj keeps its plain
    output; its residual epilogue would only move the addition and leave the norm a kernel of its own. The one
    after the MLP meets the next layer's input norm, a call of that layer: the norm is computed with the addition
    and kept for that call, so it too costs no kernel and rounds as transformers does. Without a linked norm it
    goes into the down projection's GEMM (``GatedMLP.forward``'s ``residual``), which removes its kernel where the
    decode GEMM runs. The MLP module's own call stays ``mlp(x)``. Under torch.compile the traced addition is left
    to Inductor, which fuses it with the next layer's traced norm."""
    residual = hidden_states
    hidden_states, _ = self.self_attn(
        hidden_states=self.input_layernorm(hidden_states), attention_mask=attention_mask, position_ids=position_ids,
        past_key_values=past_key_values, use_cache=use_cache, position_embeddings=position_embeddings, **kwargs)
    residual, hidden_states = add_norm(self.post_attention_layernorm, hidden_states, residual)
    if torch.compiler.is_compiling():
        return residual + self.mlp(hidden_states)
    if isinstance(self.mlp, GatedMLP):
        return self.mlp(hidden_states, residual, self)
    return add_ahead(self, self.mlp(hidden_states), residual)


def merge_linears(layers: list[torch.nn.Linear]) -> torch.nn.Linear:
    """One ``nn.Linear`` computing ``layers``' outputs side by side. Their weights (and biases) become views of
    the merged ones, so the model holds each value once and its state dict is unchanged."""
    weight = torch.cat([layer.weight.detach() for layer in layers])
    has_bias = layers[0].bias is not None
    bias = torch.cat([layer.bias.detach() for layer in layers]) if has_bias else None
    start = 0
    for layer in layers:
        end = start + layer.out_features
        layer.weight.data = weight[start:end]
        if has_bias:
            layer.bias.data = bias[start:end]
        start = end
    merged = torch.nn.Linear(layers[0].in_features, start, bias=has_bias, device="meta")
    merged.weight = torch.nn.Parameter(weight, requires_grad=False)
    merged.bias = None if bias is None else torch.nn.Parameter(bias, requires_grad=False)
    return merged


@functools.cache
def _wavetune_linear() -> type:
    from .nn import Linear  # wavetune.nn imports this module

    return Linear


class GatedMLP(torch.nn.Module):
    """A transformers SiLU-gated MLP, ``down(silu(gate(x)) * up(x))``, as one GEMM for gate and up
    (``gate_up``), ``torch.ops.wavetune.silu_and_mul`` and the down projection (``down_proj``, the MLP's own).
    Where both are on wavetune's GEMM (``wavetune.nn.Linear``) in eager mode, SiLU and the product run in the
    gate and up GEMM's epilogue, and a residual in the down projection's, where the decode GEMM runs them
    (``torch.ops.wavetune.linear_silu_and_mul``, ``linear_residual``); elsewhere as separate kernels.

    The merged weight is the plain concatenation [gate; up] (``merge_linears``): the decode GEMM pairs each gate
    row with its up row through its row pointers (sm90_decode_gemm.cuh), so the unfused path, the state dict and
    the gate and up projections' views read the same tensor."""

    def __init__(self, mlp: torch.nn.Module):
        super().__init__()
        self.intermediate = mlp.gate_proj.out_features
        self.gate_up = merge_linears([mlp.gate_proj, mlp.up_proj])
        self.down_proj = mlp.down_proj
        object.__setattr__(self, "_replaced", mlp)  # not a submodule: its layers' weights are views of gate_up's

    def extra_repr(self) -> str:
        return f"intermediate={self.intermediate}, activation=silu_and_mul (wavetune)"

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None,
                layer: torch.nn.Module | None = None) -> torch.Tensor:
        """The MLP of ``x``, plus ``residual`` where one is given (``decoder_layer_forward`` of ``layer``): where
        the layer is linked to its next norm, by ``add_ahead``; else in the down projection's epilogue."""
        if not (x.is_cuda and x.dtype in DTYPES and self.intermediate % 8 == 0):
            out = _original(self)(x)
        elif torch.compiler.is_compiling():
            gate, up = self.gate_up(x).split(self.intermediate, dim=-1)
            out = self.down_proj(torch.nn.functional.silu(gate) * up)
        else:
            hidden = (self.gate_up.forward_silu_and_mul(x) if isinstance(self.gate_up, _wavetune_linear())
                      else torch.ops.wavetune.silu_and_mul(self.gate_up(x)))
            linked = layer is not None and NEXT_NORM in layer.__dict__
            if residual is not None and not linked and self._down_proj_adds(hidden, residual):
                return self.down_proj.forward_residual(hidden, residual)
            out = self.down_proj(hidden)
        if residual is None:
            return out
        return residual + out if layer is None else add_ahead(layer, out, residual)

    def _down_proj_adds(self, hidden: torch.Tensor, residual: torch.Tensor) -> bool:
        """Whether the down projection takes ``residual`` into its GEMM (``wavetune.nn.Linear.forward_residual``)."""
        down = self.down_proj
        return (isinstance(down, _wavetune_linear()) and residual.shape == (*hidden.shape[:-1], down.out_features)
                and residual.dtype == hidden.dtype and residual.stride(-1) == 1)


class ProjectionSlice(torch.nn.Module):
    """One of an attention's query, key and value projections (a plain ``nn.Linear``, kept as ``_replaced``:
    its weight and bias are views of the merged ones) whose output comes from one GEMM of all three: the first
    slice called with an input runs the merged projection (``merged``, a submodule of the query's slice) and
    keeps its output until each slice has taken its columns.

    NOTES: transformers' attention forwards call the three projections one after another on the same hidden
    states. Apart, each GEMM pays its launch, its ramp-up and, in cuBLAS at a few tokens, a split-K reduction
    kernel: 26 us for a Llama-3-8B layer's 50 MB at one token on an H200 (benchmarks/merged_projections.py
    measures the step with and without the merge). Under torch.compile (and export) the group's first slice
    traces the merged GEMM and the others its columns (``_traced_output``), so the compiled graph holds one
    GEMM too."""

    def __init__(self, linear: torch.nn.Linear, start: int, owner: ProjectionSlice | None = None,
                 merged: torch.nn.Linear | None = None):
        super().__init__()
        self.start, self.end = start, start + linear.out_features
        if merged is not None:
            self.merged = merged  # a submodule: patch runs it on wavetune's GEMM
        object.__setattr__(self, "_replaced", linear)
        object.__setattr__(self, "_owner", owner or self)
        object.__setattr__(self, "_group", (self,))  # the owner's: its slices, itself first (merge_projections)
        object.__setattr__(self, "_pending", None)  # the owner's: (input, output, slices yet to read it)
        self._traced = None  # the owner's, while torch.compile traces: (input, output, reads left)

    def extra_repr(self) -> str:
        return f"columns {self.start}:{self.end} of the merged query, key and value projection"

    def _merged_output(self, x: torch.Tensor) -> torch.Tensor:
        owner = self._owner
        pending = owner._pending
        if pending is None or pending[0]() is not x or self not in pending[2]:
            pending = (weakref.ref(x), owner.merged(x), set(owner._group))
        pending[2].discard(self)
        object.__setattr__(owner, "_pending", pending if pending[2] else None)
        return pending[1]

    def _traced_output(self, x: torch.Tensor) -> torch.Tensor:
        """The merged projection's output while torch.compile traces: the group's first slice traces the GEMM
        and keeps it on the owner for the others; the last reader drops it, so the compiled module stores no
        tensor.

        NOTES: Dynamo records the attribute writes as side effects of the trace and reads them back within it;
        the weakrefs and sets of ``_merged_output`` it would not trace without a graph break. Inductor
        deduplicates no GEMM (no common-subexpression pass on inference graphs), so the three slices must not
        each trace one."""
        owner = self._owner
        traced = owner._traced
        if traced is None or traced[0] is not x:
            merged = owner.merged
            traced = (x, torch.ops.wavetune.linear(x, merged.weight, merged.bias, invariance.level_for(merged)),
                      len(owner._group))
        left = traced[2] - 1
        owner._traced = (traced[0], traced[1], left) if left else None
        return traced[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        linear = _original(self)
        if not (x.is_cuda and x.dtype == linear.weight.dtype and x.dtype in DTYPES):
            return linear(x)
        if torch.compiler.is_compiling():
            return self._traced_output(x)[..., self.start:self.end]
        return self._merged_output(x)[..., self.start:self.end]


def merge_projections(attention: torch.nn.Module) -> None:
    """Swap ``attention``'s q_proj, k_proj and v_proj for ``ProjectionSlice``s of one merged GEMM."""
    layers = [getattr(attention, name) for name in PROJECTIONS]
    merged = merge_linears(layers)
    owner = ProjectionSlice(layers[0], 0, merged=merged)
    others, start = [], layers[0].out_features
    for layer in layers[1:]:
        others.append(ProjectionSlice(layer, start, owner=owner))
        start += layer.out_features
    object.__setattr__(owner, "_group", (owner, *others))
    for name, module in zip(PROJECTIONS, (owner, *others)):
        setattr(attention, name, module)


def rotary_takes(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int) -> bool:
    """Whether the rotary kernel runs on these ``apply_rotary_pos_emb`` arguments (else transformers' code does)."""
    return (not torch.compiler.is_compiling() and unsqueeze_dim == 1 and q.is_cuda and q.dtype in DTYPES
            and k.dtype == cos.dtype == sin.dtype == q.dtype and q.dim() == 4 and k.dim() == 4 and cos.dim() == 3
            and q.shape[-1] % 16 == 0 and cos.shape == sin.shape and cos.stride() == sin.stride()
            and all(t.stride(-1) == 1 for t in (q, k, cos, sin)))


def rotary_embedding(original):
    """transformers' ``apply_rotary_pos_emb`` on ``torch.ops.wavetune.rotary_embedding``; ``original`` for inputs
    the kernel does not take."""

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        if rotary_takes(q, k, cos, sin, unsqueeze_dim):
            return rotary_cache.wait_for_update(q, k, cos, sin) or torch.ops.wavetune.rotary_embedding(q, k, cos, sin)
        return original(q, k, cos, sin, unsqueeze_dim)

    return apply_rotary_pos_emb


@functools.cache
def _rotary_forward(forward):
    """``forward`` (an attention class's function) calling wavetune's rotary embedding: the same code with its
    module's globals but for ``apply_rotary_pos_emb``.

    NOTES: the copied globals are the dict of a module of their own, registered in ``sys.modules`` under a name
    of their own: Dynamo finds a traced function's globals again, for its guards, through their ``__name__``,
    and the transformers module of that name holds the original ``apply_rotary_pos_emb``."""
    name = f"{__name__}.rotary_globals.{forward.__module__}.{forward.__qualname__}"
    scope = types.ModuleType(name)
    scope.__dict__.update(forward.__globals__)
    scope.__name__, scope.__spec__ = name, None
    setattr(scope, ROTARY, rotary_embedding(forward.__globals__[ROTARY]))
    sys.modules[name] = scope
    function = types.FunctionType(forward.__code__, scope.__dict__, forward.__name__, forward.__defaults__,
                                  forward.__closure__)
    function.__kwdefaults__, function.__qualname__ = forward.__kwdefaults__, forward.__qualname__
    return function


def norm_reason(module: torch.nn.Module) -> str | None:
    """Why ``module`` (a class named ``*RMSNorm``) keeps its own forward; None: it becomes ``RMSNorm``."""
    if not _same_code(type(module).forward, _llama().LlamaRMSNorm.forward):
        return f"{type(module).__name__}.forward is not LlamaRMSNorm's"
    if not isinstance(getattr(module, "weight", None), torch.Tensor) or module.weight.dim() != 1:
        return "no 1-D weight"
    return None


def mlp_reason(module: torch.nn.Module) -> str | None:
    """Why ``module`` (a class named ``*MLP``) keeps its own forward; None: it becomes ``GatedMLP``."""
    if not _same_code(type(module).forward, _llama().LlamaMLP.forward):
        return f"{type(module).__name__}.forward is not LlamaMLP's"
    layers = [getattr(module, name, None) for name in ("gate_proj", "up_proj", "down_proj")]
    if not all(type(layer) is torch.nn.Linear for layer in layers):
        return "gate, up or down projection is not a plain nn.Linear"
    if type(module.act_fn).__name__ not in ("SiLU", "SiLUActivation"):
        return f"activation {type(module.act_fn).__name__} (SiLU only)"
    gate, up = layers[:2]
    if gate.weight.shape != up.weight.shape or gate.weight.dtype != up.weight.dtype \
            or (gate.bias is None) != (up.bias is None):
        return "gate and up projections differ in shape, dtype or bias"
    return None


def rotary_reason(module: torch.nn.Module) -> str | None:
    """Why an attention module (one with ``q_proj``) keeps transformers' rotary embedding; None: it gets
    wavetune's."""
    forward = type(module).forward
    rotary = getattr(forward, "__globals__", {}).get(ROTARY)
    if rotary is None or ROTARY not in forward.__code__.co_names:
        return f"{type(module).__name__}.forward calls no {ROTARY}"
    if not _same_code(rotary, _llama().apply_rotary_pos_emb):
        return f"its {ROTARY} is not Llama's"
    return None


def projections_reason(module: torch.nn.Module) -> str | None:
    """Why an attention module with a Llama rotary embedding keeps its query, key and value projections apart;
    None: they become one GEMM (``merge_projections``)."""
    layers = [getattr(module, name, None) for name in PROJECTIONS]
    if not all(type(layer) is torch.nn.Linear for layer in layers):
        return "query, key or value projection is not a plain nn.Linear"
    first = layers[0].weight
    if any(layer.in_features != layers[0].in_features or layer.weight.dtype != first.dtype
           or layer.weight.device != first.device or (layer.bias is None) != (layers[0].bias is None)
           for layer in layers):
        return "query, key and value projections differ in input width, dtype, device or bias"
    if first.dtype not in DTYPES:
        return f"projection dtype {first.dtype}: wavetune runs bfloat16 and float16"
    return None


def decoder_reason(module: torch.nn.Module) -> str | None:
    """Why a decoder layer keeps its residual addition apart from its post-attention norm; None: it runs
    ``decoder_layer_forward``."""
    if not _same_code(type(module).forward, _llama().LlamaDecoderLayer.forward):
        return f"{type(module).__name__}.forward is not LlamaDecoderLayer's"
    return None


def patch_rotary(module: torch.nn.Module, name: str, skipped: dict[str, str]) -> None:
    """Put wavetune's rotary embedding in an attention module's forward, with a static cache's write where
    ``rotary_cache.cache_write_reason`` allows, and merge its projections where ``projections_reason`` allows."""
    forward = _rotary_forward(type(module).forward)
    if (unfused := rotary_cache.cache_write_reason(forward, ROTARY)) is None:
        forward = rotary_cache.cache_writing_forward(forward)
    else:
        skipped[f"{name}.rotary_cache_write"] = unfused
    module.forward = types.MethodType(forward, module)
    module.__dict__[ROTARY_PATCHED] = True
    if (merge := projections_reason(module)) is None:
        merge_projections(module)
    else:
        skipped[f"{name}.q_proj"] = merge


def patch_residual(module: torch.nn.Module, name: str, skipped: dict[str, str]) -> None:
    """Run a decoder layer as ``decoder_layer_forward``."""
    module.forward = types.MethodType(decoder_layer_forward, module)
    module.__dict__[RESIDUAL_PATCHED] = True


def device_reason(module: torch.nn.Module) -> str | None:
    """Why ``patch`` leaves a module where it is: wavetune runs on CUDA devices (meta tensors trace shapes)."""
    device = next(module.parameters()).device
    if device.type in ("cuda", "meta"):
        return None
    return f"on {device}: wavetune runs on CUDA GPUs; move the model there first (model.to('cuda'))"


def patch_layers(model: torch.nn.Module) -> tuple[list[str], dict[str, str]]:
    """Swap ``model``'s RMSNorms, gated MLPs and rotary embeddings for the layer ops, merge the query, key and
    value projections of attentions with a Llama rotary embedding, and fuse Llama decoder layers' residual
    addition with their post-attention norm, in place; returns the names swapped and, for modules of those kinds
    left alone, why."""
    swapped, skipped = [], {}
    if "transformers" not in sys.modules:  # the modules it swaps are transformers' classes
        return swapped, skipped
    for name, module in list(model.named_modules()):
        kind = type(module).__name__
        if isinstance(module, (RMSNorm, GatedMLP)) or not name:
            continue
        if kind.endswith("RMSNorm"):
            build, reason = RMSNorm, norm_reason(module)
        elif kind.endswith("MLP") and hasattr(module, "gate_proj"):
            build, reason = GatedMLP, mlp_reason(module)
        elif hasattr(module, "q_proj") and ROTARY_PATCHED not in module.__dict__:
            build, reason = patch_rotary, rotary_reason(module)
        elif kind.endswith("DecoderLayer") and RESIDUAL_PATCHED not in module.__dict__:
            build, reason = patch_residual, decoder_reason(module)
        else:
            continue
        reason = reason or device_reason(module)
        if reason is not None:
            skipped[name] = reason
            continue
        if isinstance(build, type):  # a module of its own in the model's place
            parent, _, attribute = name.rpartition(".")
            setattr(model.get_submodule(parent), attribute, build(module))
        else:  # a forward of its own on the model's module
            build(module, name, skipped)
        swapped.append(name)
    link_next_norms(model)
    return swapped, skipped


def link_next_norms(model: torch.nn.Module) -> None:
    """Link each decoder layer running ``decoder_layer_forward`` to the norm its output goes to next
    (``NEXT_NORM``): the input norm of the layer after it in its model's ``layers``, and after the last one the
    model's final ``norm``, where those are ``RMSNorm``s. A link is what a layer computes ahead; what a norm
    returns is checked against its input (``RMSNorm.forward``)."""
    for owner in model.modules():
        layers = getattr(owner, "layers", None)
        if not isinstance(layers, torch.nn.ModuleList):
            continue
        loop_writes = writes_in_place(type(owner).forward)
        consumers = list(layers)[1:] + [None]
        for layer, consumer in zip(layers, consumers):
            norm = getattr(owner if consumer is None else consumer, "norm" if consumer is None else "input_layernorm",
                           None)
            if RESIDUAL_PATCHED in layer.__dict__ and isinstance(norm, RMSNorm):
                runs_ours = consumer is None or RESIDUAL_PATCHED in consumer.__dict__
                layer.__dict__[NEXT_NORM] = NextNorm(norm, consumer, runs_ours and not loop_writes)


def unpatch_layers(model: torch.nn.Module) -> list[str]:
    """Put back what ``patch_layers`` swapped (the MLP's gate and up weights stay views of one tensor); the
    names."""
    restored = []
    for name, module in list(model.named_modules()):
        if isinstance(module, (RMSNorm, GatedMLP, ProjectionSlice)):
            parent, _, attribute = name.rpartition(".")
            setattr(model.get_submodule(parent), attribute, _original(module))
        elif module.__dict__.pop(ROTARY_PATCHED, False) or module.__dict__.pop(RESIDUAL_PATCHED, False):
            module.__dict__.pop(NEXT_NORM, None)
            del module.forward
        else:
            continue
        restored.append(name)
    return restored

"""wavetune in a PyTorch model: ``Linear`` (an ``nn.Linear`` that runs wavetune's GEMM), ``FP8Linear`` (FP8
weights with per-channel scales on ``wavetune.scaled_gemm``) and ``quantize_model``, ``patch`` and ``unpatch``
(swap a model's eligible ``nn.Linear`` layers in place and back; a ``transformers`` model's experts and
attention too, ``wavetune.hf``), and the model's GEMM shapes as a shape-suite JSON for
``python -m wavetune tune --exact``.

    import wavetune
    report = wavetune.patch(model)        # model on bf16/fp16 weights; report.skipped says what stayed
    with torch.inference_mode():
        logits = model(tokens)
    wavetune.unpatch(model)

Importing this module imports torch and registers torch.ops.wavetune (``wavetune.torch_ops``).
"""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from pathlib import Path

import torch

from . import decode_graphs as step_graphs
from . import fused, hf
from . import torch_ops  # noqa: F401  (registers torch.ops.wavetune)
from .families.gemm import torch_ops as gemm_ops
from .runtime import invariance
from .runtime.device import unsupported_gpu_reason

DTYPES = fused.DTYPES
# The token counts M of the public shape suite (shared/benchmarks/llm_shapes.json): decode to prefill.
SUITE_M = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096,
           6144, 8192, 16384)

_LINEAR_OP = torch.ops.wavetune.linear.default
_SILU_AND_MUL_OP = torch.ops.wavetune.linear_silu_and_mul.default
_RESIDUAL_OP = torch.ops.wavetune.linear_residual.default


def unsupported_reason(linear: torch.nn.Linear) -> str | None:
    """Why wavetune's GEMM cannot run this layer, every reason at once ("; " between them), or None if it can
    (the device is not checked: a model may be patched before it is moved to the GPU)."""
    weight, bias = linear.weight, linear.bias
    n, k = weight.shape
    reasons = [
        f"weight dtype {weight.dtype}: wavetune runs bfloat16 and float16" if weight.dtype not in DTYPES else "",
        f"out_features={n}, in_features={k}: both must be multiples of 8 (TMA alignment)" if n % 8 or k % 8 else "",
        f"weight strides {weight.stride()}: rows must be contiguous" if weight.stride(1) != 1 else "",
        f"bias dtype {bias.dtype} differs from the weight's {weight.dtype}"
        if bias is not None and bias.dtype != weight.dtype else "",
    ]
    return "; ".join(reason for reason in reasons if reason) or None


def _rebuilt(cls: type, linear: torch.nn.Linear) -> torch.nn.Linear:
    """A ``cls`` module holding ``linear``'s own Parameter objects (shared, not copied: ties survive)."""
    module = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
    module.weight, module.bias = linear.weight, linear.bias
    return module.train(linear.training)


class Linear(torch.nn.Linear):
    """``nn.Linear`` whose forward is ``torch.ops.wavetune.linear``: same parameters (``weight`` [N, K],
    ``bias`` [N]), inference only, CUDA bf16/fp16 only (anything else raises)."""

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear) -> Linear:
        """A wavetune Linear sharing ``linear``'s parameters; ValueError if wavetune cannot run it."""
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError(f"expected an nn.Linear, got {type(linear).__name__}")
        reason = unsupported_reason(linear)
        if reason is not None:
            raise ValueError(f"wavetune cannot run this nn.Linear: {reason}")
        if linear.weight.is_cuda:  # load the tuned table now: a first call under CUDA-graph capture cannot
            gemm_ops.ensure_table(linear.weight.get_device())
        return _rebuilt(cls, linear)

    def to_linear(self) -> torch.nn.Linear:
        """A plain nn.Linear sharing this module's parameters."""
        return _rebuilt(torch.nn.Linear, self)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, gemm=wavetune"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._run(gemm_ops.linear, _LINEAR_OP, x)

    def forward_silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        """``wavetune.silu_and_mul(self(x))`` for a merged gate and up projection (the gate's rows first): SiLU and
        the product in the GEMM's epilogue where the decode GEMM runs (``torch.ops.wavetune.linear_silu_and_mul``)."""
        return self._run(gemm_ops.linear_silu_and_mul, _SILU_AND_MUL_OP, x)

    def forward_residual(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """``residual + self(x)``: the addition in the GEMM's epilogue where the decode GEMM runs, rounded once
        (``torch.ops.wavetune.linear_residual``)."""
        return self._run(gemm_ops.linear_residual, _RESIDUAL_OP, x, residual)

    def _run(self, kernel, op, x: torch.Tensor, *operands: torch.Tensor) -> torch.Tensor:
        """``kernel(x, weight, *operands, bias, level)``, or the operator ``op`` of it where a tracer runs."""
        if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad):
            raise RuntimeError("wavetune.nn.Linear is inference-only (its GEMM has no backward): run the model "
                               "under torch.inference_mode() or torch.no_grad(), or wavetune.unpatch it to train")
        # NOTES: in plain eager mode on CUDA the kernel is called directly: the dispatcher round trip of the
        # operator costs microseconds of host time per layer (benchmarks/compare.py overhead). Tracers
        # (torch.compile, export, fake and other tensor subclasses) and other devices (meta: the fake
        # implementation; CPU: the refusal) get the operator.
        level = invariance.level_for(self)
        if not torch.compiler.is_compiling() and type(x) is torch.Tensor and x.is_cuda:
            return kernel(x, self.weight, *operands, self.bias, level)
        return op(x, self.weight, *operands, self.bias, level)


class FP8Linear(torch.nn.Module):
    """A linear layer on FP8 (e4m3) weights, ``weight`` [N, K], with fp32 ``weight_scale`` of one of the
    layouts of FP8 checkpoints: one value, one per output channel ([N, 1]), or one per 128x128 block
    ([ceil(N/128), ceil(K/128)], as block-quantized checkpoints' ``weight_scale_inv``). Each call quantizes
    its input per token, or per 128-group of a token for block scales (``wavetune.quantize_fp8``), and runs
    ``wavetune.scaled_gemm``. ``input_scale`` (one fp32 value) makes the activation scale static (not with
    block scales). Output and bias in ``dtype`` (bf16 or fp16). Inference only."""

    def __init__(self, weight: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None = None,
                 input_scale: torch.Tensor | None = None, dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        if weight.dtype != torch.float8_e4m3fn or weight.dim() != 2:
            raise ValueError(f"weight must be a 2-D torch.float8_e4m3fn tensor, got {weight.dtype} "
                             f"{tuple(weight.shape)}")
        n, k = weight.shape
        blocks = (-(-n // 128), -(-k // 128))
        self.block_scales = weight_scale.dim() == 2 and tuple(weight_scale.shape) == blocks and weight_scale.numel() > 1
        if weight_scale.dtype != torch.float32 or not (self.block_scales or weight_scale.numel() in (1, n)):
            raise ValueError(f"weight_scale must be float32 with one value, one per output channel ({n}) or one per "
                             f"128x128 block {blocks}, got {weight_scale.dtype} {tuple(weight_scale.shape)}")
        if self.block_scales and input_scale is not None:
            raise ValueError("block scales quantize activations per 128-group: no static input_scale")
        self.out_features, self.in_features = n, k
        self.dtype = dtype
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.weight_scale = torch.nn.Parameter(
            (weight_scale if self.block_scales else weight_scale.reshape(-1, 1)).contiguous(), requires_grad=False)
        self.bias = None if bias is None else torch.nn.Parameter(bias.to(dtype), requires_grad=False)
        self.input_scale = None if input_scale is None else torch.nn.Parameter(input_scale.float().reshape(()),
                                                                              requires_grad=False)
        self.replaced = None  # the checkpoint's own layer, for unpatch (replacing)

    @classmethod
    def replacing(cls, layer: torch.nn.Module, weight, weight_scale, bias, input_scale) -> FP8Linear:
        """An FP8Linear on a checkpoint layer's own tensors (``wavetune.hf.fp8_layer_parameters``), in the
        model's bf16 (fp16 where its bias is); ``unpatch`` puts ``layer`` back."""
        dtype = torch.float16 if bias is not None and bias.dtype == torch.float16 else torch.bfloat16
        module = cls(weight.detach(), weight_scale.detach(), None if bias is None else bias.detach(),
                     None if input_scale is None else input_scale.detach(), dtype=dtype)
        object.__setattr__(module, "replaced", layer)  # not a submodule: its tensors are this module's
        return module

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, *, block_scales: bool = False) -> FP8Linear:
        """``linear`` quantized to e4m3 per output channel, or per 128x128 block: scale = the largest magnitude
        / 448 of each."""
        weight = linear.weight.detach().float()
        tiny = torch.finfo(torch.float32).tiny
        bias = None if linear.bias is None else linear.bias.detach()
        if not block_scales:
            scale = (weight.abs().amax(dim=1, keepdim=True) / 448).clamp(min=tiny)
            return cls((weight / scale).to(torch.float8_e4m3fn), scale, bias, dtype=linear.weight.dtype)
        n, k = weight.shape
        padded = torch.nn.functional.pad(weight.abs(), (0, -k % 128, 0, -n % 128))
        scale = (padded.reshape(-(-n // 128), 128, -(-k // 128), 128).amax(dim=(1, 3)) / 448).clamp(min=tiny)
        expanded = scale.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
        return cls((weight / expanded).to(torch.float8_e4m3fn), scale, bias, dtype=linear.weight.dtype)

    def extra_repr(self) -> str:
        activations = ("static" if self.input_scale is not None else "per 128-group" if self.block_scales
                       else "per token")
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"weights={'128x128 blocks' if self.block_scales else 'per channel'}, activations={activations}, "
                "gemm=wavetune fp8")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if invariance.level_for(self) != "off":
            raise ValueError("wavetune.nn.FP8Linear has no batch-invariant GEMM (wavetune.scaled_gemm's choice moves "
                             "between kernels by M): leave FP8 layers out of batch-invariant mode")
        rows = x.reshape(-1, x.shape[-1]).to(self.dtype)
        if self.block_scales:
            q, scale = torch.ops.wavetune.quantize_fp8(rows, None, 128)
            out = torch.ops.wavetune.scaled_gemm(q, self.weight.t(), scale, self.weight_scale, self.bias, self.dtype,
                                                 True)
        else:
            q, scale = torch.ops.wavetune.quantize_fp8(rows, self.input_scale)
            per_channel = self.weight_scale.numel() > 1
            out = torch.ops.wavetune.scaled_gemm(
                q, self.weight.t(), scale.reshape(-1, 1) if scale.numel() > 1 else scale.reshape(()),
                self.weight_scale.view(1, -1) if per_channel else self.weight_scale.view(()), self.bias, self.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)


def quantize_model(model: torch.nn.Module, *, block_scales: bool = False) -> list[str]:
    """Replace every plain ``nn.Linear`` of ``model`` that wavetune can run (``unsupported_reason``) by an
    ``FP8Linear`` quantized from it (per channel, or per 128x128 block), in place, except a transformers
    model's output head (kept in bf16, as FP8 checkpoints keep it); returns the layers' names. Lossy: for FP8
    serving experiments."""
    head = getattr(model, "get_output_embeddings", lambda: getattr(model, "lm_head", None))()
    done = []
    for name, parent, attribute, linear in _linear_children(model):
        if type(linear) is torch.nn.Linear and linear is not head and unsupported_reason(linear) is None \
                and linear.in_features % 16 == 0:
            setattr(parent, attribute, FP8Linear.from_linear(linear, block_scales=block_scales))
            done.append(name)
    return done


@dataclasses.dataclass
class PatchReport:
    """What ``patch`` did: the layers it swapped, those it left alone with the reason, and, for a
    transformers model, the implementations it switched to ``"wavetune"`` with the ones they replace
    (``{"attention": "sdpa", "experts": "grouped_mm"}``; ``wavetune.hf``), and the norms, MLPs and attention
    modules put on the layer ops (``layers``; ``wavetune.fused``) with those of their kinds left alone
    (``layers_skipped``)."""

    patched: list[str]
    skipped: dict[str, str]
    switched: dict[str, str] = dataclasses.field(default_factory=dict)
    layers: list[str] = dataclasses.field(default_factory=list)
    layers_skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    decode_graphs: bool = False  # whether decode steps over a static cache replay from CUDA graphs (wavetune.decode_graphs)

    def __str__(self) -> str:
        lines = [f"wavetune: patched {len(self.patched)} nn.Linear layers, skipped {len(self.skipped)}; "
                 f"{len(self.layers)} norms, MLPs, rotary embeddings and residual additions on layer ops, left {len(self.layers_skipped)}"]
        lines += [f"  {kind}: {previous} -> {hf.IMPLEMENTATION}" for kind, previous in self.switched.items()]
        lines += ["  decode steps over a static cache: CUDA graphs"] if self.decode_graphs else []
        lines += [f"  skipped {name}: {reason}" for name, reason in {**self.skipped, **self.layers_skipped}.items()]
        return "\n".join(lines)


def _linear_children(model: torch.nn.Module):
    """(qualified name, parent, attribute name, module) of every nn.Linear below ``model`` (subclasses
    included, and a layer reached by two paths under both), in the model's order."""
    for name, module in list(model.named_modules(remove_duplicate=False)):
        if name and isinstance(module, torch.nn.Linear):
            parent_name, _, attribute = name.rpartition(".")
            yield name, model.get_submodule(parent_name), attribute, module


def patch(model: torch.nn.Module, *, attention: bool = True, experts: bool = True, layers: bool = True,
          batch_invariant: bool | str = False, decode_graphs: bool = True) -> PatchReport:
    """Swap every eligible ``nn.Linear`` of ``model`` in place for ``wavetune.nn.Linear`` (same parameters).

    Eligible: exactly ``nn.Linear`` (subclasses may have their own forward), bf16 or fp16 weights, in and
    out features multiples of 8, on a CUDA device (or the meta device, to trace shapes). Layers on the CPU
    are left alone and reported, so a CPU model keeps running: move the model to the GPU and convert its
    dtype, then patch. A ``transformers`` model also gets wavetune's attention (``attention``) and, with
    routed experts, wavetune's experts (``experts``; ``wavetune.hf.patch_model``). With ``layers``, its
    transformers RMSNorms, SiLU-gated MLPs (gate and up merged into one GEMM) and rotary embeddings run the
    layer ops (``wavetune.fused``). With ``decode_graphs`` (the default), a transformers model on the GPU that
    generates runs its decode steps over a static cache from CUDA graphs captured per batch size on first use, in
    place of ``generate``'s automatic torch.compile (``wavetune.decode_graphs``). With ``batch_invariant`` (True or a level name), the model's calls run
    batch-invariant whatever the process-wide setting (docs/torch.md, "Batch-invariant mode"). ``unpatch``
    reverses it. On a GPU older than compute capability 8.0, which wavetune needs (docs/kernels.md,
    "Architectures"), it leaves the model unchanged and warns why.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"wavetune.patch takes a torch.nn.Module, got {type(model).__name__}")
    invariance.level_of(batch_invariant)  # bad input fails before the model changes
    if isinstance(model, torch.nn.Linear):
        raise ValueError("the model is itself an nn.Linear: use wavetune.nn.Linear.from_linear(model)")
    report = PatchReport(patched=[], skipped={})
    if reason := unsupported_gpu_reason(model):
        warnings.warn(f"wavetune.patch left the model unchanged: {reason}", stacklevel=2)
        return report
    if layers:  # first: the merged gate and up projections are nn.Linear layers for the loop below
        report.layers, report.layers_skipped = fused.patch_layers(model)
    for name, parent, attribute, linear in _linear_children(model):
        if isinstance(linear, Linear):
            continue  # patched already
        if (fp8 := hf.fp8_layer_parameters(linear)) is not None and fused.device_reason(linear) is None:
            setattr(parent, attribute, FP8Linear.replacing(linear, *fp8))
            report.patched.append(name)
            continue
        # Every reason at once (the dtype and the device, say), so that one report says all there is to fix.
        reasons = ([f"{type(linear).__qualname__} is a subclass of nn.Linear (its forward may differ)"]
                   if type(linear) is not torch.nn.Linear
                   else [unsupported_reason(linear), fused.device_reason(linear)])
        if reason := "; ".join(r for r in reasons if r):
            report.skipped[name] = reason
            continue
        setattr(parent, attribute, Linear.from_linear(linear))
        report.patched.append(name)
    if hf.transformers_model(model):
        report.switched = hf.patch_model(model, attention=attention, experts=experts)
        report.decode_graphs = decode_graphs and fused.device_reason(model) is None and step_graphs.install(model)
    invariance.mark(model, batch_invariant)
    return report


def unpatch(model: torch.nn.Module) -> list[str]:
    """Swap every ``wavetune.nn.Linear`` of ``model`` back to ``nn.Linear`` (same parameters), the layer ops'
    modules back to the model's, a transformers model's forward back without its decode graphs (freed), and its
    implementations back to the ones ``patch`` replaced; their names (layer-op modules, linear layers, then
    ``"decode_graphs"``, ``"attention"``, ``"experts"``)."""
    invariance.mark(model, False)
    restored = fused.unpatch_layers(model)
    for name, parent, attribute, linear in _linear_children(model):
        if isinstance(linear, Linear):
            setattr(parent, attribute, linear.to_linear())
            restored.append(name)
    for name, module in list(model.named_modules()):
        if isinstance(module, FP8Linear) and module.replaced is not None:
            parent, _, attribute = name.rpartition(".")
            setattr(model.get_submodule(parent), attribute, module.replaced)
            restored.append(name)
    if step_graphs.remove(model):
        restored.append("decode_graphs")
    if hf.transformers_model(model):
        restored += list(hf.unpatch_model(model))
    return restored


def _runnable_layers(model: torch.nn.Module):
    """(name, layer) of each layer wavetune runs or would run: patched, or eligible for ``patch``."""
    for name, _, _, linear in _linear_children(model):
        if isinstance(linear, Linear) or (type(linear) is torch.nn.Linear and unsupported_reason(linear) is None):
            yield name, linear


def model_shapes(model: torch.nn.Module) -> dict[str, list[int]]:
    """[N, K] of each layer wavetune runs or would run, by name with layer indices as ``*``
    (``model.layers.*.mlp.down_proj``); a layer whose shape differs from its pattern's keeps its own name."""
    shapes: dict[str, list[int]] = {}
    for name, linear in _runnable_layers(model):
        pattern = re.sub(r"(^|\.)\d+(?=\.)", r"\1*", name)
        shape = [linear.out_features, linear.in_features]
        shapes[pattern if shapes.setdefault(pattern, shape) == shape else name] = shape
    return shapes


def write_shapes(model: torch.nn.Module, path: str | Path, *, name: str = "model",
                 token_counts: tuple[int, ...] = SUITE_M) -> dict:
    """Write ``model``'s GEMM shapes as a shape-suite JSON (the format of shared/benchmarks/llm_shapes.json)
    for ``python -m wavetune tune --exact PATH``; returns what it wrote."""
    dtypes = {linear.weight.dtype for _, linear in _runnable_layers(model)}
    if len(dtypes) != 1:
        raise ValueError(f"expected the runnable nn.Linear layers to share one dtype, found {sorted(map(str, dtypes))}")
    suite = {
        "description": f"nn.Linear GEMM shapes of {name}: out[M,N] = x[M,K] @ W[N,K]^T; M is the token count",
        "dtype": str(dtypes.pop()).removeprefix("torch."),
        "M": list(token_counts),
        "models": {name: model_shapes(model)},
    }
    Path(path).write_text(json.dumps(suite, indent=1) + "\n")
    return suite

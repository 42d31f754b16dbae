"""A transformers model's decode steps replayed from CUDA graphs (``wavetune.patch(model, decode_graphs=True)``,
the default; docs/torch.md, "Decode steps in CUDA graphs").

``install`` wraps the model's ``forward``: a decode step over a ``StaticCache`` (one token per sequence, no
mask or wavetune's key-count mask) is captured the first time its shapes are seen (per batch size) and
replayed from then on, its tensor arguments copied into the graph's own buffers first; every other call runs
the model's forward as it is (``step_reason`` says why). The graphs belong to one cache: another cache
object, or one whose buffers or maximum length changed, drops them and captures again. ``remove`` frees them.

NOTES: capture follows PyTorch's documented pattern. The first step of a shape runs eagerly on a side stream
(the warm-up, whose result is that step's result: a static cache advances in place, so a second warm-up would
advance it twice), then ``torch.cuda.graph`` records the step without running it, in a memory pool the
graphs of one cache share (they never run concurrently, and each keeps its inputs and outputs alive).
"""

from __future__ import annotations

import copy
import functools
import types
import warnings
import weakref

import torch

from . import hf
from .runtime.tables import on_table_change, on_variants_added

RUNNER = "_wavetune_decode_graphs"  # where a model keeps its DecodeGraphs
SCALARS = (bool, int, float, str, type(None))  # non-tensor arguments a graph is keyed by
_live: weakref.WeakSet = weakref.WeakSet()  # every model's DecodeGraphs, for table and variant changes


def on_gpu(tensor: torch.Tensor) -> bool:
    return tensor.is_cuda


def capturing() -> bool:
    """Whether the current stream is being captured (by the caller's own graph)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def cache_reason(cache) -> str | None:
    """Why a decode step over ``cache`` runs eagerly; None for a filled ``StaticCache`` of full-attention layers
    on the GPU (its counters and buffers stay put, so a graph replays over them)."""
    from transformers.cache_utils import StaticCache, StaticLayer

    if not isinstance(cache, StaticCache):
        return f"a {type(cache).__name__} (graphs need a StaticCache: cache_implementation='static')"
    if cache.offloading:
        return "an offloaded cache (its layers move between devices)"
    for layer in cache.layers:
        if type(layer) is not StaticLayer:  # a sliding window keeps its length on the host
            return f"a {type(layer).__name__} layer (sliding windows keep host state)"
        if not layer.is_initialized:
            return "an empty cache (the prefill runs first)"
    return None


def step_reason(args: tuple, kwargs: dict) -> str | None:
    """Why this forward call runs eagerly; None: it is a decode step a graph replays."""
    if args:
        return "positional arguments (generate passes keywords)"
    if torch.is_grad_enabled() or torch.is_autocast_enabled():
        return "gradients or autocast enabled (graphs run under torch.no_grad or inference_mode)"
    ids, embeds = kwargs.get("input_ids"), kwargs.get("inputs_embeds")
    tokens = ids if ids is not None else embeds
    if not isinstance(tokens, torch.Tensor) or tokens.dim() < 2:
        return "no input_ids or inputs_embeds"
    if not on_gpu(tokens):
        return f"inputs on {tokens.device}"
    if capturing():
        return "a graph is being captured already"
    if tokens.shape[1] != 1:
        return f"{tokens.shape[1]} tokens per sequence (a prefill)"
    if kwargs.get("use_cache") is False:
        return "use_cache=False"
    if reason := cache_reason(kwargs.get("past_key_values")):
        return reason
    mask = kwargs.get("attention_mask")
    if mask is not None and hf.key_lengths(mask) is None:
        return "an attention mask (padding, or attention not on wavetune)"
    for name, value in kwargs.items():
        if name != "past_key_values" and not isinstance(value, (torch.Tensor, *SCALARS)):
            return f"argument {name} of type {type(value).__name__}"
        if isinstance(value, torch.Tensor) and value.device != tokens.device:
            return f"{name} on {value.device}"
    return None


def cache_signature(cache) -> tuple:
    """What a graph captured over ``cache`` depends on: the object, and each layer's length and buffers."""
    return (id(cache), *((layer.max_cache_len, layer.keys.data_ptr(), layer.values.data_ptr(),
                          layer.cumulative_length.data_ptr()) for layer in cache.layers))


def graph_key(kwargs: dict) -> tuple:
    """The graph a decode step replays: its arguments' shapes and dtypes (the batch size among them) and
    scalar values, and whether inference mode is on (its buffers are inference tensors then)."""
    return (torch.is_inference_mode_enabled(), *sorted(
        (name, (tuple(value.shape), value.dtype) if isinstance(value, torch.Tensor) else value)
        for name, value in kwargs.items() if name != "past_key_values"))


CACHE = object()  # stands for the cache in a stored output: a graph keeps no cache alive


def outputs_like(output, old, new, copy_tensors: bool):
    """``output`` (a ModelOutput, tuple or tensor) with ``old`` (a cache) replaced by ``new`` and, with
    ``copy_tensors``, its tensors copied out of the graph's buffers."""
    if isinstance(output, torch.Tensor):
        return output.clone() if copy_tensors else output
    if output is old:
        return new
    if isinstance(output, dict):  # transformers' ModelOutput
        return type(output)(**{name: outputs_like(value, old, new, copy_tensors) for name, value in output.items()})
    if isinstance(output, tuple):
        return tuple(outputs_like(value, old, new, copy_tensors) for value in output)
    return output


class DecodeGraphs:
    """One model's decode-step graphs: per ``graph_key``, (graph, input buffers, output), or why its capture
    failed (that shape then runs eagerly)."""

    def __init__(self, forward, previous=None):
        self.forward = forward  # the model's forward as it was
        self.previous = previous  # the forward an instance had of its own (a hook's), restored by remove
        self.graphs: dict[tuple, tuple | str] = {}
        self.cache: tuple | None = None  # cache_signature of the cache the graphs run over
        self.pool = None  # the memory pool every graph of this model shares
        self.stream: torch.cuda.Stream | None = None
        self.captures = 0  # how many graphs were captured
        _live.add(self)

    def __deepcopy__(self, memo):
        """A copy without graphs (they hold this model's buffers): a copied model captures its own."""
        return DecodeGraphs(copy.deepcopy(self.forward, memo), copy.deepcopy(self.previous, memo))

    def reset(self) -> None:
        """Drop every graph (their memory goes back to the pool)."""
        self.graphs.clear()
        self.cache = None

    def capture_pool(self):
        """The memory pool of the next capture: the one the captured graphs hold, else a new one.

        NOTES: PyTorch's caching allocator releases a pool once no graph holds it; capturing into that pool's
        handle again fails an internal assert (torch 2.11: ``it->second->use_count > 0``)."""
        if not any(isinstance(entry, tuple) for entry in self.graphs.values()):
            self.pool = torch.cuda.graph_pool_handle()
        return self.pool

    def __call__(self, *args, **kwargs):
        if step_reason(args, kwargs) is not None:
            return self.forward(*args, **kwargs)
        signature = cache_signature(kwargs["past_key_values"])
        if signature != self.cache:
            self.reset()
            self.cache = signature
        key = graph_key(kwargs)
        entry = self.graphs.get(key)
        if entry is None:
            return self.capture(key, kwargs)
        if isinstance(entry, str):
            return self.forward(**kwargs)
        graph, buffers, output = entry
        for name, value in kwargs.items():
            if isinstance(value, torch.Tensor):
                buffers[name].copy_(value)
        graph.replay()
        return outputs_like(output, CACHE, kwargs["past_key_values"], copy_tensors=True)

    def capture(self, key: tuple, kwargs: dict):
        """Run this step eagerly on a side stream (the warm-up), then capture it over copies of its tensor
        arguments; returns the eager step's output."""
        buffers = {name: value.clone() if isinstance(value, torch.Tensor) else value for name, value in kwargs.items()}
        device = kwargs["past_key_values"].layers[0].keys.device
        self.stream = self.stream or torch.cuda.Stream(device)
        self.stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(self.stream):
            output = self.forward(**kwargs)
        torch.cuda.current_stream(device).wait_stream(self.stream)
        graph = torch.cuda.CUDAGraph()
        try:
            # thread_local: a background compile's CUDA calls on another thread do not break the capture
            with torch.cuda.graph(graph, pool=self.capture_pool(), capture_error_mode="thread_local"):
                captured = self.forward(**buffers)
        except RuntimeError as error:
            self.graphs[key] = f"capture failed: {error}"
            warnings.warn(f"wavetune: a decode step runs eagerly, its CUDA-graph capture failed: {error}",
                          stacklevel=3)
            return output
        tensors = {name: value for name, value in buffers.items() if isinstance(value, torch.Tensor)}
        self.graphs[key] = (graph, tensors, outputs_like(captured, kwargs["past_key_values"], CACHE, False))
        self.captures += 1
        return output


def _reset_all() -> None:
    for runner in list(_live):  # a table or compiled variants change which kernels a step launches
        runner.reset()


on_table_change(_reset_all)
on_variants_added(_reset_all)


def graphs_reason(model: torch.nn.Module) -> str | None:
    """Why ``install`` leaves ``model``'s forward alone; None: decode steps may replay from graphs."""
    if not callable(getattr(model, "generate", None)) or not getattr(model, "can_generate", lambda: False)():
        return f"{type(model).__name__} does not generate"
    devices = set(getattr(model, "hf_device_map", {}).values())
    if len(devices) > 1 or devices & {"cpu", "disk"}:
        return "the model is spread over devices or offloaded (device_map)"
    return None


def installed(model: torch.nn.Module) -> DecodeGraphs | None:
    """The model's DecodeGraphs, or None."""
    return model.__dict__.get(RUNNER)


def install(model: torch.nn.Module) -> bool:
    """Wrap ``model.forward`` in a ``DecodeGraphs`` and make transformers' automatic compile of ``generate``
    step aside (``get_compiled_call`` without a compile config gives the plain call); whether it did."""
    if installed(model) is not None or graphs_reason(model) is not None:
        return installed(model) is not None

    @functools.wraps(type(model).forward)  # transformers reads the forward's signature
    def forward(self, *args, **kwargs):
        runner = getattr(self, RUNNER)
        if torch.compiler.is_compiling():  # torch.compile traces the model's own forward
            return runner.forward(*args, **kwargs)
        return runner(*args, **kwargs)

    model.__dict__[RUNNER] = DecodeGraphs(model.forward, model.__dict__.get("forward"))
    # Methods bound to the model, not closures over it: copy.deepcopy binds them to the copy.
    model.forward = types.MethodType(forward, model)
    model.get_compiled_call = types.MethodType(_compiled_call, model)
    return True


def _compiled_call(model, compile_config=None):
    """``generate``'s decode-step callable: the model itself (its graphs) unless a ``CompileConfig`` was
    given, which compiles as transformers does (the graphs step aside while torch.compile traces)."""
    if compile_config is None:
        return model.__call__
    return type(model).get_compiled_call(model, compile_config)


def remove(model: torch.nn.Module) -> bool:
    """Free ``model``'s graphs and put its forward back; whether it had them."""
    runner = model.__dict__.pop(RUNNER, None)
    if runner is None:
        return False
    runner.reset()
    runner.pool = runner.stream = None
    _live.discard(runner)
    del model.forward, model.get_compiled_call
    if runner.previous is not None:
        model.forward = runner.previous
    return True

"""Rotary embedding and the static-cache write as one kernel (``torch.ops.wavetune.rotary_cache_write``) in
transformers' attention forwards: where an attention's forward rotates its queries and keys and then hands the
keys straight to ``past_key_values.update`` (``cache_write_reason``), and the cache layer is a ``StaticLayer``,
the rotary embedding waits for that update: ``apply_rotary_pos_emb`` returns an unfilled query tensor and the
keys as they came, and the cache layer's update fills the queries, writes the rotated keys and the values and
advances the layer's length in one launch, where transformers runs the rotary embedding and the update's arange,
add_ and two index_copy_ apart.

NOTES: the hand-over is checked twice. At patch time, the forward's bytecode must load neither the rotated
queries nor the keys between the rotary call and the update call, but the keys as the update's argument; at run
time, the update must receive the very key tensor the rotary embedding returned. Any other update of the cache's
static layers (another layer's, other keys, tensors the kernel does not take) rotates what waits with the plain
kernel first, and a forward that returns with the rotation still waiting runs again unfused: the queries are
never read unfilled.
"""

from __future__ import annotations

import dis
import functools
import re
import threading
import types

import torch



@functools.cache
def _cache_utils():
    from transformers import cache_utils

    return cache_utils


class _Waiting(threading.local):
    """The running patched forward's cache layer (``armed``) and the rotation waiting for its update (``pending``:
    q, k, cos, sin and the unfilled queries)."""

    armed = None
    pending = None


_WAITING = _Waiting()


def _fast_locals(instruction: dis.Instruction) -> list[tuple[str, str]]:
    """(LOAD or STORE, local name) for each local an instruction loads or stores (3.13's superinstructions do
    two)."""
    kinds = re.findall(r"(LOAD|STORE)_FAST", instruction.opname)
    names = instruction.argval if isinstance(instruction.argval, tuple) else (instruction.argval,)
    return list(zip(kinds, names)) if len(kinds) == len(names) else []


def _loads(instructions, name: str) -> int:
    return sum(kind == "LOAD" and local == name for ins in instructions for kind, local in _fast_locals(ins))


def cache_write_reason(forward, rotary: str) -> str | None:
    """Why the rotary embedding of an attention ``forward`` cannot wait for its cache update; None: it can (the
    rotary call's results go to two locals, and the next code reading either is ``past_key_values.update`` taking
    the keys, with ``self.layer_idx``)."""
    code = getattr(forward, "__code__", None)
    instructions = list(dis.get_instructions(code)) if code is not None else []
    calls = [i for i, ins in enumerate(instructions) if ins.opname == "LOAD_GLOBAL" and ins.argval == rotary]
    if len(calls) != 1:
        return f"its forward calls {rotary} {len(calls)} times"
    after = next((i for i in range(calls[0], len(instructions)) if instructions[i].opname == "UNPACK_SEQUENCE"),
                 len(instructions)) + 1
    stored = []
    while after < len(instructions) and instructions[after].opname.startswith("STORE_FAST") and len(stored) < 2:
        stored += [name for kind, name in _fast_locals(instructions[after]) if kind == "STORE"]
        after += 1
    if len(stored) != 2:
        return f"its forward does not keep {rotary}'s queries and keys in two locals"
    query, key = stored
    update = next((i for i in range(after, len(instructions))
                   if instructions[i].opname in ("LOAD_ATTR", "LOAD_METHOD") and instructions[i].argval == "update"),
                  None)
    if update is None or ("LOAD", "past_key_values") not in _fast_locals(instructions[update - 1]):
        return "its forward calls no past_key_values.update after the rotary embedding"
    call = next((i for i in range(update, len(instructions)) if instructions[i].opname.startswith("CALL")),
                len(instructions))
    arguments = instructions[update + 1:call]
    if (_loads(instructions[after:update], query) or _loads(instructions[after:update], key)
            or _loads(arguments, query) or _loads(arguments, key) != 1
            or not any(ins.argval == "layer_idx" for ins in arguments)):
        return "its forward reads the rotated queries or keys before the cache update takes the keys"
    return None


def _static_layer(cache, module: torch.nn.Module):
    """The StaticLayer ``module``'s forward updates in ``cache``, where it can take the rotary embedding; else
    None."""
    if torch.compiler.is_compiling():  # the compiled model traces transformers' code
        return None
    utils = _cache_utils()
    if (not isinstance(cache, utils.Cache) or type(cache).update is not utils.Cache.update
            or getattr(cache, "offloading", True) or getattr(cache, "layer_class_to_replicate", 0) is not None):
        return None
    index, layers = getattr(module, "layer_idx", None), cache.layers
    if not isinstance(index, int) or not 0 <= index < len(layers) or type(layers[index]) is not utils.StaticLayer:
        return None
    own = layers[index].__dict__.get("update")  # an instance's own update: ours, or someone else's
    if own is None:
        for layer in layers:
            if type(layer) is utils.StaticLayer and "update" not in layer.__dict__:
                layer.update = types.MethodType(static_layer_update, layer)
    elif getattr(own, "__func__", None) is not static_layer_update:
        return None
    return layers[index]


def wait_for_update(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """(queries, keys) for ``apply_rotary_pos_emb`` to return where the rotation can wait for the cache update of
    the running forward: unfilled queries and ``k`` itself; None where it cannot."""
    if _WAITING.armed is None or _WAITING.pending is not None:
        return None
    batch, heads, seq, head_dim = q.shape
    q_out = q.new_empty((batch, seq, heads, head_dim)).transpose(1, 2)  # as transformers' attention lays out q
    _WAITING.pending = (q, k, cos, sin, q_out)
    return q_out, k


def _writes(layer, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether the kernel can write k and v into ``layer`` (its tensors as ``lazy_initialization`` makes them)."""
    if v.dtype != k.dtype or v.shape != k.shape or v.stride(-1) != 1 or v.device != k.device:
        return False
    if not layer.is_initialized:
        return True
    batch, heads, _, head_dim = k.shape
    keys, values = layer.keys, layer.values
    return (keys.dtype == k.dtype and keys.device == k.device and tuple(keys.shape[:2]) == (batch, heads)
            and keys.shape[3] == head_dim and values.shape == keys.shape and values.stride() == keys.stride()
            and keys.stride(-1) == 1 and layer.cumulative_length.device == k.device)


def _arrivals(layer, device: torch.device) -> torch.Tensor | None:
    """The layer's counter for ``rotary_cache_write`` (zero between launches); None where it would be made while
    a CUDA graph is captured (in the graph's memory pool, outliving the graph: the write then runs apart)."""
    arrivals = layer.__dict__.get("_wavetune_arrivals")
    if arrivals is None and not (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
        arrivals = layer._wavetune_arrivals = torch.zeros(1, dtype=torch.int32, device=device)
    return arrivals


def static_layer_update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
    """``StaticLayer.update``, taking over the rotation waiting for it: in one kernel where this layer is the
    running forward's and the kernel takes its tensors, else the plain rotary kernel before the update."""
    update = type(self).update  # StaticLayer's (the instance's own is this function)
    pending = None if torch.compiler.is_compiling() else _WAITING.pending
    if pending is None or key_states is not pending[1]:
        return update(self, key_states, value_states, *args, **kwargs)
    _WAITING.pending = None
    q, k, cos, sin, q_out = pending
    arrivals = _arrivals(self, k.device) if self is _WAITING.armed and _writes(self, k, value_states) else None
    if arrivals is not None:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        torch.ops.wavetune.rotary_cache_write(q, k, value_states, cos, sin, q_out, self.keys, self.values,
                                              self.cumulative_length, arrivals)
        return self.keys, self.values
    q_rotated, k_rotated = torch.ops.wavetune.rotary_embedding(q, k, cos, sin)
    q_out.copy_(q_rotated)
    return update(self, k_rotated, value_states, *args, **kwargs)


@functools.cache
def cache_writing_forward(rotated):
    """An attention forward (``rotated``: transformers' with wavetune's rotary embedding) whose rotary embedding
    waits for the cache update where ``past_key_values`` (a keyword, as decoder layers pass it) holds a
    StaticLayer for the module."""

    @functools.wraps(rotated)
    def forward(self, *args, **kwargs):
        layer = _static_layer(kwargs.get("past_key_values"), self)
        if layer is None:
            return rotated(self, *args, **kwargs)
        _WAITING.armed = layer
        try:
            outputs = rotated(self, *args, **kwargs)
            unfilled = _WAITING.pending is not None
        finally:
            _WAITING.armed = _WAITING.pending = None
        return rotated(self, *args, **kwargs) if unfilled else outputs

    return forward

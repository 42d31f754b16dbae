"""The layer ops' entry points (docs/torch.md, "Layer ops"): each computes what transformers' module computes,
rounding where it rounds, in one kernel; CUDA bf16/fp16 tensors only (anything else raises). The mixture-of-experts
routing ops (``moe_align``, ``moe_gather``, ``moe_combine``) carry a layer's tokens to its experts' grouped GEMMs
and back."""

from __future__ import annotations

import sys

from ...runtime.device import dtype_codes, stream_getter
from ...runtime.native import _C


def layer_ops_configs() -> list:
    """Empty: the layer ops are fixed kernels, with no variants to choose among."""
    return []


def config_space_hash() -> str:
    return _C.layer_ops_config_space_hash()


def _torch():
    torch = sys.modules.get("torch")
    if torch is None:
        raise TypeError("the layer ops take torch tensors (import torch first)")
    return torch


def _check_tensor(torch, name: str, t, dtype=None) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch tensor, got {type(t).__name__}")
    if t.dtype not in dtype_codes(torch) or (dtype is not None and t.dtype != dtype):
        want = f"{dtype} (x's)" if dtype is not None else "bf16 or fp16"
        raise TypeError(f"{name} must be {want}, got {t.dtype}")
    if t.dim() < 1 or t.stride(-1) != 1:
        raise ValueError(f"{name} must have a contiguous last dimension, got shape {tuple(t.shape)} strides {t.stride()}")


def _rows(t):
    """t as [rows, width]: a view where its leading dimensions collapse, else a contiguous copy."""
    return t.reshape(-1, t.shape[-1])


def check_rows(torch, x, weight=None, width: int | None = None) -> None:
    """The checks of ``rms_norm`` (with ``weight``) and ``silu_and_mul`` (``width``: half of x's last dimension)
    that need no GPU; torch's fake kernels call them."""
    _check_tensor(torch, "x", x)
    if weight is not None:
        _check_tensor(torch, "weight", weight, x.dtype)
        if weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
            raise ValueError(f"weight must be [{x.shape[-1]}] (x's last dimension), got {tuple(weight.shape)}")
    columns = width if width is not None else x.shape[-1]
    if columns < 8 or columns % 8:
        what = "half of x's last dimension" if width is not None else "x's last dimension"
        raise ValueError(f"{what} must be a positive multiple of 8, got {columns}")
    if width is not None and x.shape[-1] != 2 * width:
        raise ValueError(f"x's last dimension must be even (gate and up halves), got {x.shape[-1]}")


def _launch_device(x):
    if not x.is_cuda:
        raise ValueError(f"the layer ops run on CUDA tensors, got {x.device}")
    return x.get_device()


def _check_out(torch, out, x, shape: tuple) -> None:
    """That ``out`` (None: a new tensor) can take a result of ``shape``: x's dtype and device, rows that view as
    [rows, width] with contiguous elements."""
    if out is None:
        return
    if not isinstance(out, torch.Tensor) or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(f"out must be a {x.dtype} tensor on {x.device}")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"out must have shape {tuple(shape)}, got {tuple(out.shape)}")
    try:
        contiguous_rows = out.view(-1, shape[-1]).stride(-1) == 1
    except RuntimeError:  # no view makes rows of it
        contiguous_rows = False
    if not contiguous_rows:
        raise ValueError(f"out's rows must be contiguous, got strides {out.stride()}")


def rms_norm(x, weight, eps: float, *, out=None):
    """``weight * (x / sqrt(mean(x**2, -1) + eps)).to(x.dtype)`` with fp32 statistics, as transformers'
    ``LlamaRMSNorm`` (and its copies) computes it; x [..., width], weight [width] of x's dtype."""
    torch = _torch()
    check_rows(torch, x, weight)
    _check_out(torch, out, x, tuple(x.shape))
    device = _launch_device(x)
    if weight.device != x.device:
        raise ValueError(f"weight is on {weight.device}, x on {x.device}")
    rows = _rows(x)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device) if out is None else out
    out_rows = out.view(-1, x.shape[-1])
    with torch.cuda.device(device):
        _C.rms_norm(rows.data_ptr(), rows.stride(0), weight.data_ptr(), out_rows.data_ptr(), out_rows.stride(0),
                    rows.shape[0], x.shape[-1], float(eps), dtype_codes(torch)[x.dtype], stream_getter(torch)(device))
    return out


def check_residual(torch, x, residual, weight) -> None:
    """The checks of ``add_rms_norm`` that need no GPU: ``rms_norm``'s, and a residual of x's dtype and shape."""
    check_rows(torch, x, weight)
    _check_tensor(torch, "residual", residual, x.dtype)
    if tuple(residual.shape) != tuple(x.shape):
        raise ValueError(f"residual must have x's shape {tuple(x.shape)}, got {tuple(residual.shape)}")


def add_rms_norm(x, residual, weight, eps: float):
    """``sum = x + residual`` (rounded to x's dtype, as PyTorch's addition rounds it) and ``rms_norm(sum, weight,
    eps)`` in one kernel: a pre-norm decoder layer's residual addition and the norm after it; returns (sum, out),
    sum the new residual."""
    torch = _torch()
    check_residual(torch, x, residual, weight)
    device = _launch_device(x)
    if weight.device != x.device or residual.device != x.device:
        raise ValueError(f"weight is on {weight.device} and residual on {residual.device}, x on {x.device}")
    rows, residual_rows = _rows(x), _rows(residual)
    total, out = (torch.empty(x.shape, dtype=x.dtype, device=x.device) for _ in range(2))
    total_rows, out_rows = total.view(-1, x.shape[-1]), out.view(-1, x.shape[-1])
    with torch.cuda.device(device):
        _C.add_rms_norm(rows.data_ptr(), rows.stride(0), residual_rows.data_ptr(), residual_rows.stride(0),
                        total_rows.data_ptr(), total_rows.stride(0), weight.data_ptr(), out_rows.data_ptr(),
                        out_rows.stride(0), rows.shape[0], x.shape[-1], float(eps), dtype_codes(torch)[x.dtype],
                        stream_getter(torch)(device))
    return total, out


def silu_and_mul(x, *, out=None):
    """``silu(gate) * up`` of x = [..., gate | up] (the merged gate and up projections' output), rounded as
    ``act_fn(gate_proj(x)) * up_proj(x)`` is; returns [..., width], width half of x's last dimension."""
    torch = _torch()
    width = x.shape[-1] // 2 if isinstance(x, torch.Tensor) else 0
    check_rows(torch, x, width=width)
    _check_out(torch, out, x, (*x.shape[:-1], width))
    device = _launch_device(x)
    rows = _rows(x)
    out = torch.empty((*x.shape[:-1], width), dtype=x.dtype, device=x.device) if out is None else out
    out_rows = out.view(-1, width)
    with torch.cuda.device(device):
        _C.silu_and_mul(rows.data_ptr(), rows.stride(0), out_rows.data_ptr(), out_rows.stride(0), rows.shape[0], width,
                        dtype_codes(torch)[x.dtype], stream_getter(torch)(device))
    return out


def _heads(t) -> tuple:
    return t.data_ptr(), t.stride(0), t.stride(1), t.stride(2)


def check_rotary(torch, q, k, cos, sin) -> None:
    """The checks of ``rotary_embedding`` that need no GPU."""
    for name, t in (("q", q), ("k", k), ("cos", cos), ("sin", sin)):
        _check_tensor(torch, name, t, q.dtype if name != "q" else None)
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(f"q and k must be [batch, heads, seq, head_dim], got {tuple(q.shape)} and {tuple(k.shape)}")
    batch, _, seq, head_dim = q.shape
    table = (seq, head_dim)
    if k.shape[0] != batch or k.shape[2:] != q.shape[2:]:
        raise ValueError(f"k {tuple(k.shape)} must match q {tuple(q.shape)} but for its heads")
    if cos.shape != sin.shape or cos.dim() != 3 or tuple(cos.shape[1:]) != table or cos.shape[0] not in (1, batch):
        raise ValueError(f"cos and sin must be [batch or 1, seq, head_dim] = [{batch}, {seq}, {head_dim}], got "
                         f"{tuple(cos.shape)} and {tuple(sin.shape)}")
    if cos.stride() != sin.stride():
        raise ValueError(f"cos and sin must share strides, got {cos.stride()} and {sin.stride()}")
    if head_dim % 16:
        raise ValueError(f"head_dim must be a multiple of 16, got {head_dim}")


def rotary_output(torch, t):
    """A new tensor for rotated t: laid out as t where t is dense, else as [batch, seq, heads, head_dim] memory
    seen as [batch, heads, seq, head_dim] (the layout of transformers' rotary embedding of a projection's slice)."""
    out = torch.empty_like(t)
    if out.stride() != t.stride():
        batch, heads, seq, head_dim = t.shape
        out = t.new_empty((batch, seq, heads, head_dim)).transpose(1, 2)
    return out


def _chunked(t):
    """t, or a contiguous copy where its strides or address do not fit 16-byte chunks."""
    return t if t.data_ptr() % 16 == 0 and all(stride % 8 == 0 for stride in t.stride()[:3]) else t.contiguous()


def _rotary_tables(cos) -> tuple:
    """cos's (and sin's) batch and seq strides as the kernel takes them: a batch of one broadcasts (stride 0)."""
    return cos.stride(0) if cos.shape[0] > 1 else 0, cos.stride(1)


def rotary_embedding(q, k, cos, sin):
    """``(q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin)`` with cos and sin broadcast over
    the heads, as transformers' ``apply_rotary_pos_emb`` computes it: q [batch, heads_q, seq, head_dim], k
    [batch, heads_k, seq, head_dim] (any strides with a contiguous last dimension), cos and sin [batch or 1, seq,
    head_dim]; the results are laid out as ``rotary_output`` says."""
    torch = _torch()
    check_rotary(torch, q, k, cos, sin)
    device = _launch_device(q)
    if {t.device for t in (k, cos, sin)} != {q.device}:
        raise ValueError("q, k, cos and sin must be on one device")
    q, k = _chunked(q), _chunked(k)
    q_out, k_out = rotary_output(torch, q), rotary_output(torch, k)
    with torch.cuda.device(device):
        _C.rotary_embedding(_rotary_sizes(q, k), _heads(q), _heads(k), (_heads(q_out), _heads(k_out)),
                            (cos.data_ptr(), sin.data_ptr(), *_rotary_tables(cos)), dtype_codes(torch)[q.dtype],
                            stream_getter(torch)(device))
    return q_out, k_out


def _rotary_sizes(q, k) -> tuple:
    """(batch, seq, heads_q, heads_k, head_dim) of [batch, heads, seq, head_dim] q and k."""
    return q.shape[0], q.shape[2], q.shape[1], k.shape[1], q.shape[3]


def _check_counter(torch, name: str, t, dtype) -> None:
    if not isinstance(t, torch.Tensor) or t.dtype != dtype or t.numel() != 1:
        raise ValueError(f"{name} must be a one-element {dtype} tensor, got {_describe(t)}")


def check_cache_write(torch, q, k, v, cos, sin, out, key_cache, value_cache, length, arrivals) -> None:
    """The checks of ``rotary_cache_write`` that need no GPU."""
    check_rotary(torch, q, k, cos, sin)
    if out is not None and (not isinstance(out, torch.Tensor) or out.dtype != q.dtype or out.shape != q.shape
                            or out.stride(-1) != 1):
        raise ValueError(f"out must be a {q.dtype} {tuple(q.shape)} tensor with a contiguous last dimension, got "
                         f"{_describe(out)}")
    for name, t in (("v", v), ("key_cache", key_cache), ("value_cache", value_cache)):
        _check_tensor(torch, name, t, q.dtype)
    if v.shape != k.shape:
        raise ValueError(f"v {tuple(v.shape)} must be shaped as k {tuple(k.shape)}")
    batch, heads_k, _, head_dim = k.shape
    if key_cache.dim() != 4 or key_cache.shape[:2] != (batch, heads_k) or key_cache.shape[3] != head_dim:
        raise ValueError(f"key_cache must be [batch, heads_k, capacity, head_dim] = [{batch}, {heads_k}, capacity, "
                         f"{head_dim}], got {tuple(key_cache.shape)}")
    if value_cache.shape != key_cache.shape or value_cache.stride() != key_cache.stride():
        raise ValueError(f"value_cache must be laid out as key_cache, got {tuple(value_cache.shape)} strides "
                         f"{value_cache.stride()} and {tuple(key_cache.shape)} strides {key_cache.stride()}")
    _check_counter(torch, "length", length, torch.int64)
    _check_counter(torch, "arrivals", arrivals, torch.int32)


def rotary_cache_write(q, k, v, cos, sin, key_cache, value_cache, length, arrivals, out=None):
    """``rotary_embedding`` of q into ``out`` (None: a new tensor, as ``rotary_output`` lays it out), returned,
    with the rotated keys and the values written into a static cache, as transformers' ``apply_rotary_pos_emb``
    followed by ``StaticLayer.update`` computes them, in one kernel: key_cache and value_cache [batch, heads_k,
    capacity, head_dim] take token s of k and v at position ``length + s``, then ``length`` (an int64 one-element
    tensor: the tokens cached) grows by seq. ``arrivals``: an int32 one-element tensor holding 0, the kernel's own
    counter, 0 again after each launch; one per cache, since launches sharing one may not overlap. A position past
    the capacity stops the kernel with a device error, as ``index_copy_`` does."""
    torch = _torch()
    check_cache_write(torch, q, k, v, cos, sin, out, key_cache, value_cache, length, arrivals)
    device = _launch_device(q)
    operands = (k, v, cos, sin, key_cache, value_cache, length, arrivals) + ((out,) if out is not None else ())
    if {t.device for t in operands} != {q.device}:
        raise ValueError("q, k, v, cos, sin, out, the caches, length and arrivals must be on one device")
    q, k, v = _chunked(q), _chunked(k), _chunked(v)
    out = rotary_output(torch, q) if out is None else out
    cache = (_heads(v), key_cache.data_ptr(), value_cache.data_ptr(), *key_cache.stride()[:3], key_cache.shape[2],
             length.data_ptr(), arrivals.data_ptr())
    with torch.cuda.device(device):
        _C.rotary_cache_write(_rotary_sizes(q, k), _heads(q), _heads(k), _heads(out),
                              (cos.data_ptr(), sin.data_ptr(), *_rotary_tables(cos)), cache,
                              dtype_codes(torch)[q.dtype], stream_getter(torch)(device))
    return out


def moe_max_experts() -> int:
    """The most experts the routing ops take (``wavetune::kMoeMaxExperts``)."""
    return _C.moe_max_experts


def _describe(t) -> str:
    """A tensor's dtype and shape (or what was passed instead), for an error message."""
    return f"{getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}"


def check_routing(torch, top_k_index, experts: int) -> None:
    """The checks of the MoE routing ops on the routing itself that need no GPU."""
    if not isinstance(top_k_index, torch.Tensor) or top_k_index.dtype != torch.int64 or top_k_index.dim() != 2:
        raise ValueError(f"top_k_index must be an int64 [tokens, top_k] tensor (torch.topk's indices), got "
                         f"{_describe(top_k_index)}")
    error = _C.moe_routing_error(top_k_index.shape[0], top_k_index.shape[1], int(experts))
    if error:
        raise ValueError(error)


def _check_positions(torch, positions, pairs: int) -> None:
    if (not isinstance(positions, torch.Tensor) or positions.dtype != torch.int32 or positions.dim() != 1
            or positions.shape[0] != pairs or not positions.is_contiguous()):
        raise ValueError(f"positions must be a contiguous int32 [{pairs}] tensor (moe_align's), got "
                         f"{_describe(positions)}")


def moe_align(top_k_index, experts: int):
    """(offsets, positions) of a mixture-of-experts routing: top_k_index [tokens, top_k] int64 sends token t to
    experts top_k_index[t]; pair p = t * top_k + j goes to row positions[p] of the rows sorted by expert, and
    offsets[e] (int32 [experts]) ends expert e's rows (torch._grouped_mm's ``offs``). Ids outside [0, experts)
    are dropped: their rows come after all the others. Read on the GPU: no host synchronization."""
    torch = _torch()
    check_routing(torch, top_k_index, experts)
    device = _launch_device(top_k_index)
    ids = top_k_index.contiguous()
    offsets = torch.empty(experts, dtype=torch.int32, device=ids.device)
    positions = torch.empty(ids.numel(), dtype=torch.int32, device=ids.device)
    with torch.cuda.device(device):
        _C.moe_align(ids.data_ptr(), ids.shape[0], ids.shape[1], int(experts), offsets.data_ptr(), positions.data_ptr(),
                     stream_getter(torch)(device))
    return offsets, positions


def moe_gather(x, positions, top_k: int):
    """rows [tokens * top_k, width] with rows[positions[p]] = x[p // top_k]: each token's hidden state in the rows
    of its experts (x [tokens, width], positions from ``moe_align``)."""
    torch = _torch()
    check_rows(torch, x)
    if x.dim() != 2 or top_k < 1:
        raise ValueError(f"x must be [tokens, width] and top_k positive, got {tuple(x.shape)} and {top_k}")
    _check_positions(torch, positions, x.shape[0] * top_k)
    device = _launch_device(x)
    rows = torch.empty((positions.shape[0], x.shape[1]), dtype=x.dtype, device=x.device)
    with torch.cuda.device(device):
        _C.moe_gather(x.data_ptr(), x.stride(0), positions.data_ptr(), positions.shape[0], top_k, rows.data_ptr(),
                      rows.stride(0), x.shape[1], dtype_codes(torch)[x.dtype], stream_getter(torch)(device))
    return rows


def moe_combine(rows, positions, top_k_index, experts: int, weights):
    """out [tokens, width] = the sum over j of weights[t, j] * rows[positions[t * top_k + j]], in fp32 and rounded
    once, over the pairs whose expert id is in [0, experts): the experts' outputs (rows sorted by expert) back to
    their tokens. weights: float32 [tokens, top_k]."""
    torch = _torch()
    check_rows(torch, rows)
    check_routing(torch, top_k_index, experts)
    tokens, top_k = top_k_index.shape
    _check_positions(torch, positions, tokens * top_k)
    if rows.dim() != 2 or rows.shape[0] < tokens * top_k:
        raise ValueError(f"rows must be [at least {tokens * top_k}, width], got {tuple(rows.shape)}")
    if (not isinstance(weights, torch.Tensor) or weights.dtype != torch.float32
            or tuple(weights.shape) != (tokens, top_k)):
        raise ValueError(f"weights must be float32 [{tokens}, {top_k}], got {_describe(weights)}")
    device = _launch_device(rows)
    ids, weights = top_k_index.contiguous(), weights.contiguous()
    out = torch.empty((tokens, rows.shape[1]), dtype=rows.dtype, device=rows.device)
    with torch.cuda.device(device):
        _C.moe_combine(rows.data_ptr(), rows.stride(0), positions.data_ptr(), ids.data_ptr(), tokens, top_k,
                       int(experts), weights.data_ptr(), out.data_ptr(), out.stride(0), rows.shape[1],
                       dtype_codes(torch)[rows.dtype], stream_getter(torch)(device))
    return out

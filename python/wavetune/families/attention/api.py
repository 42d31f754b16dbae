"""The attention family's entry points (docs/attention.md): ``attention`` (fused multi-head attention forward for
inference, CUTLASS's FMHA) and its variant listing, beside the paged kernels' ``paged_attention``,
``varlen_attention`` and ``paged_attention_configs`` (module ``paged``).

torch is optional: this module never imports it. The entry points take torch tensors, so torch is already
loaded whenever a call can succeed.
"""

from __future__ import annotations

import functools
import math
import sys

from ...runtime import invariance
from ...runtime.configs import KernelConfig, family_variant_id, runnable
from ...runtime.device import dtype_codes, stream_getter
from ...runtime.native import _C
from ...runtime.tables import ensure_table, on_variants_added
from .. import NO_DATA
from .paged import paged_attention, paged_attention_configs, varlen_attention  # noqa: F401 (entry points)


def attention_configs() -> list[KernelConfig]:
    """The attention variants compiled into this build that run on the current GPU (``runtime.configs.runnable``),
    by id (ids of their own). ``tile`` is query rows x KV rows x head dim."""
    return runnable(_attention_by_id().values())


def config_space_hash() -> str:
    """The hash of the attention config space compiled into this build (attention tables are checked against it)."""
    return _C.attention_config_space_hash()


def attention_by_id() -> dict[int, KernelConfig]:
    """The compiled attention variants by id."""
    return _attention_by_id()


@functools.cache
def _attention_by_id() -> dict[int, KernelConfig]:
    return {v["id"]: KernelConfig(**v) for v in _C.attention_variants()}


on_variants_added(_attention_by_id.cache_clear)  # variants added at run time join the listing


@functools.lru_cache(maxsize=256)
def _resolve(config) -> int:
    """The attention variant id for a ``config`` argument; -1 for the built-in choice."""
    return family_variant_id(config, _attention_by_id(), "attention", "attention_configs")


@functools.lru_cache(maxsize=256)
def _workspace_bytes(sizes: tuple, splits: int) -> int:
    return _C.attention_workspace_bytes(sizes, splits)


def check_shapes(torch, q, k, v, out) -> None:
    """Every check that needs no GPU and no data pointer: types, ranks, sizes, dtypes, unit head-dim stride."""
    tensors = {"q": q, "k": k, "v": v}
    if torch is None or not all(isinstance(t, torch.Tensor) for t in tensors.values()):
        got = ", ".join(type(t).__name__ for t in tensors.values())
        raise TypeError(f"wavetune.attention takes torch tensors q, k and v, got {got}")
    if any(t.dim() != 4 for t in tensors.values()):
        raise ValueError(f"q, k and v must be [batch, seq, heads, head_dim], got shapes {tuple(q.shape)}, "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")
    if tuple(k.shape) != tuple(v.shape):
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must have the same shape")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} differ in batch or head_dim")
    if k.shape[2] == 0 or q.shape[2] % k.shape[2] != 0:
        raise ValueError(f"q's {q.shape[2]} heads must be a multiple of k's {k.shape[2]} (grouped-query attention)")
    if q.dtype not in dtype_codes(torch) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k and v must all be bfloat16 or all float16, got {q.dtype}, {k.dtype} and {v.dtype}")
    if out is not None and (not isinstance(out, torch.Tensor) or out.dtype != q.dtype or out.shape != q.shape):
        got = f"{out.dtype} {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"out must be a {q.dtype} tensor of shape {tuple(q.shape)}, got {got}")
    for name, t in {**tensors, "out": out}.items():
        if t is not None and t.shape[3] > 1 and t.stride(3) != 1:
            raise ValueError(f"{name} must have a contiguous head_dim (stride 1), got strides {t.stride()}; "
                             f"pass {name}.contiguous()")


_cudnn_refused: set[tuple] = set()  # problems cuDNN's SDPA backend refused once (sizes, strides, dtype, causal)


def _cudnn_key(q, k, v, causal: bool, dtype_code: int) -> tuple:
    return (q.shape, k.shape, q.stride(), k.stride(), v.stride(), dtype_code, causal)


def _cudnn_attention(torch, q, k, v, causal: bool, scale: float, out, dtype_code: int):
    """``out`` (or a new contiguous tensor) from cuDNN's attention through SDPA, on [batch, heads, seq, dim]
    views; None where that backend refuses the problem (remembered, so it is asked once).

    NOTES: SDPA's ``is_causal`` is top-left, the same as wavetune's bottom-right mask only with as many
    queries as keys (the choice offers cuDNN only there)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    try:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            result = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal, scale=scale,
                enable_gqa=q.shape[2] != k.shape[2]).transpose(1, 2)
    except RuntimeError:
        _cudnn_refused.add(_cudnn_key(q, k, v, causal, dtype_code))
        return None
    if out is None:
        return result.contiguous()
    return out.copy_(result)


def _torch_attention(torch, q, k, v, causal: bool, scale: float, out):
    """PyTorch's own attention (SDPA, its backends its own choice) where no wavetune kernel runs the problem: the
    default install compiles no FMHA variant until a table or ``python -m wavetune build`` asks for one. The
    bottom-right causal mask is SDPA's ``causal_lower_right``, with the KV heads repeated for it under GQA."""
    from torch.nn.attention.bias import causal_lower_right

    seqlen_q, seqlen_k = q.shape[1], k.shape[1]
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    mask = causal_lower_right(seqlen_q, seqlen_k) if causal and seqlen_q > 1 else None
    if mask is not None and q.shape[1] != k.shape[1]:
        k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    result = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1]).transpose(1, 2)
    return result.contiguous() if out is None else out.copy_(result)


def _routes(torch, q, k, v, causal: bool, dtype_code: int, writes_out: bool) -> tuple[bool, bool, bool]:
    """The AttentionRoutes (attention.h) a call runs: cuDNN unless it refused the problem before or
    ``torch.use_deterministic_algorithms`` is on (its decode outputs differ run to run in their last bits at
    some batch sizes; the kernels' do not); the paged decode kernel where K and V share their strides."""
    cudnn = not torch.are_deterministic_algorithms_enabled() and \
        _cudnn_key(q, k, v, causal, dtype_code) not in _cudnn_refused
    return cudnn, k.stride() == v.stride(), writes_out


def _run_candidate(torch, q, k, v, causal: bool, scale: float, given_out, out, variant: int, dtype_code: int,
                   forced_splits, level: str):
    """The cuDNN or the paged candidate's result, or None where cuDNN refused a chosen (not forced) call. A
    forced one (``config=``) is checked first: these candidates pick their own splits."""
    config = _attention_by_id()[variant]
    if forced_splits is not None:
        raise ValueError(f"splits apply to the FMHA variants; {config.name} chooses its own")
    if config.schedule == "paged":
        if q.shape[1] != 1:
            raise ValueError(f"{config.name} is the paged decode kernel: it takes seqlen_q == 1, got {q.shape[1]}")
        paged_attention(q[:, 0], k, v, scale=scale, out=out[:, 0], batch_invariant=level)
        return out
    if causal and 1 < q.shape[1] != k.shape[1]:
        raise ValueError(f"{config.name}: cuDNN's causal mask is top-left, the same as wavetune's only with as "
                         f"many queries as keys, got seqlen_q={q.shape[1]} seqlen_k={k.shape[1]}")
    return _cudnn_attention(torch, q, k, v, causal and q.shape[1] > 1, scale, given_out, dtype_code)


def tensor_args(t) -> tuple[int, int, int, int]:
    return (t.data_ptr(), t.stride(0), t.stride(1), t.stride(2))


def attention(q, k, v, *, causal: bool = False, scale: float | None = None, out=None, config=None, splits=None,
              batch_invariant=None):
    """Scaled dot-product attention forward: ``softmax(scale * q @ k^T [+ mask]) @ v`` per head.

    q: [batch, seqlen_q, heads_q, head_dim] CUDA tensor, bf16 or fp16 (the FlashAttention layout).
    k, v: [batch, seqlen_k, heads_kv, head_dim], same dtype and device; heads_q a multiple of heads_kv
        (grouped-query attention: query head h reads KV head h // (heads_q // heads_kv)). Any strides
        with a contiguous head_dim and 16-byte-aligned rows, e.g. a KV cache sliced to its filled length.
    causal: bottom-right mask (query i sees keys j <= i + seqlen_k - seqlen_q: the queries are the newest
        tokens, as in a prefill after a cached prefix); needs seqlen_q <= seqlen_k.
    scale: of q.k, default 1 / sqrt(head_dim). head_dim: 64, 128 or 256.
    out: optional [batch, seqlen_q, heads_q, head_dim] tensor to write (same dtype and device); where
        cuDNN runs (below), its output is copied into it, which a call without out= does not pay (the choice
        counts it).
    config, splits: force an attention variant (id or name, ``attention_configs()``: the FMHA variants, and
        the cuDNN and paged candidates, which take no splits) and a KV split count (decode only: seqlen_q ==
        1); default: both chosen from the sizes by the GPU's attention table (``tables/<gpu>.attention.wtt``,
        or $WAVETUNE_ATTENTION_TABLE) beside the built-in choice (attention.h, choose). A table
        prices cuDNN's attention (run through PyTorch's SDPA) and, on decode, ``paged_attention``'s kernel
        over the dense cache beside the FMHA variants, which compete only where neither runs. The built-in
        choice runs cuDNN on prefill where its mask is this one (not causal, or as many queries as keys) and
        on decode where it was faster (head dims up to 128 on K and V under 1 GiB without ``out``; at head
        dim 64 with 16 or more query heads per KV head always), else the paged kernel on decode when K and V
        share their strides, else the FMHA model's choice (docs/attention.md). With
        ``torch.use_deterministic_algorithms`` on, cuDNN never runs.
    batch_invariant: True, False or a level name: the choice for one sequence, so that a sequence's result does
        not depend on the batch (docs/torch.md, "Batch-invariant mode"); cuDNN never runs then, and a problem no
        compiled kernel runs raises instead of running SDPA. None: the process-wide setting.

    Runs on the current torch stream of q's device.
    """
    torch = sys.modules.get("torch")
    check_shapes(torch, q, k, v, out)
    variant = _resolve(config)
    level = invariance.requested(batch_invariant)
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    given_out = out
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    dtype_code = dtype_codes(torch)[q.dtype]
    sizes = (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim)
    tensors = [tensor_args(t) for t in (q, k, v, out)]
    if out.numel() == 0:
        return out
    error = _C.attention_problem_error(sizes, *tensors, scale, causal, dtype_code)
    if error:
        raise ValueError(f"wavetune.attention: {error}")
    device = q.get_device()
    if not all(t.is_cuda and t.get_device() == device for t in (q, k, v, out)):
        raise ValueError(f"q, k, v and out must be on one CUDA device, got {q.device}, {k.device}, {v.device}, {out.device}")
    if device != torch.cuda.current_device():
        with torch.cuda.device(device):
            return attention(q, k, v, causal=causal, scale=scale, out=out, config=config, splits=splits,
                             batch_invariant=level)
    forced = variant >= 0
    if not forced:
        routes = _routes(torch, q, k, v, causal and seqlen_q > 1, dtype_code, given_out is not None) \
            if splits is None else (False, False, False)
        ensure_table(device, "attention")
        variant, chosen_splits = _C.attention_chosen_launch(sizes, *tensors, scale, causal, dtype_code, device, routes,
                                                            level)
        if variant < 0 and splits is not None:
            raise ValueError(f"splits apply to the FMHA variants, and none of {q.dtype} with head_dim {head_dim} is "
                             "compiled yet (python -m wavetune build --family attention compiles them)")
        if variant < 0 and level != "off":
            raise ValueError(f"wavetune.attention: no compiled kernel runs {q.dtype} head_dim {head_dim} batch-"
                             "invariantly, and SDPA's splits depend on the batch (python -m wavetune build --family "
                             "attention compiles the FMHA variants)")
        if variant < 0:  # no compiled kernel of this dtype and head dim runs it
            return _torch_attention(torch, q, k, v, causal, scale, given_out)
        splits = chosen_splits if splits is None else splits
    if _attention_by_id()[variant].from_library:
        done = _run_candidate(torch, q, k, v, causal, scale, given_out, out, variant, dtype_code,
                              splits if forced else None, level)
        if done is not None:
            return done
        if forced:
            raise ValueError(f"{_attention_by_id()[variant].name}: cuDNN's SDPA backend refused the problem "
                             f"(q {tuple(q.shape)}, k {tuple(k.shape)})")
        return attention(q, k, v, causal=causal, scale=scale, out=given_out,  # chosen again, without cuDNN
                         batch_invariant=level)
    splits = 1 if splits is None else splits
    if isinstance(splits, bool) or not isinstance(splits, int):
        raise TypeError(f"splits must be an int, got {splits!r}")
    # NOTES: the workspace (log-sum-exp rows, split partials) comes from torch's caching allocator, so it
    # is stream-ordered and CUDA-graph safe.
    workspace = torch.empty(_workspace_bytes(sizes, max(splits, 1)), dtype=torch.uint8, device=q.device)
    _C.attention(sizes, *tensors, scale, causal, dtype_code, variant, splits, workspace.data_ptr(), workspace.numel(),
                 stream_getter(torch)(device))
    return out


def size_error(p) -> str:
    """``attention``'s checks of a problem's sizes (a ``families.SizeProblem``: query length, KV length and head
    dim, the batch in ``groups``, the heads and mask in its key), on contiguous tensors."""
    def contiguous(seq: int, heads: int) -> tuple[int, int, int, int]:
        # A stride past 64 bits is clamped: the check refuses it as too large either way.
        return NO_DATA, min(seq * heads * p.k, 2**63 - 1), min(heads * p.k, 2**63 - 1), p.k

    heads = p.key["heads_q"], p.key["heads_kv"]
    q, kv = contiguous(p.m, heads[0]), contiguous(p.n, heads[1])
    return _C.attention_problem_error((p.groups, p.m, p.n, *heads, p.k), q, kv, kv, q, 1 / math.sqrt(p.k),
                                      bool(p.key["causal"]), p.dtype)

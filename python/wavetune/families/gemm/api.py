"""The dense GEMM's Python front end: ``gemm`` as a drop-in for ``torch.matmul(a, b)``, and the variant listing.

torch is optional: this module never imports it. ``gemm`` takes torch tensors, so torch is already
loaded whenever a call can succeed.
"""

from __future__ import annotations

import dataclasses
import functools
import sys

from ...runtime import invariance
from ...runtime.configs import KernelConfig, LaunchConfig, code, runnable
from ...runtime.device import stream_getter, dtype_codes
from ...runtime.native import _C
from ...runtime.tables import ensure_table, on_variants_added


def configs() -> list[KernelConfig]:
    """The variants compiled into this build that run on the current GPU (``runtime.configs.runnable``), by id.
    Empty when it was built without nvcc."""
    return runnable(configs_by_id().values())


def config_space_hash() -> str:
    """The hash of the dense config space compiled into this build (tables are checked against it)."""
    return _C.build_info()["config_space_hash"]


@functools.cache
def configs_by_id() -> dict[int, KernelConfig]:
    """The compiled variants by id (``configs``, looked up without a scan)."""
    return {v["id"]: KernelConfig(**v) for v in _C.variants()}


@functools.cache
def configs_by_name() -> dict[str, KernelConfig]:
    """The compiled variants by name."""
    return {c.name: c for c in configs_by_id().values()}


# Variants added at run time join the listings.
on_variants_added(configs_by_id.cache_clear)
on_variants_added(configs_by_name.cache_clear)


@functools.lru_cache(maxsize=1024)
def _resolve(config) -> tuple[int, int, int, int, int]:
    """(variant id, decomposition, splits, raster, max_swizzle) codes for a ``config`` argument."""
    if config is None:
        return (-1, 0, 1, 0, 1)
    if not isinstance(config, LaunchConfig):
        if not isinstance(config, (int, str)) or isinstance(config, bool):
            raise TypeError(f"config must be a variant id, a variant name or a LaunchConfig, got {config!r}")
        config = LaunchConfig(config)
    variant = config.variant
    if isinstance(variant, str):
        if variant not in configs_by_name():
            raise ValueError(f"no compiled variant named {variant!r}; wavetune.configs() lists them")
        variant = configs_by_name()[variant].id
    elif variant not in configs_by_id():
        raise ValueError(f"no compiled variant with id {variant!r}; wavetune.configs() lists them")
    return (
        variant,
        code(_C.DECOMPOSITIONS, config.decomposition, "decomposition"),
        int(config.splits),
        code(_C.RASTERS, config.raster, "raster"),
        int(config.max_swizzle),
    )


def _row_stride(t, rows: int, cols: int, name: str) -> int:
    """The row stride of ``t`` read as a row-major [rows, cols] matrix with unit column stride."""
    m = t
    if t.dim() != 2:
        try:
            m = t.view(rows, cols)
        except RuntimeError:
            raise ValueError(
                f"{name} of shape {tuple(t.shape)} and strides {t.stride()} cannot be viewed as [{rows}, {cols}] "
                f"rows without a copy; pass {name}.contiguous()"
            ) from None
    row_stride, col_stride = m.stride()
    if cols > 1 and col_stride != 1:
        raise ValueError(
            f"{name}'s last dimension must be contiguous (stride 1), got strides {t.stride()}; pass {name}.contiguous()"
        )
    return row_stride if rows > 1 else cols


def _b_layout(b, k: int, n: int) -> tuple[int, int]:
    """(layout code, leading dimension) of a 2-D B[K, N]."""
    s0, s1 = b.stride()
    if s0 == 1 and (n == 1 or s1 >= k):
        return _C.B_LAYOUTS.index("col"), (s1 if n > 1 else k)
    if s1 == 1 and (k == 1 or s0 >= n):
        return _C.B_LAYOUTS.index("row"), (s0 if k > 1 else n)
    raise ValueError(
        f"b [K={k}, N={n}] with strides {b.stride()} is neither column-major (an nn.Linear weight's .T, "
        f"strides (1, >=K)) nor row-major (strides (>=N, 1)); pass b.contiguous()"
    )


@dataclasses.dataclass(frozen=True)
class GemmOperands:
    """What the native launch needs of checked ``gemm`` operands: sizes, leading dimensions, codes."""

    m: int
    n: int
    k: int
    lda: int
    ldb: int
    dtype: int
    b_layout: int
    device: int
    epilogue: str = "none"  # the C++ Epilogue's name: "none", "residual" or "silu_and_mul"
    ldr: int = 0  # the residual's row stride


def check_epilogue(a, n: int, residual=None, silu_and_mul: bool = False) -> None:
    """The checks of ``gemm``'s epilogue arguments that need neither a GPU nor the native module (torch's fake
    kernels make them too): one epilogue at most, a residual of a's dtype and of the product's shape [..., N], and
    for silu_and_mul N (gate and up columns side by side) a multiple of 16."""
    torch = sys.modules["torch"]
    if not isinstance(silu_and_mul, bool):
        raise TypeError(f"silu_and_mul must be True or False, got {silu_and_mul!r}")
    if residual is not None and silu_and_mul:
        raise ValueError("residual and silu_and_mul are two epilogues; pass one")
    if silu_and_mul and n % 16:
        raise ValueError(f"silu_and_mul reads b's N={n} columns as a gate and an up half: N must be a multiple of 16 "
                         "(each half a multiple of 8)")
    shape = (*a.shape[:-1], n)
    if residual is not None and (not isinstance(residual, torch.Tensor) or residual.dtype != a.dtype
                                 or tuple(residual.shape) != shape):
        got = (f"{residual.dtype} {tuple(residual.shape)}" if isinstance(residual, torch.Tensor)
               else type(residual).__name__)
        raise ValueError(f"residual must be a {a.dtype} tensor of the product's shape {shape}, got {got}")


def check_operands(a, b, bias=None, out=None, residual=None, silu_and_mul=False) -> GemmOperands:
    """The checks ``gemm`` makes of its operands (ValueError or TypeError saying what would work), in the
    order a user fixes them: types and shapes, dtypes, the layout rules, then devices."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        raise TypeError(f"wavetune.gemm takes torch tensors, got {type(a).__name__} and {type(b).__name__}")
    if a.dim() < 1 or b.dim() != 2:
        raise ValueError(f"expected a of shape [..., K] and b of shape [K, N], got {tuple(a.shape)} and {tuple(b.shape)}")
    k, n = b.shape
    if a.shape[-1] != k:
        raise ValueError(f"shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be multiplied ({a.shape[-1]} != {k})")
    dtype_code = dtype_codes(torch).get(a.dtype)
    if dtype_code is None or b.dtype != a.dtype:
        raise TypeError(f"a and b must both be bfloat16 or both float16, got {a.dtype} and {b.dtype}")
    if bias is not None and (not isinstance(bias, torch.Tensor) or bias.dtype != a.dtype or tuple(bias.shape) != (n,)
                             or bias.stride() != (1,)):
        got = f"{bias.dtype} {tuple(bias.shape)} strides {bias.stride()}" if isinstance(bias, torch.Tensor) else bias
        raise ValueError(f"bias must be a contiguous {a.dtype} tensor of shape ({n},), got {got}")
    if residual is not None or silu_and_mul is not False:  # the plain call skips them: this path is per call
        check_epilogue(a, n, residual, silu_and_mul)
    out_shape = (*a.shape[:-1], n // 2 if silu_and_mul else n)
    if out is not None and (not isinstance(out, torch.Tensor) or out.dtype != a.dtype or tuple(out.shape) != out_shape):
        got = f"{out.dtype} {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"out must be a {a.dtype} tensor of shape {out_shape}, got {got}")
    m = a.numel() // k if k else int(torch.Size(a.shape[:-1]).numel())
    lda = _row_stride(a, m, k, "a") if m and k else k
    b_layout, ldb = _b_layout(b, k, n) if k and n else (0, k)
    ldr = _row_stride(residual, m, n, "residual") if residual is not None and m and n else n
    epilogue = "residual" if residual is not None else "silu_and_mul" if silu_and_mul else "none"
    if m and n and k and (error := _C.shape_error(m, n, k, lda, ldb, out_shape[-1], dtype_code, b_layout, epilogue,
                                                  ldr)):
        raise ValueError(error)
    # NOTES: get_device() and is_cuda read the tensors without making torch.device objects: this path is
    # per call, and host time is what decode steps outside a CUDA graph wait for (docs/benchmarks.md).
    device = a.get_device()
    tensors = (b, bias, out, residual)
    if not (a.is_cuda and all(t.is_cuda and t.get_device() == device for t in tensors if t is not None)):
        devices = [str(t.device) for t in (a, *tensors) if t is not None]
        raise ValueError(f"a, b, bias, out and residual must be on one CUDA device, got {', '.join(devices)}")
    return GemmOperands(m, n, k, lda, ldb, dtype_code, b_layout, device, epilogue, ldr)


def launch_prepared(prepared, a, b, bias, out, residual=None) -> None:
    """Run a ``_C.PreparedGemm`` on operands of its shape, with a workspace from torch's caching allocator."""
    torch = sys.modules["torch"]
    # NOTES: the workspace comes from torch's caching allocator on the current stream, so it is stream-ordered,
    # and under CUDA-graph capture it comes from the graph's memory pool, which keeps it for replays.
    workspace = (torch.empty(prepared.workspace_bytes, dtype=torch.uint8, device=out.device)
                 if prepared.workspace_bytes else None)
    prepared(a.data_ptr(), b.data_ptr(), 0 if bias is None else bias.data_ptr(), out.data_ptr(),
             0 if workspace is None else workspace.data_ptr(), stream_getter(torch)(out.get_device()),
             0 if residual is None else residual.data_ptr())


def finish_epilogue(product, epilogue: str, residual=None, out=None):
    """An epilogue that the GEMM's launch did not run, applied to its contiguous output ``product`` [..., N]:
    ``residual + product`` (PyTorch's addition, rounded as eager code rounds it) or the ``silu_and_mul`` layer
    op's kernel, into ``out`` (None: a new tensor, or ``product`` itself where it can be)."""
    torch = sys.modules["torch"]
    if epilogue == "none":
        return product if out is None else out.copy_(product)
    if epilogue == "residual":
        return product.add_(residual) if out is None else torch.add(residual, product, out=out)
    width = product.shape[-1] // 2
    rows = product.numel() // product.shape[-1]
    out = product.new_empty((*product.shape[:-1], width)) if out is None else out
    _C.silu_and_mul(product.data_ptr(), product.shape[-1], out.data_ptr(), _row_stride(out, rows, width, "out"), rows,
                    width, dtype_codes(torch)[product.dtype], stream_getter(torch)(product.get_device()))
    return out


def gemm(a, b, *, bias=None, residual=None, silu_and_mul=False, out=None, config=None, batch_invariant=None):
    """``a @ b (+ bias)`` with a CUTLASS Hopper kernel or cuBLAS: a drop-in for ``torch.matmul(a, b)``; with an
    epilogue, ``residual + a @ b (+ bias)`` or ``silu_and_mul(a @ b (+ bias))``.

    a: [..., K] CUDA tensor, bf16 or fp16, last dimension contiguous.
    b: [K, N] CUDA tensor of the same dtype, column-major (``W.T`` for an nn.Linear weight ``W[N, K]``)
       or row-major.
    bias: optional contiguous [N] tensor of the same dtype, added to the fp32 accumulator before the one
          rounding to the output dtype (as ``torch.addmm`` and ``F.linear`` do).
    residual: optional [..., N] tensor of the same dtype, last dimension contiguous, added to the product;
          ``out`` may be ``residual`` itself (an in-place update).
    silu_and_mul: b's N columns are a gate and an up projection side by side (gate first, N a multiple of 16);
          the result is ``silu(gate) * up`` [..., N / 2], rounded as transformers' ``act_fn(gate_proj(x)) *
          up_proj(x)`` rounds it (``wavetune.silu_and_mul``).
    out: optional [..., N] tensor to write ([..., N / 2] with silu_and_mul; same dtype and device, rows
         contiguous).
    config: force a variant (id, name or LaunchConfig with micro parameters); default: the tuned
            table's choice for this GPU (the built-in heuristic where there is none).
    batch_invariant: True, False or a level name ("reduction_order", "config"): choose only configs whose
            rows do not depend on M (docs/torch.md, "Batch-invariant mode"); None: the process-wide setting.

    Runs on the current torch stream of ``a``'s device. K and N must be multiples of 8 and the data
    16-byte aligned (the kernels load with TMA); the error says so otherwise. Where the chosen variant is the
    decode GEMM, it runs the epilogue in its store (the residual added to the fp32 sum and rounded once);
    elsewhere the epilogue runs after the GEMM (``finish_epilogue``).
    """
    torch = sys.modules.get("torch")
    variant, decomposition, splits, raster, swizzle = _resolve(config)
    ops = check_operands(a, b, bias, out, residual, silu_and_mul)
    product_shape = (*a.shape[:-1], ops.n)
    out_shape = (*a.shape[:-1], ops.n // 2) if silu_and_mul else product_shape
    if out is None:
        out = a.new_empty(out_shape)
        ldd = out_shape[-1]  # fresh and contiguous
    else:
        ldd = _row_stride(out, ops.m, out_shape[-1], "out") if ops.m and ops.n else out_shape[-1]
    if ops.m == 0 or ops.n == 0:
        return out
    if ops.k == 0:
        product = bias.expand(product_shape).contiguous() if bias is not None else a.new_zeros(product_shape)
        return finish_epilogue(product, ops.epilogue, residual, out)

    level = invariance.requested(batch_invariant)
    if ops.device != torch.cuda.current_device():
        with torch.cuda.device(ops.device):
            return gemm(a, b, bias=bias, residual=residual, silu_and_mul=silu_and_mul, out=out, config=config,
                        batch_invariant=level)
    if variant < 0:
        ensure_table(ops.device)
    fused = ops.epilogue == "none"
    prepared = _C.PreparedGemm(ops.m, ops.n, ops.k, ops.lda, ops.ldb, ldd if fused else ops.n, ops.dtype,
                               ops.b_layout, ops.device, variant, decomposition, splits, raster, swizzle, level)
    if not fused and (with_epilogue := prepared.with_epilogue(ops.epilogue, ldd, ops.ldr)) is not None:
        prepared, fused = with_epilogue, True
    if fused:
        launch_prepared(prepared, a, b, bias, out, residual)
        return out
    product = a.new_empty(product_shape)
    launch_prepared(prepared, a, b, bias, product)
    return finish_epilogue(product, ops.epilogue, residual, out)


def size_error(p) -> str:
    """``gemm``'s checks of a problem's sizes (a ``families.SizeProblem``), B packed in its layout."""
    return _C.shape_error(p.m, p.n, p.k, p.k, p.k if _C.B_LAYOUTS[p.b_layout] == "col" else p.n, p.n, p.dtype,
                          p.b_layout)

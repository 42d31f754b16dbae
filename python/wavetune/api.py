"""The Python front end: ``gemm`` as a drop-in for ``torch.matmul(a, b)``, and the variant listing.

torch is optional: this module never imports it. ``gemm`` takes torch tensors, so torch is already
loaded whenever a call can succeed.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import sys
import warnings
from pathlib import Path
from typing import Callable

try:
    from . import _C
except ImportError as exc:  # a source checkout, or a broken install
    raise ImportError(
        "wavetune's native module (wavetune._C) could not be loaded: install the package with "
        f"`pip install .` and import it from outside the source tree ({exc})"
    ) from exc


def _nvidia_library_dirs() -> str:
    """The lib/ folders of the installed nvidia-* wheels (where torch's cuBLAS comes from), ':'-joined."""
    spec = importlib.util.find_spec("nvidia")
    roots = spec.submodule_search_locations if spec else []
    return ":".join(str(lib) for root in roots for lib in sorted(Path(root).glob("*/lib")))


# NOTES: the cuBLAS candidate (docs/kernels.md) opens libcublas by its soname, which finds the copy
# torch has loaded; without torch (or before it) the wheel's folder must be named. Set before any call
# lists the variants, which is when the native side looks for the library.
if "WAVETUNE_CUBLAS" not in os.environ:
    os.environ["WAVETUNE_CUBLAS"] = _nvidia_library_dirs()


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    """A compiled GEMM variant: its compile-time ("macro") parameters."""

    id: int
    name: str
    dtype: str  # "bf16" | "fp16"
    b_layout: str  # "col" (B[K,N] column-major, an nn.Linear weight's .T) | "row"
    swap_ab: bool  # computes D^T = B^T A^T: tile M runs over N, tile N over M (tokens)
    schedule: str  # "cooperative" | "pingpong" | "cublas" (cuBLAS picks its kernel per problem)
    tile: tuple[int, int, int]  # CTA tile M, N, K (cublas: a nominal 128x128x64, for the model's mapping)
    cluster: tuple[int, int]  # thread-block cluster M, N
    scheduler: str  # "persistent" | "stream_k"

    @property
    def from_library(self) -> bool:
        """The cuBLAS candidate: its kernel, tile and tile order are cuBLAS's choice, so run-time
        options (raster, swizzle) do not apply and its tile is nominal."""
        return self.schedule == "cublas"


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """A variant (id or name) plus the run-time ("micro") parameters of its launch.

    decomposition: "heuristic" | "data_parallel" | "split_k" | "stream_k" (the last two need a
    ``stream_k`` variant); splits: the split-K factor (with "split_k"); raster: "heuristic" |
    "along_m" | "along_n"; max_swizzle: 1, 2, 4 or 8.
    """

    variant: int | str
    decomposition: str = "heuristic"
    splits: int = 1
    raster: str = "heuristic"
    max_swizzle: int = 1

    def __post_init__(self):
        if not isinstance(self.variant, (int, str)) or isinstance(self.variant, bool):
            raise TypeError(f"variant must be a variant id or name, got {self.variant!r}")
        _code(_C.DECOMPOSITIONS, self.decomposition, "decomposition")
        _code(_C.RASTERS, self.raster, "raster")
        if not isinstance(self.splits, int) or isinstance(self.splits, bool) or self.splits < 1:
            raise ValueError(f"splits={self.splits!r}: a positive integer (the split-K factor)")
        if self.splits > 1 and self.decomposition != "split_k":
            raise ValueError(f"splits={self.splits} needs decomposition='split_k', got {self.decomposition!r}")
        if self.max_swizzle not in (1, 2, 4, 8):
            raise ValueError(f"max_swizzle={self.max_swizzle!r} is not one of 1, 2, 4, 8")


# Tables shipped with the package, one per GPU model and kernel family (docs/tables.md).
TABLE_DIR = Path(__file__).parent / "tables"
# The environment variable that names a table to use instead of the shipped one, per kernel family.
TABLE_ENV = {"gemm": "WAVETUNE_TABLE", "grouped_gemm": "WAVETUNE_GROUPED_TABLE", "attention": "WAVETUNE_ATTENTION_TABLE"}


def table_file_name(gpu_name: str, family: str = "gemm") -> str:
    """``<slug>.wtt`` for the dense GEMM's table, ``<slug>.<family>.wtt`` for another family's."""
    from .tablefile import table_slug

    if family not in TABLE_ENV:
        raise ValueError(f"unknown kernel family {family!r} (one of {', '.join(TABLE_ENV)})")
    return f"{table_slug(gpu_name)}.wtt" if family == "gemm" else f"{table_slug(gpu_name)}.{family}.wtt"


def default_table_path(gpu_name: str, family: str = "gemm") -> Path | None:
    """The table named by the family's variable (``TABLE_ENV``) if set, else the shipped table for this GPU
    model and family, else None."""
    path = TABLE_DIR / table_file_name(gpu_name, family)
    if os.environ.get(TABLE_ENV[family]):
        return Path(os.environ[TABLE_ENV[family]])
    return path if path.exists() else None


def open_table(path: str | Path, family: str = "gemm"):
    """A table read, checked and bound to this build's variants of its family; needs no GPU (for ``explain``,
    tools, and checking a file). ``load_table`` then binds one to a device."""
    return _C.Selector(str(path), family)


def load_table(path: str | Path | None = None, *, device: int | None = None, family: str = "gemm") -> dict:
    """Use a table for the choices of a kernel family (``wavetune.gemm``'s by default, ``"grouped_gemm"`` for
    ``wavetune.grouped_gemm``'s, ``"attention"`` for ``wavetune.attention``'s) on a CUDA device (default:
    the current one).

    Without ``path``, the default table for the device's GPU model (``default_table_path``). The table
    is refused if it was made on another GPU model, for another family or for another build's variants.
    """
    selector = open_table(path, family) if path is not None else None  # the file's own errors first
    if device is None:
        device = _current_device()
    props = _device_properties(device)
    if selector is None:
        path = default_table_path(props["name"], family)
        if path is None:
            raise FileNotFoundError(f"no wavetune table for {props['name']}: looked for "
                                    f"{table_file_name(props['name'], family)} in {TABLE_DIR}; make one with "
                                    f"`python -m wavetune tune` or set {TABLE_ENV[family]}")
        selector = open_table(path, family)
    selector.check_device(props["name"], props["sm_count"])
    from . import jit

    if jit.prepare_table(Path(path), family):  # variants of the table compiled earlier, registered now
        selector = open_table(path, family)
    _C.use_table(device, selector)
    _loaded_tables[family][device] = str(path)
    _pending_tables.pop((family, device), None)
    _checked_tables[family].add(device)
    for callback in _table_listeners:
        callback()
    return {"path": str(path), "configs": selector.config_count(), "exact": selector.exact_count(),
            "skipped_configs": selector.skipped_configs(), **selector.meta()}


def device_properties(device: int | None = None) -> dict:
    """Name, SM count, L2 size and compute capability of a CUDA device (default: the current one)."""
    return _device_properties(_current_device() if device is None else device)


# Devices whose table was looked for already, per family: a family's first call on a device looks once.
_checked_tables: dict[str, set[int]] = {family: set() for family in TABLE_ENV}
_table_checked = _checked_tables["gemm"]
# Called after every load_table: whatever holds a table's choice drops it.
_table_listeners: list[Callable[[], None]] = []


def on_table_change(callback: Callable[[], None]) -> None:
    """Call ``callback()`` after every ``load_table`` (of any family, on any device), and when a table bound to
    variants added at run time is about to replace it (``variants_added``)."""
    _table_listeners.append(callback)


# Each device's loaded table per family (its path), and the tables bound again after variants were added at
# run time, waiting for the family's next call on their device (the swap, in ensure_table).
_loaded_tables: dict[str, dict[int, str]] = {family: {} for family in TABLE_ENV}
_pending_tables: dict[tuple[str, int], object] = {}
# Called when variants were added at run time: whatever lists the compiled variants forgets them.
_variant_listeners: list[Callable[[], None]] = []


def on_variants_added(callback: Callable[[], None]) -> None:
    """Call ``callback()`` whenever variants were added at run time (``wavetune.jit``)."""
    _variant_listeners.append(callback)


def variants_added(family: str) -> None:
    """After variants of ``family`` were added at run time: listings forget what they held, and each loaded
    table of the family is bound again to the compiled variants, to be swapped in by the family's next call on
    its device (never a call in progress, never under CUDA-graph capture)."""
    _configs_by_id.cache_clear()
    _configs_by_name.cache_clear()
    for callback in _variant_listeners:
        callback()
    for device, path in list(_loaded_tables[family].items()):
        _pending_tables[(family, device)] = open_table(path, family)
    for callback in _table_listeners:
        callback()  # plans built from the old table are dropped, so the next call reaches ensure_table


def table_swap_pending(device: int, family: str = "gemm") -> bool:
    """Whether a table bound to variants added at run time waits to replace the family's table on ``device``."""
    return (family, device) in _pending_tables


def _swap_pending_table(device: int, family: str) -> None:
    torch = sys.modules.get("torch")
    if (family, device) not in _pending_tables or (torch is not None and torch.cuda.is_current_stream_capturing()):
        return
    _C.use_table(device, _pending_tables.pop((family, device)))
    for callback in _table_listeners:
        callback()


def table_checked(device: int, family: str = "gemm") -> bool:
    """Whether the family's table for ``device`` was looked for already (loaded, or found missing)."""
    return device in _checked_tables[family]


def ensure_table(device: int, family: str = "gemm") -> None:
    """Look for the family's tuned table for ``device`` now, once per device, so that no later call has to; swap
    in the table bound to variants added at run time where one waits."""
    if device not in _checked_tables[family]:
        _autoload_table(device, family)
    elif _pending_tables:
        _swap_pending_table(device, family)


def _autoload_table(device: int, family: str = "gemm") -> None:
    _checked_tables[family].add(device)
    name = _device_properties(device)["name"]
    if default_table_path(name, family) is None:
        warnings.warn(f"wavetune: no tuned {family} table for {name}; kernels are chosen by the built-in "
                      f"heuristic (run `python -m wavetune tune` to make one)", stacklevel=4)
        return
    try:
        load_table(device=device, family=family)
    except ValueError as exc:
        # NOTES: a shipped table tuned for another config space (a changed cutlass_configs/) must not stop
        # gemm from working; a table the user named in WAVETUNE_TABLE is theirs to fix, so that one raises.
        if os.environ.get(TABLE_ENV[family]):
            raise
        warnings.warn(f"wavetune: the shipped {family} table for {name} does not fit this build ({exc}); "
                      f"kernels are chosen by the built-in heuristic", stacklevel=4)


def _current_device() -> int:
    torch = sys.modules.get("torch")
    return torch.cuda.current_device() if torch is not None and torch.cuda.is_available() else 0


def no_gpu_reason() -> str | None:
    """Why wavetune cannot use a CUDA device in this process, in words for a user; None when it can."""
    if not build_info()["kernels_compiled"]:
        return "this wavetune build has no GPU kernels (it was built without nvcc)"
    reason = _C.no_device_reason()
    return f"no CUDA GPU is usable here ({reason})" if reason else None


@functools.cache
def _device_properties(device: int) -> dict:
    if (reason := no_gpu_reason()) is not None:
        raise RuntimeError(f"{reason}: this needs the GPU; tables can still be read and explained without one "
                           "(wavetune.open_table, python -m wavetune explain --table PATH)")
    torch = sys.modules.get("torch")
    if torch is not None and device != torch.cuda.current_device():
        with torch.cuda.device(device):
            return _C.device_properties()
    return _C.device_properties()


def package_version() -> str:
    from . import __version__

    return __version__


def configs() -> list[KernelConfig]:
    """The variants compiled into this build, by id. Empty when it was built without nvcc."""
    return list(_configs_by_id().values())


def build_info() -> dict:
    """How this build was made: kernels compiled or not, kernel set, config-space hash, versions."""
    return _C.build_info()


@functools.cache
def _configs_by_id() -> dict[int, KernelConfig]:
    return {v["id"]: KernelConfig(**v) for v in _C.variants()}


@functools.cache
def _configs_by_name() -> dict[str, KernelConfig]:
    return {c.name: c for c in _configs_by_id().values()}


def _code(names: list[str], value: str, what: str) -> int:
    if value not in names:
        raise ValueError(f"{what}={value!r} is not one of {names}")
    return names.index(value)


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
        if variant not in _configs_by_name():
            raise ValueError(f"no compiled variant named {variant!r}; wavetune.configs() lists them")
        variant = _configs_by_name()[variant].id
    elif variant not in _configs_by_id():
        raise ValueError(f"no compiled variant with id {variant!r}; wavetune.configs() lists them")
    return (
        variant,
        _code(_C.DECOMPOSITIONS, config.decomposition, "decomposition"),
        int(config.splits),
        _code(_C.RASTERS, config.raster, "raster"),
        int(config.max_swizzle),
    )


def family_variant_id(config, by_id: dict[int, KernelConfig], family: str, listing: str) -> int:
    """The id of a kernel family's variant given as ``config`` (an id or a name of ``by_id``); -1 for None
    (the family's own choice). ``listing`` names the function that lists the family's variants."""
    if config is None:
        return -1
    if isinstance(config, str) and (found := next((c.id for c in by_id.values() if c.name == config), None)) is not None:
        return found
    if isinstance(config, int) and not isinstance(config, bool) and config in by_id:
        return config
    if not isinstance(config, (int, str)) or isinstance(config, bool):
        raise TypeError(f"config must be a {family} variant id or name, got {config!r}")
    raise ValueError(f"no compiled {family} variant {config!r}; wavetune.{listing}() lists them")


@functools.cache
def dtype_codes(torch) -> dict:
    return {torch.bfloat16: _C.DTYPES.index("bf16"), torch.float16: _C.DTYPES.index("fp16")}


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


def check_operands(a, b, bias=None, out=None) -> GemmOperands:
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
    out_shape = (*a.shape[:-1], n)
    if out is not None and (not isinstance(out, torch.Tensor) or out.dtype != a.dtype or tuple(out.shape) != out_shape):
        got = f"{out.dtype} {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"out must be a {a.dtype} tensor of shape {out_shape}, got {got}")
    m = a.numel() // k if k else int(torch.Size(a.shape[:-1]).numel())
    lda = _row_stride(a, m, k, "a") if m and k else k
    b_layout, ldb = _b_layout(b, k, n) if k and n else (0, k)
    if m and n and k and (error := _C.shape_error(m, n, k, lda, ldb, n, dtype_code, b_layout)):
        raise ValueError(error)
    # NOTES: get_device() and is_cuda read the tensors without making torch.device objects: this path is
    # per call, and host time is what decode steps outside a CUDA graph wait for (docs/benchmarks.md).
    device = a.get_device()
    if not (a.is_cuda and all(t.is_cuda and t.get_device() == device for t in (b, bias, out) if t is not None)):
        devices = [str(t.device) for t in (a, b, bias, out) if t is not None]
        raise ValueError(f"a, b, bias and out must be on one CUDA device, got {', '.join(devices)}")
    return GemmOperands(m, n, k, lda, ldb, dtype_code, b_layout, device)


def launch_prepared(prepared, a, b, bias, out) -> None:
    """Run a ``_C.PreparedGemm`` on operands of its shape, with a workspace from torch's caching allocator."""
    torch = sys.modules["torch"]
    # NOTES: the workspace comes from torch's caching allocator on the current stream, so it is stream-ordered,
    # and under CUDA-graph capture it comes from the graph's memory pool, which keeps it for replays.
    workspace = (torch.empty(prepared.workspace_bytes, dtype=torch.uint8, device=out.device)
                 if prepared.workspace_bytes else None)
    prepared(a.data_ptr(), b.data_ptr(), 0 if bias is None else bias.data_ptr(), out.data_ptr(),
             0 if workspace is None else workspace.data_ptr(), stream_getter(torch)(out.get_device()))


def gemm(a, b, *, bias=None, out=None, config=None):
    """``a @ b (+ bias)`` with a CUTLASS Hopper kernel or cuBLAS: a drop-in for ``torch.matmul(a, b)``.

    a: [..., K] CUDA tensor, bf16 or fp16, last dimension contiguous.
    b: [K, N] CUDA tensor of the same dtype, column-major (``W.T`` for an nn.Linear weight ``W[N, K]``)
       or row-major.
    bias: optional contiguous [N] tensor of the same dtype, added to the fp32 accumulator before the one
          rounding to the output dtype (as ``torch.addmm`` and ``F.linear`` do).
    out: optional [..., N] tensor to write (same dtype and device, rows contiguous).
    config: force a variant (id, name or LaunchConfig with micro parameters); default: the tuned
            table's choice for this GPU (the built-in heuristic where there is none).

    Runs on the current torch stream of ``a``'s device. K and N must be multiples of 8 and the data
    16-byte aligned (the kernels load with TMA); the error says so otherwise.
    """
    torch = sys.modules.get("torch")
    variant, decomposition, splits, raster, swizzle = _resolve(config)
    ops = check_operands(a, b, bias, out)
    out_shape = (*a.shape[:-1], ops.n)
    if out is None:
        out = a.new_empty(out_shape)
        ldd = ops.n  # fresh and contiguous
    else:
        ldd = _row_stride(out, ops.m, ops.n, "out") if ops.m and ops.n else ops.n
    if ops.m == 0 or ops.n == 0:
        return out
    if ops.k == 0:
        return out.copy_(bias.expand(out_shape)) if bias is not None else out.zero_()

    if ops.device != torch.cuda.current_device():
        with torch.cuda.device(ops.device):
            return gemm(a, b, bias=bias, out=out, config=config)
    if variant < 0:
        ensure_table(ops.device)
    prepared = _C.PreparedGemm(ops.m, ops.n, ops.k, ops.lda, ops.ldb, ldd, ops.dtype, ops.b_layout, ops.device,
                               variant, decomposition, splits, raster, swizzle)
    launch_prepared(prepared, a, b, bias, out)
    return out


@functools.cache
def stream_getter(torch) -> Callable[[int], int]:
    """device -> the raw cudaStream_t of torch's current stream there (for launches from Python)."""
    # NOTES: torch.cuda.current_stream() builds a Stream object per call (microseconds of host time);
    # the raw getter behind it (what Triton launches with) returns the handle alone. Public API if absent.
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw if raw is not None else (lambda device: torch.cuda.current_stream(device).cuda_stream)

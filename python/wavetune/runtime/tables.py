"""Tuned tables at run time, for every kernel family: where a family's table for a GPU model is
(shipped, or named by the family's environment variable), reading and binding one to a device
(``load_table``), and looking for it once per device on a family's first call (``ensure_table``).

A family's table file name and variable come from its descriptor (``wavetune.families``). A family whose
variants have scales modes (grouped_gemm: ``scales``, ``_C.table_scales``) has a table per GPU model and mode:
``<slug>.<family>.<scales>.wtt`` and ``<variable>_<SCALES>`` for a scaled one, the plain names for "" (unscaled).
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Callable

from .. import families
from . import jit
from .device import current_device, properties
from .native import _C

# Tables shipped with the package, one per GPU model and kernel family (docs/tables.md).
TABLE_DIR = Path(__file__).resolve().parents[1] / "tables"


def table_env(family: str = "gemm", scales: str = "") -> str:
    """The environment variable that names a table to use instead of the shipped one, for a family and scales
    mode."""
    return families.get(family).table_env + (f"_{scales.upper()}" if scales else "")


def table_envs() -> dict[str, str]:
    """family -> its (unscaled) table variable, for every registered family."""
    return {f.name: f.table_env for f in families.all()}


def scales_modes(family: str) -> list[str]:
    """The scales modes of a family's tables, one table per GPU model and mode ("" alone: unscaled only)."""
    return _C.table_scales(families.get(family).name)


# The table file stem for a GPU name, as the lookup library names it (docs/tables.md): "NVIDIA H200" ->
# "nvidia-h200"; leading and trailing runs of other characters become "-" too.
table_slug = _C.table_slug


def table_file_name(gpu_name: str, family: str = "gemm", scales: str = "") -> str:
    """``<slug>.wtt`` for the dense GEMM's table, ``<slug>.<family>[.<scales>].wtt`` for another family's."""
    return families.get(family).table_file_name(table_slug(gpu_name), scales)


def default_table_path(gpu_name: str, family: str = "gemm", scales: str = "") -> Path | None:
    """The table named by the family's variable (``table_env``) if set, else the shipped table for this GPU
    model, family and scales mode, else None."""
    path = TABLE_DIR / table_file_name(gpu_name, family, scales)
    if os.environ.get(table_env(family, scales)):
        return Path(os.environ[table_env(family, scales)])
    return path if path.exists() else None


def open_table(path: str | Path, family: str = "gemm"):
    """A table read, checked and bound to this build's variants of its family; needs no GPU (for ``explain``,
    tools, and checking a file). ``load_table`` then binds one to a device."""
    return _C.Selector(str(path), family)


def load_table(path: str | Path | None = None, *, device: int | None = None, family: str = "gemm",
               scales: str | None = None) -> dict:
    """Use a table for the choices of a kernel family (``wavetune.gemm``'s by default, ``"grouped_gemm"`` for
    ``wavetune.grouped_gemm``'s and, with ``scales``, its FP8 entry points', ``"attention"`` for
    ``wavetune.attention``'s) on a CUDA device (default: the current one).

    Without ``path``, the default table for the device's GPU model and ``scales`` mode (default "": unscaled;
    ``default_table_path``); a table file says its own mode, which ``scales`` must then match where given.
    The table is refused if it was made on another GPU model, for another family or scales mode, or for
    another build's variants.
    """
    selector = open_table(path, family) if path is not None else None  # the file's own errors first
    if selector is not None and scales not in (None, selector.scales):
        raise ValueError(f"{path} is a {family} table of scales {selector.scales!r}, not {scales!r}")
    scales = selector.scales if selector is not None else scales or ""
    checked = checked_devices(family, scales)
    if device is None:
        device = current_device()
    props = properties(device)
    if selector is None:
        path = default_table_path(props["name"], family, scales)
        if path is None:
            raise FileNotFoundError(f"no wavetune table for {props['name']}: looked for "
                                    f"{table_file_name(props['name'], family, scales)} in {TABLE_DIR}; make one "
                                    f"with `python -m wavetune tune` or set {table_env(family, scales)}")
        selector = open_table(path, family)
        if selector.scales != scales:
            raise ValueError(f"{path} is a {family} table of scales {selector.scales!r}, not {scales!r}")
    selector.check_device(props["name"], props["sm_count"])
    if jit.prepare_table(Path(path), family, scales):  # variants of the table compiled earlier, registered now
        selector = open_table(path, family)
    _C.use_table(device, selector, family)
    _loaded_tables.setdefault((family, scales), {})[device] = str(path)
    _pending_tables.pop((family, scales, device), None)
    checked.add(device)
    for callback in _table_listeners:
        callback()
    return {"path": str(path), "configs": selector.config_count(), "exact": selector.exact_count(),
            "skipped_configs": selector.skipped_configs(), **selector.meta()}


# Devices whose table was looked for already, per (family, scales): a family's first call of a scales mode on a
# device looks once.
_checked_tables: dict[tuple[str, str], set[int]] = {}
# Called after every load_table: whatever holds a table's choice drops it.
_table_listeners: list[Callable[[], None]] = []
# Each device's loaded table per (family, scales) (its path), and the tables bound again after variants were
# added at run time, waiting for the next call of that family and mode on their device (the swap, in
# ensure_table), by (family, scales, device).
_loaded_tables: dict[tuple[str, str], dict[int, str]] = {}
_pending_tables: dict[tuple[str, str, int], object] = {}
# Called when variants were added at run time: whatever lists the compiled variants forgets them.
_variant_listeners: list[Callable[[], None]] = []
# Per (family, scales), the batches of its variants queued for or compiling in the background (runtime.jit):
# until they are done, the calls of a family whose table prices no vendor candidate run that vendor
# (vendor_serves).
_compiling: dict[tuple[str, str], int] = {}


def checked_devices(family: str = "gemm", scales: str = "") -> set[int]:
    """The devices whose table of ``family`` and ``scales`` was looked for already (the set itself:
    ``ensure_table`` adds)."""
    checked = _checked_tables.get((family, scales))
    if checked is None:
        if scales not in scales_modes(family):  # an unknown family: a ValueError naming the known ones
            raise ValueError(f"the {family} family's tables have no scales mode {scales!r} "
                             f"({', '.join(map(repr, scales_modes(family)))})")
        checked = _checked_tables.setdefault((family, scales), set())
    return checked


def on_table_change(callback: Callable[[], None]) -> None:
    """Call ``callback()`` after every ``load_table`` (of any family, on any device), and when a table bound to
    variants added at run time is about to replace one (``variants_added``)."""
    _table_listeners.append(callback)


def on_variants_added(callback: Callable[[], None]) -> None:
    """Call ``callback()`` whenever variants were added at run time (``runtime.jit``)."""
    _variant_listeners.append(callback)


def variants_added(family: str) -> None:
    """After variants of ``family`` were added at run time: listings forget what they held, and each loaded
    table of the family is bound again to the compiled variants, to be swapped in by the next call of its
    family and scales mode on its device (never a call in progress, never under CUDA-graph capture)."""
    for callback in _variant_listeners:
        callback()
    for (name, scales), loaded in list(_loaded_tables.items()):
        for device, path in (loaded.items() if name == family else ()):
            _pending_tables[(family, scales, device)] = open_table(path, family)
    for callback in _table_listeners:
        callback()  # plans built from the old table are dropped, so the next call reaches ensure_table


def compiling_started(family: str, scales: str = "") -> None:
    """A batch of the family's variants of a scales mode was queued for a background compile."""
    _compiling[(family, scales)] = _compiling.get((family, scales), 0) + 1


def compiling_done(family: str, scales: str = "") -> None:
    """A batch of the family's variants of a scales mode compiled (or failed): once none is left, the calls of
    that family and mode leave their vendor candidate for its table's choices (whatever holds a choice drops
    it)."""
    _compiling[(family, scales)] -= 1
    if not _compiling[(family, scales)]:
        del _compiling[(family, scales)]
        for callback in _table_listeners:
            callback()


def vendor_serves(family: str, scales: str = "") -> bool:
    """Whether the family's variants of a scales mode are still compiling in the background. The grouped
    family, whose tables price no vendor candidate, then runs PyTorch's own operators: never slower than
    PyTorch while the table's choices cannot run yet (the others' tables choose among compiled configs that
    include their vendor's; docs/kernels.md)."""
    return (family, scales) in _compiling


def loaded_table(device: int, family: str = "gemm", scales: str = "") -> str | None:
    """The path of the family's table of ``scales`` loaded for ``device``, or None."""
    return _loaded_tables.get((family, scales), {}).get(device)


def table_swap_pending(device: int, family: str = "gemm", scales: str = "") -> bool:
    """Whether a table bound to variants added at run time waits to replace the family's table of ``scales``
    on ``device``."""
    return (family, scales, device) in _pending_tables


def _swap_pending_table(device: int, family: str, scales: str) -> None:
    torch = sys.modules.get("torch")
    key = (family, scales, device)
    if key not in _pending_tables or (torch is not None and torch.cuda.is_current_stream_capturing()):
        return
    _C.use_table(device, _pending_tables.pop(key), family)
    for callback in _table_listeners:
        callback()


def table_checked(device: int, family: str = "gemm", scales: str = "") -> bool:
    """Whether the family's table of ``scales`` for ``device`` was looked for already (loaded, or found
    missing)."""
    return device in checked_devices(family, scales)


def ensure_table(device: int, family: str = "gemm", scales: str = "") -> None:
    """Look for the family's tuned table of ``scales`` for ``device`` now, once per device, so that no later
    call has to; swap in the table bound to variants added at run time where one waits."""
    checked = _checked_tables.get((family, scales))
    if checked is None or device not in checked:
        _autoload_table(device, family, scales)
    elif _pending_tables:
        _swap_pending_table(device, family, scales)


def _autoload_table(device: int, family: str, scales: str) -> None:
    checked_devices(family, scales).add(device)
    name = properties(device)["name"]
    what = f"{family} table" + (f" of {scales} scales" if scales else "")
    if default_table_path(name, family, scales) is None:
        if not families.get(family).tuning:  # a built-in model chooses by design: its variants compile on demand
            jit.prepare_builtin_choice(family)
            return
        how = f"--family {family}" + (f" --scales {scales}" if scales else "")
        warnings.warn(f"wavetune: no tuned {what} for {name}; the family's built-in choice runs (docs/gpus.md, "
                      f"\"A GPU without a table\"; `python -m wavetune tune {how}` makes one)", stacklevel=4)
        return
    try:
        load_table(device=device, family=family, scales=scales)
    except ValueError as exc:
        # NOTES: a shipped table tuned for another config space (a changed cutlass_configs/) must not stop
        # gemm from working; a table the user named in WAVETUNE_TABLE is theirs to fix, so that one raises.
        if os.environ.get(table_env(family, scales)):
            raise
        warnings.warn(f"wavetune: the shipped {what} for {name} does not fit this build ({exc}); kernels are "
                      f"chosen by the built-in heuristic", stacklevel=4)


# What runtime.jit's compiles do to the tables: variants it registers bind the family's tables again, and its
# background batches count, per scales mode, while they run (vendor_serves).
jit.on("registered", lambda family, _scales: variants_added(family))
jit.on("queued", compiling_started)
jit.on("ended", compiling_done)

"""Tuned tables at run time, for every kernel family: where a family's table for a GPU model is
(shipped, or named by the family's environment variable), reading and binding one to a device
(``load_table``), and looking for it once per device on a family's first call (``ensure_table``).

A family's table file name and variable come from its descriptor (``wavetune.families``).
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


def table_env(family: str = "gemm") -> str:
    """The environment variable that names a table to use instead of the shipped one, for a family."""
    return families.get(family).table_env


def table_envs() -> dict[str, str]:
    """family -> its table variable, for every registered family."""
    return {f.name: f.table_env for f in families.all()}


# The table file stem for a GPU name, as the lookup library names it (docs/tables.md): "NVIDIA H200" ->
# "nvidia-h200"; leading and trailing runs of other characters become "-" too.
table_slug = _C.table_slug


def table_file_name(gpu_name: str, family: str = "gemm") -> str:
    """``<slug>.wtt`` for the dense GEMM's table, ``<slug>.<family>.wtt`` for another family's."""
    return families.get(family).table_file_name(table_slug(gpu_name))


def default_table_path(gpu_name: str, family: str = "gemm") -> Path | None:
    """The table named by the family's variable (``table_env``) if set, else the shipped table for this GPU
    model and family, else None."""
    path = TABLE_DIR / table_file_name(gpu_name, family)
    if os.environ.get(table_env(family)):
        return Path(os.environ[table_env(family)])
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
    checked = checked_devices(family)
    selector = open_table(path, family) if path is not None else None  # the file's own errors first
    if device is None:
        device = current_device()
    props = properties(device)
    if selector is None:
        path = default_table_path(props["name"], family)
        if path is None:
            raise FileNotFoundError(f"no wavetune table for {props['name']}: looked for "
                                    f"{table_file_name(props['name'], family)} in {TABLE_DIR}; make one with "
                                    f"`python -m wavetune tune` or set {table_env(family)}")
        selector = open_table(path, family)
    selector.check_device(props["name"], props["sm_count"])
    if jit.prepare_table(Path(path), family):  # variants of the table compiled earlier, registered now
        selector = open_table(path, family)
    _C.use_table(device, selector, family)
    _loaded_tables.setdefault(family, {})[device] = str(path)
    _pending_tables.pop((family, device), None)
    checked.add(device)
    for callback in _table_listeners:
        callback()
    return {"path": str(path), "configs": selector.config_count(), "exact": selector.exact_count(),
            "skipped_configs": selector.skipped_configs(), **selector.meta()}


# Devices whose table was looked for already, per family: a family's first call on a device looks once.
_checked_tables: dict[str, set[int]] = {}
# Called after every load_table: whatever holds a table's choice drops it.
_table_listeners: list[Callable[[], None]] = []
# Each device's loaded table per family (its path), and the tables bound again after variants were added at
# run time, waiting for the family's next call on their device (the swap, in ensure_table).
_loaded_tables: dict[str, dict[int, str]] = {}
_pending_tables: dict[tuple[str, int], object] = {}
# Called when variants were added at run time: whatever lists the compiled variants forgets them.
_variant_listeners: list[Callable[[], None]] = []
# Per family, the batches of its variants queued for or compiling in the background (runtime.jit): until they
# are done, the calls of a family whose table prices no vendor candidate run that vendor (vendor_serves).
_compiling: dict[str, int] = {}


def checked_devices(family: str = "gemm") -> set[int]:
    """The devices whose table of ``family`` was looked for already (the set itself: ``ensure_table`` adds)."""
    checked = _checked_tables.get(family)
    if checked is None:
        families.get(family)  # an unknown family: a ValueError naming the known ones
        checked = _checked_tables.setdefault(family, set())
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
    table of the family is bound again to the compiled variants, to be swapped in by the family's next call on
    its device (never a call in progress, never under CUDA-graph capture)."""
    for callback in _variant_listeners:
        callback()
    for device, path in list(_loaded_tables.get(family, {}).items()):
        _pending_tables[(family, device)] = open_table(path, family)
    for callback in _table_listeners:
        callback()  # plans built from the old table are dropped, so the next call reaches ensure_table


def compiling_started(family: str) -> None:
    """A batch of the family's variants was queued for a background compile."""
    _compiling[family] = _compiling.get(family, 0) + 1


def compiling_done(family: str) -> None:
    """A batch of the family's variants compiled (or failed): once none is left, the family's calls leave their
    vendor candidate for its table's choices (whatever holds a choice drops it)."""
    _compiling[family] -= 1
    if not _compiling[family]:
        del _compiling[family]
        for callback in _table_listeners:
            callback()


def vendor_serves(family: str) -> bool:
    """Whether the family's variants are still compiling in the background. The grouped families, whose tables
    price no vendor candidate, then run PyTorch's own operators: never slower than PyTorch while the table's
    choices cannot run yet (the others' tables choose among compiled configs that include their vendor's;
    docs/kernels.md)."""
    return family in _compiling


def loaded_table(device: int, family: str = "gemm") -> str | None:
    """The path of the family's table loaded for ``device``, or None."""
    return _loaded_tables.get(family, {}).get(device)


def table_swap_pending(device: int, family: str = "gemm") -> bool:
    """Whether a table bound to variants added at run time waits to replace the family's table on ``device``."""
    return (family, device) in _pending_tables


def _swap_pending_table(device: int, family: str) -> None:
    torch = sys.modules.get("torch")
    if (family, device) not in _pending_tables or (torch is not None and torch.cuda.is_current_stream_capturing()):
        return
    _C.use_table(device, _pending_tables.pop((family, device)), family)
    for callback in _table_listeners:
        callback()


def table_checked(device: int, family: str = "gemm") -> bool:
    """Whether the family's table for ``device`` was looked for already (loaded, or found missing)."""
    return device in checked_devices(family)


def ensure_table(device: int, family: str = "gemm") -> None:
    """Look for the family's tuned table for ``device`` now, once per device, so that no later call has to; swap
    in the table bound to variants added at run time where one waits."""
    checked = _checked_tables.get(family)
    if checked is None or device not in checked:
        _autoload_table(device, family)
    elif _pending_tables:
        _swap_pending_table(device, family)


def _autoload_table(device: int, family: str = "gemm") -> None:
    checked_devices(family).add(device)
    name = properties(device)["name"]
    if default_table_path(name, family) is None:
        if not families.get(family).tuning:  # a built-in model chooses by design: its variants compile on demand
            jit.prepare_builtin_choice(family)
            return
        warnings.warn(f"wavetune: no tuned {family} table for {name}; kernels are chosen by the built-in "
                      f"heuristic (run `python -m wavetune tune --family {family}` to make one)", stacklevel=4)
        return
    try:
        load_table(device=device, family=family)
    except ValueError as exc:
        # NOTES: a shipped table tuned for another config space (a changed cutlass_configs/) must not stop
        # gemm from working; a table the user named in WAVETUNE_TABLE is theirs to fix, so that one raises.
        if os.environ.get(table_env(family)):
            raise
        warnings.warn(f"wavetune: the shipped {family} table for {name} does not fit this build ({exc}); "
                      f"kernels are chosen by the built-in heuristic", stacklevel=4)


# What runtime.jit's compiles do to the tables: variants it registers bind the family's tables again, and its
# background batches count while they run (vendor_serves).
jit.on("registered", variants_added)
jit.on("queued", compiling_started)
jit.on("ended", compiling_done)

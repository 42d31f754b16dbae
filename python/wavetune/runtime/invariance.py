"""Batch-invariant mode (docs/torch.md, "Batch-invariant mode"): while on, every family chooses only configs whose
per-row reduction order is fixed, so that a row's result does not depend on the batch it runs in (M, tokens per
expert, the other sequences). The C++ choice takes it as ``ChoiceOptions`` (csrc/include/wavetune/batch_invariance.h).

    wavetune.set_batch_invariant(True)         # process-wide
    with wavetune.batch_invariant():            # for a block; nests, and restores what was set
        ...
    wavetune.patch(model, batch_invariant=True)  # that model's calls, whatever the process-wide setting

Levels, as the C++ ``BatchInvariance`` names them: ``"off"``; ``"reduction_order"`` (what ``True`` means): the
configs of one (N, K) share one reduction order class; ``"config"``: one config per (N, K), for every M.

Imports neither torch nor the native module.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

LEVELS = ("off", "reduction_order", "config")
ON = "reduction_order"  # the level True stands for

# The module attribute ``patch(model, batch_invariant=...)`` sets on a model's modules.
MODULE_ATTRIBUTE = "_wavetune_batch_invariance"

_level = "off"


def level_of(setting: bool | str) -> str:
    """The level a setting names: True, False or a level name; TypeError or ValueError otherwise."""
    if isinstance(setting, bool):
        return ON if setting else "off"
    if not isinstance(setting, str):
        raise TypeError(f"batch invariance is True, False or one of {', '.join(LEVELS)}, got {type(setting).__name__}")
    if setting not in LEVELS:
        raise ValueError(f"unknown batch invariance level {setting!r}: expected True, False or one of "
                         f"{', '.join(LEVELS)}")
    return setting


def set_batch_invariant(setting: bool | str = True) -> None:
    """Make every later call of this process batch-invariant (True or a level name) or not (False)."""
    global _level
    _level = level_of(setting)


def batch_invariant_level() -> str:
    """The process-wide level: "off", "reduction_order" or "config"."""
    return _level


@contextlib.contextmanager
def batch_invariant(setting: bool | str = True) -> Iterator[None]:
    """Calls inside the block run at this level (True: "reduction_order"; False: off); the level before is restored
    on leaving it, exceptions included. Blocks nest."""
    global _level
    previous, _level = _level, level_of(setting)
    try:
        yield
    finally:
        _level = previous


def level_for(module=None) -> str:
    """The level a call runs at: its module's (set by ``patch(model, batch_invariant=...)``) where that is on,
    else the process-wide one. CUDA graphs keep the choice made at capture and torch.compile the level read while
    tracing (the torch operators take it as an argument; a changed level is a new trace)."""
    own = getattr(module, MODULE_ATTRIBUTE, "off") if module is not None else "off"
    return own if own != "off" else _level


def requested(setting: bool | str | None) -> str:
    """The level of an entry point's ``batch_invariant`` argument: its own (checked), or the process-wide level for
    None."""
    return _level if setting is None else level_of(setting)


def mark(model, setting: bool | str) -> None:
    """Make every module of ``model`` run at ``setting``'s level whatever the process-wide one (off: unmark)."""
    level = level_of(setting)
    for module in model.modules():
        if level == "off":
            module.__dict__.pop(MODULE_ATTRIBUTE, None)
        else:
            object.__setattr__(module, MODULE_ATTRIBUTE, level)

"""The native module, ``wavetune._C``, loaded with an error that says what to do when it cannot be; and the
environment it reads when it first lists variants."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

try:
    from .. import _C
except ImportError as exc:  # a source checkout, or a broken install
    raise ImportError(
        "wavetune's native module (wavetune._C) could not be loaded: install the package with "
        f"`pip install .` and import it from outside the source tree ({exc})"
    ) from exc

__all__ = ["_C", "nvidia_library_dirs"]


def nvidia_library_dirs() -> str:
    """The lib/ folders of the installed nvidia-* wheels (where torch's cuBLAS comes from), ':'-joined."""
    spec = importlib.util.find_spec("nvidia")
    roots = spec.submodule_search_locations if spec else []
    return ":".join(str(lib) for root in roots for lib in sorted(Path(root).glob("*/lib")))


# NOTES: the cuBLAS candidate (docs/kernels.md) opens libcublas by its soname, which finds the copy
# torch has loaded; without torch (or before it) the wheel's folder must be named. Set before any call
# lists the variants, which is when the native side looks for the library.
if "WAVETUNE_CUBLAS" not in os.environ:
    os.environ["WAVETUNE_CUBLAS"] = nvidia_library_dirs()

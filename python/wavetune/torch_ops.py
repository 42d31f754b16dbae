"""wavetune's kernels as PyTorch operators, ``torch.ops.wavetune.*``: importing this module imports torch
and registers the operators of every kernel family (``wavetune.families``: each family's ``torch_ops``
module), with fake (meta) implementations, so ``torch.compile(fullgraph=True)`` traces them without a
graph break and CUDA graphs capture them. They are inference-only: there is no backward.

    gemm(a, b), linear(x, weight, bias=None)          the dense GEMM (families/gemm/torch_ops.py), and with
    linear_silu_and_mul, linear_residual              its epilogues (docs/torch.md, "The operators")
    grouped_gemm(x, w, offsets)                       mixture-of-experts layers (docs/grouped.md)
    attention(q, k, v, causal=False, scale=None)      attention forward (docs/attention.md)

A device's tuned table of a family is looked for once, by ``ensure_table`` (``wavetune.patch`` calls it
for a model already on the GPU) or by the family's first call there.
"""

from __future__ import annotations

from types import ModuleType

from . import families
from .runtime import tables
from .torch_library import LIBRARY, STRIDES_TAG

__all__ = ["LIBRARY", "STRIDES_TAG", "ensure_table", "family_ops"]

# Every family's operators, registered on import; name -> its torch_ops module.
_modules: dict[str, ModuleType] = {family.name: family.module("torch_ops") for family in families.all()}


def family_ops(name: str) -> ModuleType:
    """The module of a family's operators (``families/<name>/torch_ops.py``), registered already."""
    families.get(name)  # an unknown family: its error names the known ones
    return _modules[name]


def ensure_table(device: int, family: str = "gemm") -> None:
    """Look for ``device``'s tuned table of ``family`` now (once per device) so that no later call has to."""
    tables.ensure_table(device, family)

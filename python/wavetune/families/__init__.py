"""The kernel families and their registry.

A family is one kind of kernel (dense ``gemm``, ``grouped_gemm`` for mixture-of-experts layers,
``attention``), with its own config space (``cutlass_configs/<file>.toml``), compiled variants, tuned
tables and Python entry points. Each lives in a subpackage of this one that describes it with a
``Family`` and registers it in one line::

    register(Family(name="gemm", config_space="sm90_gemm.toml", ...))

The registry finds the subpackages itself (``pkgutil``) the first time it is asked, so there is no list
of families to keep in step anywhere: run-time tables, torch operators, the CLI and tuning all iterate
``all()`` or look a family up with ``get(name)``.

The descriptor names modules and functions instead of holding them, so that the registry imports
nothing heavy: importing wavetune does not import torch (``torch_ops``) or the tuning drivers
(``tuning``), and the registry does not import the entry points before they are used.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from types import ModuleType
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class Family:
    """What the Python side knows about a kernel family. Module fields are names of modules of the
    family's subpackage (``package``), imported on first use."""

    name: str  # as the tables and the C++ family registry spell it: "gemm", "grouped_gemm", "attention"
    config_space: str  # its file in cutlass_configs/, e.g. "sm90_gemm.toml"; "": built-in variants only
    # its tables are <gpu-slug><table_suffix>: ".wtt", ".grouped_gemm.wtt", ...; a scaled mode's (a family whose
    # tables have scales modes, runtime.tables.scales_modes) insert it: ".grouped_gemm.row.wtt"
    table_suffix: str
    table_env: str  # the environment variable naming a table to use instead of the shipped one
    entry_points: tuple[str, ...]  # public functions of ``api``, exported as wavetune.<name>
    configs: str  # the function of ``api`` listing the compiled variants (KernelConfig), by id
    config_space_hash: str  # the function of ``api`` giving the compiled config space's hash (tables check it)
    input_checks: str  # the function of ``api`` checking a call's inputs without a GPU (torch's fake kernels use it)
    package: str  # the subpackage, e.g. "wavetune.families.gemm"
    api: str = "api"  # module of the entry points (needs the native module, not torch)
    torch_ops: str = "torch_ops"  # module registering its torch.ops.wavetune operators (imports torch)
    tuning: str = "tuning"  # module of its tuning driver (``python -m wavetune tune --family NAME``); "": none
    doc: str = ""  # where it is documented
    # The function of ``api`` checking a problem's sizes alone, as its entry point checks a call (``explain`` uses
    # it): (problem: ``SizeProblem``) -> the reason it does not run, or "". "": the family has none.
    size_check: str = ""
    # The function of ``tuning`` giving a variant's CTAs resident per SM (``runtime.configs.resident_ctas``), which
    # its tuning logs record for the multistage variants; "": every variant of the family has one.
    occupancy: str = ""

    def module(self, role: str) -> ModuleType:
        """The family's module for ``role`` ("api", "torch_ops" or "tuning", as the descriptor names them; any
        other name: that module of the subpackage), imported now if not yet."""
        name = getattr(self, role) if role in ("api", "torch_ops", "tuning") else role
        return importlib.import_module(f"{self.package}.{name}")

    def function(self, role: str, name: str) -> Callable[..., Any]:
        return getattr(self.module(role), name)

    def list_configs(self) -> list:
        """The variants of the family compiled into this build that run on the current GPU."""
        return self.function("api", self.configs)()

    def compiled_hash(self) -> str:
        """The hash of the config space this build compiled for the family."""
        return self.function("api", self.config_space_hash)()

    def table_hash(self, scales: str = "") -> str:
        """The config-space hash the family's tables and tuning logs of a scales mode ("" without) carry: of the
        mode's variants built for the config space's own architecture, so that variants of another mode or
        architecture added leave them valid (as the lookup reads them); ``compiled_hash`` where the build's space
        is not the one the package lists."""
        from ..runtime.native import _C  # the registry imports nothing heavy until used

        space, compiled = _C.config_space(self.name), self.compiled_hash()
        if space is None or space["hash"] != compiled:
            return compiled
        return space["scales_hashes"].get(scales, compiled)

    def size_error(self, problem: "SizeProblem") -> str:
        """What the family's entry point says of a call of ``problem``'s sizes; empty where it runs it."""
        return self.function("api", self.size_check)(problem) if self.size_check else ""

    def table_file_name(self, slug: str, scales: str = "") -> str:
        """The file name of the family's table for a GPU model of table slug ``slug`` and a scales mode."""
        suffix = self.table_suffix.removesuffix(".wtt") + f".{scales}.wtt" if scales else self.table_suffix
        return f"{slug}{suffix}"


@dataclasses.dataclass(frozen=True)
class SizeProblem:
    """A problem as ``explain`` states it, without tensors: M N K as each family reads them (grouped: all experts'
    rows, N, K; attention: query length, KV length, head dim), ``groups`` (experts; attention: the batch), the
    dtype and B layout codes, the family's problem key by field name (the table's ``key_fields``: attention's
    heads_q, heads_kv, causal) and the scales mode of the table."""

    m: int
    n: int
    k: int
    groups: int
    dtype: int
    b_layout: int
    key: dict[str, int] = dataclasses.field(default_factory=dict)
    scales: str = ""


# NOTES: an aligned, non-null address standing for each operand: a size check runs the entry point's native
# checks (sizes, strides, alignment) with no tensors; the checks never read the data.
NO_DATA = 256


_registry: dict[str, Family] = {}
_discovered = False


def register(family: Family) -> Family:
    """Add a family (once per name); returns it, so a subpackage can keep it as ``FAMILY``."""
    if family.name in _registry and _registry[family.name] != family:
        raise ValueError(f"kernel family {family.name!r} is registered twice ({_registry[family.name].package} "
                         f"and {family.package})")
    _registry[family.name] = family
    return family


def _discover() -> None:
    """Import every subpackage of this package: each registers its family."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.ispkg:
            importlib.import_module(f"{__name__}.{info.name}")


def all() -> list[Family]:  # noqa: A001 (the registry's own vocabulary: families.all())
    """Every registered family, dense GEMM first, then by name."""
    _discover()
    return sorted(_registry.values(), key=lambda f: (f.name != "gemm", f.name))


def names() -> list[str]:
    """The registered families' names, in ``all()``'s order."""
    return [f.name for f in all()]


def get(name: str) -> Family:
    """The family called ``name``; a ValueError listing the known names otherwise."""
    _discover()
    family = _registry.get(name)
    if family is None:
        raise ValueError(f"unknown kernel family {name!r} (one of {', '.join(names())})")
    return family

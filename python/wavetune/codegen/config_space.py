"""The kernel config space: parse ``cutlass_configs/*.toml``, expand it into variants, pick a kernel
set, and generate the CUDA sources that instantiate them. Each file describes one kernel family: its
``[family]`` table names the family and says how its code is generated (CUDA template, macro prefix,
registry list, variant names, fixed axes, rules), so no list of families is written here. An optional
``[model]`` table holds the constants of the family's built-in model, generated into a C++ struct
(``<family>_model_data.h``) that its launch code and bindings read.

This module runs in two places: inside the build (CMake calls it as a script, with only the standard
library available) and from the installed package (tests, tools). Keep it standard-library only.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import hashlib
import itertools
import math
import re
import sys
import tomllib
from pathlib import Path

SCHEMA_VERSION = 1
# Kernel sets every config space has: none (what `pip install .` builds; the rest compile on demand), the
# variants the shipped tables choose, every variant.
BUILTIN_SET = "builtin"
BUILT_IN_SETS = (BUILTIN_SET, "tables", "full")

# The vocabulary of each macro axis. These names are also the C++ enumerator names in
# csrc/include/wavetune/types.h, which is how the generated code refers to them.
DTYPES = ("bf16", "fp16")
B_LAYOUTS = ("col", "row")
SCHEDULES = ("cooperative", "pingpong")
# data_parallel: one CTA per tile, scheduled by the hardware (attention's non-persistent kernels only).
TILE_SCHEDULERS = ("persistent", "stream_k", "data_parallel")
# What a config space's `arch` may name: its variants' code's target (types.h, wavetune::arch).
ARCHS = ("sm80", "sm89", "sm90a")

GROUP_KEYS = {"dtypes", "b_layouts", "schedule", "tiles", "clusters", "schedulers"}
OPTIONAL_GROUP_KEYS = {"swap_ab", "scales", "arch"}
# A group whose `arch` is a portable one (ARCHS_PORTABLE) holds CUTLASS 2.x multistage GEMMs (mma.sync, cp.async):
# a CTA tile, its warps ("MxN" warps along the tile's M and N) and its pipeline stages, and no Hopper axes
# (clusters, TMA schedules, tile schedulers, swap-AB, FP8 scales). Their tile scheduler is the family's fixed one
# where it has one (the grouped family's persistent: a grid of the resident CTAs visits every group's tiles), else
# data_parallel (one CTA per output tile and K split). A b_layouts the family fixes may be left out.
MULTISTAGE_GROUP_KEYS = {"arch", "dtypes", "b_layouts", "tiles", "warps", "stages"}
ARCHS_PORTABLE = ("sm80", "sm89")
# NOTES: the multistage kernels' tiles are CUTLASS 2.x's usual Ampere shapes: each warp computes a 32- or 64-wide
# square-ish warp tile of 16x8x16 mma.sync atoms, 4 or 8 warps per CTA; a K tile of 32 or 64 elements is two or
# four 16-byte cp.async chunks per row. Fewer than 3 stages is CUTLASS's two-stage pipelined kernel, not this one.
MULTISTAGE_TILE_MN = (64, 128, 256)
MULTISTAGE_TILE_K = (32, 64)
MULTISTAGE_WARP_TILE = (32, 64)
MULTISTAGE_WARPS = (4, 8)
MULTISTAGE_STAGES = (3, 4, 5)
# NOTES: a CTA may opt into 163 KB of shared memory on sm80 (A100, 164 KB per SM), 99 KB on sm86 and sm89 (100 KB
# per SM). A kernel's stages hold its A and B tiles (the epilogue reuses that memory); the largest sm80 limit is
# refused here, and a kernel above 99 KB runs on sm80 and sm90 only: on other GPUs its launch says why not.
MULTISTAGE_MAX_SHARED_BYTES = 163 * 1024
# A group's `scales`: how its operands are scaled where the family's template has more than one way. The
# variants are instantiated by the template's {macro_prefix}_{SCALES}_INSTANTIATE_VARIANT and named with the
# scales' name fragment ({scales} of name_format): what the [family] table's `scales` gives (mode = "fragment"),
# else this.
DEFAULT_SCALES = (("block128", "_block128"),)
# NOTES: Hopper wgmma tiles: M is a multiple of 64 per consumer warpgroup, N a multiple of 8 up to 256,
# K one or more 64-byte swizzle atoms (32 bf16 elements). We keep to the shapes CUTLASS's builder takes.
# Tile N is the side that runs over the tokens under swap_ab, so it comes in steps of 16 (and 8 for a
# single decode token); sizes outside CUTLASS's default wgmma list need CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
# (sm90_gemm.cuh).
# NOTES: other multiples of 8 are refused: CUTLASS 4.2's TMA load of a K-major 24- or 40-row operand tile
# fails cute's layout divisibility checks at compile time (seen with nvcc 13.0), and its epilogue would
# store such tiles 8 columns at a time (gcd(min(32, N), N)).
TILE_M = (64, 128, 256)
TILE_N = (8, *range(16, 257, 16))
TILE_K = (64, 128)
CLUSTER_DIMS = (1, 2, 4)
MAX_CLUSTER_SIZE = 4
# NOTES: consumer warpgroups run with 232 registers (CUTLASS's setmaxnreg); fp32 accumulators beyond this
# many per thread leave too few for addresses and the epilogue, and ptxas spills.
MAX_ACCUMULATORS_PER_THREAD = 160
# NOTES: the attention family's tile is query rows x KV rows x head dim. CUTLASS's Hopper FMHA runs one
# consumer warpgroup per 64 query rows, and with one its register split asks setmaxnreg for 488
# registers (ptxas refuses above 256): two warpgroups, 128 rows. Its K and V stages hold tile N x head
# dim each, and its shared memory (227 KB) fits those up to 128 x 128 (128 x 64 at head dim 256, as its
# example); at head dim 256 ping-pong's separate query stages overflow it (247 KB, H100).
ATTENTION_HEAD_DIMS = (64, 128, 256)
ATTENTION_BLOCK_Q = (128,)
ATTENTION_BLOCK_KV = (64, 128)
ATTENTION_MAX_KV_TILE = 128 * 128


# The C++ names the family's generated registration, stubs and bindings use (FamilyCode).
FAMILY_CODE_KEYS = ("public_header", "ops", "ops_header", "variant_ops", "variants", "config_space_hash")
FAMILY_CODE_LISTS = ("entries", "kernel_entries", "stubs")
FAMILY_KEYS = {"name", "template", "macro_prefix", "registry", "sources_dir", "name_format", "check", *FAMILY_CODE_KEYS}
OPTIONAL_FAMILY_KEYS = {"fixed_axes", "scales", "find_variant", "archs", *FAMILY_CODE_LISTS}
# [family.archs.<arch>]: the template and variant names of the family's groups of another architecture than the
# file's `arch`.
ARCH_KEYS = {"template", "name_format"}
CHECKS = ("gemm", "attention")  # the rule sets a family's variants satisfy: _check_gemm, _check_attention
CPP_NAME = re.compile(r"(?:[A-Za-z_]\w*::)*[A-Za-z_]\w*")


@dataclasses.dataclass(frozen=True)
class FamilyCode:
    """The C++ side of a family that the build generates from its ``[family]`` table: the registry of its compiled
    variants (``<name>_registration.cpp``), the launch functions of a build without a CUDA compiler
    (``<name>_unavailable.cpp``) and its bindings' registration (``<name>_bindings.cpp``)."""

    public_header: str  # declares the family's public functions (wavetune/....h)
    ops: str  # the detail:: type of a compiled variant's launch functions
    ops_header: str  # in the family's folder: declares ops, variant_ops and the entry functions
    variant_ops: str  # defined in detail::, const Ops* NAME(int32_t id): a registered variant's ops or nullptr
    variants: str  # defined and bound to Python, const std::vector<VariantInfo>& NAME()
    config_space_hash: str  # defined, const char* NAME(); bound to Python where public (not in a namespace)
    find_variant: str = ""  # defined where given, const VariantInfo* NAME(int32_t id)
    entries: tuple[str, ...] = ()  # detail:: functions, std::vector<Entry> NAME(): more variants, every build
    kernel_entries: tuple[str, ...] = ()  # the same defined by the family's .cu files: builds with CUDA only
    stubs: tuple[str, ...] = ()  # public launch functions (declarations) that raise in a build without CUDA


@dataclasses.dataclass(frozen=True)
class Family:
    """What generation needs to know about a kernel family besides its variants: the file's ``[family]`` table."""

    name: str  # as the tables and the C++ family registry spell it
    header: str  # the CUDA template every generated source of the family includes (``template``)
    macro_prefix: str  # of its instantiation macro and of its registry's macros
    registry: str  # the generated X-macro list its runtime registry includes
    sources_dir: str  # subdirectory of the generated sources
    name_format: str  # variant names; unique across families, as they become C++ symbols
    fixed_axes: tuple[tuple[str, tuple[str, ...]], ...] = ()  # group keys the family does not vary
    check: str = "gemm"  # which rules a variant must satisfy: "gemm" (_check_gemm) or "attention"
    scales: tuple[tuple[str, str], ...] = DEFAULT_SCALES  # the groups' scales modes: (mode, its name fragment)
    code: FamilyCode | None = None  # the C++ generated for it
    archs: tuple[tuple[str, str, str], ...] = ()  # [family.archs]: (arch, template, name_format) per other arch

    def for_arch(self, arch: str) -> "Family":
        """How the family's variants of ``arch`` are generated: its [family.archs] template and names where it has
        them, else its own."""
        for name, template, name_format in self.archs:
            if name == arch:
                return dataclasses.replace(self, header=template, name_format=name_format)
        return self


class ConfigError(ValueError):
    """A config-space file that cannot be used; the message names the file and the offending entry."""


@dataclasses.dataclass(frozen=True)
class ModelValue:
    """One constant of a family's built-in model: ``name = { value = ..., why = "..." }`` in its ``[model]``
    table. A value is a bool, an integer, a float, or a non-empty list of integers or of floats."""

    name: str  # a C++ and Python identifier: the field of the generated struct and the binding's dict key
    value: bool | int | float | tuple
    why: str  # one line: why the value is what it is (the generated field's comment)

    @property
    def cpp_type(self) -> str:
        scalar = _cpp_scalar_type(self.value[0] if isinstance(self.value, tuple) else self.value)
        return f"std::array<{scalar}, {len(self.value)}>" if isinstance(self.value, tuple) else scalar

    @property
    def cpp_value(self) -> str:
        if isinstance(self.value, tuple):
            return "{" + ", ".join(_cpp_literal(x) for x in self.value) + "}"
        return _cpp_literal(self.value)


@dataclasses.dataclass(frozen=True)
class Variant:
    """One compiled GEMM kernel: every compile-time parameter. ``id`` is its position in the space."""

    id: int
    dtype: str
    b_layout: str
    swap_ab: bool
    schedule: str
    tile_m: int
    tile_n: int
    tile_k: int
    cluster_m: int
    cluster_n: int
    scheduler: str
    family: str
    generation: Family = dataclasses.field(repr=False, compare=False)  # its family's [family] table
    scales: str = ""  # one of its family's scales modes, or "": the template's default
    arch: str = "sm90a"  # what its code is built for: its group's `arch`, else the file's
    stages: int = 0  # multistage kernels (a portable arch): pipeline stages, warps along tile M and N; else 0
    warps_m: int = 0
    warps_n: int = 0

    @property
    def name(self) -> str:
        fields = {**_fields_of(self), "scales": dict(self.generation.scales).get(self.scales, "")}
        return self.generation.name_format.format(**fields, swap="_swapab" if self.swap_ab else "")

    @property
    def multistage(self) -> bool:
        return self.schedule == "multistage"

    @property
    def instantiate_macro(self) -> str:
        """The template's instantiation macro: one per scales mode and per architecture with its own template (so
        that the variants of a run-time library, one translation unit, can include every template)."""
        scales = f"_{self.scales.upper()}" if self.scales else ""
        arch = f"_{self.arch.upper()}" if any(self.arch == name for name, *_ in self.generation.archs) else ""
        return f"{self.generation.macro_prefix}{arch}{scales}_INSTANTIATE_VARIANT"

    @property
    def instantiate_args(self) -> str:
        """The instantiation macro's arguments past the fields every template takes: a multistage kernel's stages
        and warps."""
        return f", {self.stages}, {self.warps_m}, {self.warps_n}" if self.multistage else ""


@dataclasses.dataclass(frozen=True)
class ConfigSpace:
    path: Path
    arch: str
    variants: tuple[Variant, ...]
    kernel_sets: dict[str, tuple[str, ...]]
    # The built-in heuristic: (dtype, b_layout, max_m or 0 for no limit, variant) in bucket order.
    fallback: tuple[tuple[str, str, int, Variant], ...] = ()
    family: str = "gemm"  # its [family] table's name
    # Globs over the variants a heuristic of the family chooses from at run time: compiled by `tables`.
    heuristic_variants: tuple[str, ...] = ()
    generation: Family | None = None  # its [family] table
    model: tuple[ModelValue, ...] = ()  # its [model] table: the built-in model's constants, in the file's order

    @property
    def hash(self) -> str:
        """Identifies the space: tables tuned against one space are refused by a build of another."""
        text = "\n".join(f"{v.id} {v.name}" for v in self.variants)
        return hashlib.sha256(f"{self.arch}\n{text}".encode()).hexdigest()[:16]

    def scales_hash(self, scales: str) -> str:
        """Identifies the variants of one scales mode (a group's ``scales``, "" for none) built for the file's
        ``arch``: what a table of that mode is tuned against, so that variants of another mode or architecture
        added to the space leave it valid (the lookup checks every config's variant by name)."""
        text = "\n".join(f"{v.id} {v.name}" for v in self.variants if v.scales == scales and v.arch == self.arch)
        return hashlib.sha256(f"{self.arch}\n{text}".encode()).hexdigest()[:16]

    def heuristic_set(self) -> list[Variant]:
        """The variants the built-in choice takes where no table is loaded: the fallback's and the heuristic's."""
        fallback = {v.name for *_, v in self.fallback}
        return [v for v in self.variants if v.name in fallback or _matches(v, self.heuristic_variants)]

    def select(self, kernel_set: str = "full", name_filter: str = "", tables_dir: Path | None = None,
               allow_empty: bool = False) -> list[Variant]:
        """The variants of a named set, optionally narrowed by comma-separated glob patterns.

        ``builtin``: none (the default install: the hand-written kernels and the vendor candidates only).
        ``tables``: the variants the tables in ``tables_dir`` can choose, plus the fallback's and the
        heuristic's of the file's architecture. ``allow_empty``: a set this file does not define, or one the filter empties, selects
        nothing instead of raising (another family's file may define it).
        """
        if kernel_set == BUILTIN_SET:
            return []
        if kernel_set == "full":
            chosen = list(self.variants)
        elif kernel_set == "tables":
            # the heuristic's of the file's architecture: another's compile on demand on its GPUs
            wanted = table_variant_names(tables_dir) | {v.name for v in self.heuristic_set() if v.arch == self.arch}
            chosen = [v for v in self.variants if v.name in wanted]
        elif kernel_set in self.kernel_sets:
            chosen = [v for v in self.variants if _matches(v, self.kernel_sets[kernel_set])]
        elif allow_empty:
            chosen = []
        else:
            known = ", ".join([*BUILT_IN_SETS, *self.kernel_sets])
            raise ConfigError(f"{self.path}: unknown kernel set {kernel_set!r} (known: {known})")
        if name_filter:
            patterns = [p.strip() for p in name_filter.split(",") if p.strip()]
            chosen = [v for v in chosen if _matches(v, patterns)]
        if not chosen and not allow_empty:
            raise ConfigError(
                f"{self.path}: kernel set {kernel_set!r} with filter {name_filter!r} selects no variant"
            )
        return chosen


def _matches(v: Variant, patterns) -> bool:
    return any(fnmatch.fnmatchcase(v.name, p) for p in patterns)


def _parse_dims(text: object, count: int, where: str) -> tuple[int, ...]:
    parts = str(text).split("x")
    if not isinstance(text, str) or len(parts) != count or not all(p.isdigit() for p in parts):
        raise ConfigError(f"{where}: {text!r} is not of the form {'x'.join(['N'] * count)}")
    return tuple(int(p) for p in parts)


def _string_list(group: dict, key: str, allowed: tuple[str, ...] | None, where: str) -> list[str]:
    value = group[key]
    if not isinstance(value, list) or not value or not all(isinstance(x, str) for x in value):
        raise ConfigError(f"{where}: {key} must be a non-empty list of strings, got {value!r}")
    if allowed is not None:
        for x in value:
            if x not in allowed:
                raise ConfigError(f"{where}: {key} has {x!r}; allowed: {', '.join(allowed)}")
    return value


def accumulators_per_thread(v: Variant) -> int:
    """fp32 accumulator registers per consumer thread: cooperative splits a tile over two warpgroups."""
    warpgroups = 2 if v.schedule == "cooperative" else 1
    return v.tile_m * v.tile_n // (128 * warpgroups)


def _check_variant(v: Variant, where: str) -> None:
    if v.generation.check == "attention":
        _check_attention(v, where)
    else:
        _check_gemm(v, where)


def _check_attention(v: Variant, where: str) -> None:
    block_q, block_kv, head_dim = v.tile_m, v.tile_n, v.tile_k
    if head_dim not in ATTENTION_HEAD_DIMS or block_q not in ATTENTION_BLOCK_Q or block_kv not in ATTENTION_BLOCK_KV:
        raise ConfigError(f"{where}: tile {block_q}x{block_kv}x{head_dim} is not supported (query rows in "
                          f"{ATTENTION_BLOCK_Q}, KV rows in {ATTENTION_BLOCK_KV}, head dim in {ATTENTION_HEAD_DIMS})")
    if block_kv * head_dim > ATTENTION_MAX_KV_TILE:
        raise ConfigError(f"{where}: a {block_kv}-row KV tile of head dim {head_dim} leaves too few shared-memory "
                          f"stages (KV rows x head dim at most {ATTENTION_MAX_KV_TILE})")
    if v.scheduler == "stream_k":
        raise ConfigError(f"{where}: attention kernels are persistent or data_parallel")
    if v.schedule == "pingpong" and v.scheduler != "persistent":
        raise ConfigError(f"{where}: CUTLASS's ping-pong FMHA is persistent by construction")
    if v.schedule == "pingpong" and head_dim > 128:
        raise ConfigError(f"{where}: ping-pong's query stages overflow shared memory at head dim {head_dim}")


def _check_gemm(v: Variant, where: str) -> None:
    if v.scheduler == "data_parallel":
        raise ConfigError(f"{where}: GEMM kernels are persistent or stream_k (data_parallel is a run-time decomposition)")
    if v.tile_m not in TILE_M or v.tile_n not in TILE_N or v.tile_k not in TILE_K:
        raise ConfigError(
            f"{where}: tile {v.tile_m}x{v.tile_n}x{v.tile_k} is not supported "
            f"(M in {TILE_M}, N 8 or a multiple of 16 up to 256, K in {TILE_K})"
        )
    cluster = v.cluster_m * v.cluster_n
    if v.cluster_m not in CLUSTER_DIMS or v.cluster_n not in CLUSTER_DIMS or cluster > MAX_CLUSTER_SIZE:
        raise ConfigError(f"{where}: cluster {v.cluster_m}x{v.cluster_n} is not supported "
                          f"(each of {CLUSTER_DIMS}, at most {MAX_CLUSTER_SIZE} CTAs)")
    if v.schedule == "cooperative" and v.tile_m < 128:
        raise ConfigError(f"{where}: cooperative tiles split M over two warpgroups and need tile M >= 128")
    if v.schedule == "pingpong" and v.tile_m > 128:
        raise ConfigError(f"{where}: a ping-pong warpgroup owns a whole tile; tile M must be 64 or 128")
    if v.schedule == "pingpong" and v.scheduler == "stream_k":
        raise ConfigError(f"{where}: CUTLASS's ping-pong kernel does not support the stream_k scheduler")
    if v.swap_ab and v.b_layout != "col":
        raise ConfigError(f"{where}: swap_ab is supported for column-major B (b_layouts = [\"col\"]) only")
    if v.tile_n < 64 and not v.swap_ab:
        raise ConfigError(f"{where}: tile N below 64 is for swap_ab groups (tile N then runs over tokens)")
    if accumulators_per_thread(v) > MAX_ACCUMULATORS_PER_THREAD:
        raise ConfigError(f"{where}: tile {v.tile_m}x{v.tile_n} needs {accumulators_per_thread(v)} accumulator "
                          f"registers per {v.schedule} consumer thread (at most {MAX_ACCUMULATORS_PER_THREAD})")


def load(path: str | Path) -> ConfigSpace:
    """Parse and validate a config-space file; every problem is a ConfigError naming the entry."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config space: {exc}") from exc
    if data.get("schema") != SCHEMA_VERSION:
        raise ConfigError(f"{path}: schema must be {SCHEMA_VERSION}, got {data.get('schema')!r}")
    if data.get("arch") not in ARCHS:
        raise ConfigError(f"{path}: arch must be one of {', '.join(ARCHS)} (what its variants' code is built for), "
                          f"got {data.get('arch')!r}")
    family = _parse_family(data.get("family"), path)
    groups = data.get("group")
    if not isinstance(groups, list) or not groups:
        raise ConfigError(f"{path}: no [[group]] tables")

    variants: list[Variant] = []
    seen: dict[str, str] = {}
    for index, group in enumerate(groups):
        where = f"{path}: group {index + 1}"
        if not isinstance(group, dict):
            raise ConfigError(f"{where}: a [[group]] must be a table")
        arch = group.get("arch", data["arch"])
        if arch != data["arch"]:
            group_variants = _multistage_group(group, family, arch, len(variants), where)
        else:
            group_variants = _hopper_group(group, family, arch, len(variants), where)
        for v in group_variants:
            if v.name in seen:
                raise ConfigError(f"{where}: {v.name} is already defined by {seen[v.name]}")
            seen[v.name] = where
            variants.append(v)

    sets = data.get("kernel_sets", {})
    if not isinstance(sets, dict):
        raise ConfigError(f"{path}: [kernel_sets] must be a table of name = [patterns]")
    kernel_sets = {}
    for name, patterns in sets.items():
        if name in BUILT_IN_SETS:
            raise ConfigError(f"{path}: kernel set {name!r} is built in and cannot be redefined")
        kernel_sets[name] = tuple(_string_list(sets, name, None, f"{path}: kernel set {name!r}"))
    fallback = _parse_fallback(data.get("fallback"), {v.name: v for v in variants}, path)
    heuristic = tuple(_string_list(data, "heuristic_variants", None, str(path)) if "heuristic_variants" in data else ())
    for pattern in heuristic:
        if not any(_matches(v, [pattern]) for v in variants):
            raise ConfigError(f"{path}: heuristic_variants pattern {pattern!r} matches no variant")
    space = ConfigSpace(path, data["arch"], tuple(variants), kernel_sets, fallback, family.name, heuristic, family,
                        _parse_model(data.get("model", {}), path))
    for name in kernel_sets:
        space.select(name)  # a set that matches nothing is a typo: fail at parse time
    return space


def _hopper_group(group: dict, family: Family, arch: str, first_id: int, where: str) -> list[Variant]:
    """The variants of a group of the file's architecture: the cross product of its axes, ids from ``first_id``."""
    group = _with_fixed_axes(group, family, where)
    if not GROUP_KEYS <= set(group) <= GROUP_KEYS | OPTIONAL_GROUP_KEYS:
        missing, extra = GROUP_KEYS - set(group), set(group) - GROUP_KEYS - OPTIONAL_GROUP_KEYS
        raise ConfigError(f"{where}: missing keys {sorted(missing)}, unknown keys {sorted(extra)}")
    swap_ab = group.get("swap_ab", False)
    if not isinstance(swap_ab, bool):
        raise ConfigError(f"{where}: swap_ab must be true or false, got {swap_ab!r}")
    scales = group.get("scales", "")
    modes = [mode for mode, _ in family.scales]
    if scales and scales not in modes:
        raise ConfigError(f"{where}: scales {scales!r}; allowed: {', '.join(modes)}")
    if scales and "{scales}" not in family.name_format:
        raise ConfigError(f"{where}: scales {scales!r}, but the family's name_format has no {{scales}}")
    if group["schedule"] not in SCHEDULES:
        raise ConfigError(f"{where}: schedule {group['schedule']!r}; allowed: {', '.join(SCHEDULES)}")
    axes = (
        _string_list(group, "dtypes", DTYPES, where),
        _string_list(group, "b_layouts", B_LAYOUTS, where),
        [_parse_dims(t, 3, where) for t in _string_list(group, "tiles", None, where)],
        [_parse_dims(c, 2, where) for c in _string_list(group, "clusters", None, where)],
        _string_list(group, "schedulers", TILE_SCHEDULERS, where),
    )
    out = []
    for dtype, b_layout, tile, cluster, scheduler in itertools.product(*axes):
        v = Variant(first_id + len(out), dtype, b_layout, swap_ab, group["schedule"], *tile, *cluster, scheduler,
                    family.name, family, scales, arch)
        _check_variant(v, f"{where}: {v.name}")
        out.append(v)
    return out


def _multistage_group(group: dict, family: Family, arch: str, first_id: int, where: str) -> list[Variant]:
    """The variants of a group of a portable architecture (MULTISTAGE_GROUP_KEYS), ids from ``first_id``."""
    if arch not in ARCHS_PORTABLE:
        raise ConfigError(f"{where}: arch {arch!r}; a group of another architecture than the file's is one of "
                          f"{', '.join(ARCHS_PORTABLE)} (CUTLASS 2.x multistage kernels)")
    if family.check != "gemm" or not any(arch == name for name, *_ in family.archs):
        raise ConfigError(f"{where}: arch {arch!r} needs a GEMM family with a [family.archs.{arch}] table "
                          f"(its template and name_format)")
    hopper = sorted(set(group) & (GROUP_KEYS | OPTIONAL_GROUP_KEYS) - MULTISTAGE_GROUP_KEYS)
    if hopper:
        raise ConfigError(f"{where}: {', '.join(hopper)}: Hopper axes (thread-block clusters, TMA schedules, "
                          f"persistent tile schedulers, swap-AB, FP8 scales); an {arch} group has "
                          f"{', '.join(sorted(MULTISTAGE_GROUP_KEYS))}")
    group = _with_fixed_axes(group, family, where, MULTISTAGE_GROUP_KEYS)
    if set(group) != MULTISTAGE_GROUP_KEYS:
        missing, extra = MULTISTAGE_GROUP_KEYS - set(group), set(group) - MULTISTAGE_GROUP_KEYS
        raise ConfigError(f"{where}: missing keys {sorted(missing)}, unknown keys {sorted(extra)}")
    stages = group["stages"]
    if not isinstance(stages, list) or not stages or not all(type(x) is int for x in stages):
        raise ConfigError(f"{where}: stages must be a non-empty list of integers, got {stages!r}")
    generation = family.for_arch(arch)
    axes = (
        _string_list(group, "dtypes", DTYPES, where),
        _string_list(group, "b_layouts", B_LAYOUTS, where),
        [_parse_dims(t, 3, where) for t in _string_list(group, "tiles", None, where)],
        [_parse_dims(w, 2, where) for w in _string_list(group, "warps", None, where)],
        stages,
    )
    scheduler = _multistage_scheduler(family, where)
    out = []
    for dtype, b_layout, tile, warps, stage_count in itertools.product(*axes):
        v = Variant(first_id + len(out), dtype, b_layout, False, "multistage", *tile, 1, 1, scheduler,
                    family.name, generation, "", arch, stage_count, *warps)
        _check_multistage(v, f"{where}: {v.name}")
        out.append(v)
    return out


def _multistage_scheduler(family: Family, where: str) -> str:
    """The tile scheduler of the family's multistage kernels (MULTISTAGE_GROUP_KEYS says which)."""
    schedulers = dict(family.fixed_axes).get("schedulers", ("data_parallel",))
    if len(schedulers) != 1:
        raise ConfigError(f"{where}: the {family.name} family's schedulers {list(schedulers)} leave its multistage "
                          f"kernels' tile scheduler open (fix one)")
    return schedulers[0]


def multistage_shared_bytes(v: Variant) -> int:
    """Shared memory of a multistage kernel's CTA: its stages of A and B tiles (16-bit elements)."""
    return v.stages * (v.tile_m + v.tile_n) * v.tile_k * 2


def _check_multistage(v: Variant, where: str) -> None:
    if v.tile_m not in MULTISTAGE_TILE_MN or v.tile_n not in MULTISTAGE_TILE_MN or v.tile_k not in MULTISTAGE_TILE_K:
        raise ConfigError(f"{where}: tile {v.tile_m}x{v.tile_n}x{v.tile_k} is not supported (M and N in "
                          f"{MULTISTAGE_TILE_MN}, K in {MULTISTAGE_TILE_K})")
    warps = v.warps_m * v.warps_n
    if warps not in MULTISTAGE_WARPS or v.tile_m % v.warps_m or v.tile_n % v.warps_n:
        raise ConfigError(f"{where}: warps {v.warps_m}x{v.warps_n} do not split tile {v.tile_m}x{v.tile_n} "
                          f"({' or '.join(map(str, MULTISTAGE_WARPS))} warps, each a whole warp tile)")
    warp_m, warp_n = v.tile_m // v.warps_m, v.tile_n // v.warps_n
    if warp_m not in MULTISTAGE_WARP_TILE or warp_n not in MULTISTAGE_WARP_TILE:
        raise ConfigError(f"{where}: warp tile {warp_m}x{warp_n} is not supported (each side in "
                          f"{MULTISTAGE_WARP_TILE}: whole 16x8x16 mma.sync atoms, accumulators that fit the registers)")
    if v.stages not in MULTISTAGE_STAGES:
        raise ConfigError(f"{where}: stages={v.stages}; allowed: {MULTISTAGE_STAGES} (a cp.async pipeline of at "
                          f"least 3 tiles)")
    if multistage_shared_bytes(v) > MULTISTAGE_MAX_SHARED_BYTES:
        raise ConfigError(f"{where}: {v.stages} stages of a {v.tile_m}x{v.tile_n}x{v.tile_k} tile need "
                          f"{multistage_shared_bytes(v) // 1024} KB of shared memory, more than the "
                          f"{MULTISTAGE_MAX_SHARED_BYTES // 1024} KB a CTA may have on sm80")


def _parse_family(table: object, path: Path) -> Family:
    """The file's ``[family]`` table: how the build generates the family's code."""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: no [family] table (name, template, macro_prefix, registry, sources_dir, "
                          f"name_format, check and optionally fixed_axes; see cutlass_configs/sm90_gemm.toml)")
    if not FAMILY_KEYS <= set(table) <= FAMILY_KEYS | OPTIONAL_FAMILY_KEYS:
        missing, extra = FAMILY_KEYS - set(table), set(table) - FAMILY_KEYS - OPTIONAL_FAMILY_KEYS
        raise ConfigError(f"{path}: [family] misses keys {sorted(missing)}, has unknown keys {sorted(extra)}")
    for key in FAMILY_KEYS:
        if not isinstance(table[key], str) or not table[key]:
            raise ConfigError(f"{path}: [family] {key} must be a non-empty string, got {table[key]!r}")
    if table["check"] not in CHECKS:
        raise ConfigError(f"{path}: [family] check {table['check']!r}; allowed: {', '.join(CHECKS)}")
    fixed = table.get("fixed_axes", {})
    if not isinstance(fixed, dict) or not set(fixed) <= GROUP_KEYS:
        raise ConfigError(f"{path}: [family] fixed_axes must be a table of group keys "
                          f"({', '.join(sorted(GROUP_KEYS))}) to lists, got {fixed!r}")
    axes = tuple((key, tuple(_string_list(fixed, key, None, f"{path}: [family] fixed_axes"))) for key in fixed)
    return Family(table["name"], table["template"], table["macro_prefix"], table["registry"], table["sources_dir"],
                  table["name_format"], axes, table["check"], _parse_scales(table.get("scales"), path),
                  _parse_family_code(table, path), _parse_archs(table.get("archs", {}), path))


def _parse_archs(table: object, path: Path) -> tuple[tuple[str, str, str], ...]:
    """[family.archs.<arch>] template = "...", name_format = "...": the family's groups of that architecture."""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [family.archs] must be a table of architectures, got {table!r}")
    out = []
    for arch, entry in table.items():
        where = f"{path}: [family.archs.{arch}]"
        if arch not in ARCHS_PORTABLE:
            raise ConfigError(f"{where}: {arch!r} is not one of {', '.join(ARCHS_PORTABLE)}")
        if not isinstance(entry, dict) or set(entry) != ARCH_KEYS or not all(
                isinstance(x, str) and x for x in entry.values()):
            raise ConfigError(f"{where}: must hold non-empty strings {', '.join(sorted(ARCH_KEYS))}, got {entry!r}")
        out.append((arch, entry["template"], entry["name_format"]))
    return tuple(out)


def _parse_family_code(table: dict, path: Path) -> FamilyCode:
    """The [family] table's C++ names (FamilyCode), each checked for its form: a header, a name, a declaration."""
    forms = {"name": CPP_NAME, "header": re.compile(r"[\w/.]+\.h"), "declaration": re.compile(r"[^;{}]+\([^;{}]*\)")}

    def checked(key: str, value: object, form: str) -> str:
        if not isinstance(value, str) or not forms[form].fullmatch(value):
            raise ConfigError(f"{path}: [family] {key} must be a C++ {form}, got {value!r}")
        return value

    names = [checked(key, table[key], "header" if key.endswith("header") else "name") for key in FAMILY_CODE_KEYS]
    find_variant = checked("find_variant", table["find_variant"], "name") if "find_variant" in table else ""
    lists = []
    for key in FAMILY_CODE_LISTS:
        values = table.get(key, [])
        if not isinstance(values, list):
            raise ConfigError(f"{path}: [family] {key} must be a list, got {values!r}")
        lists.append(tuple(checked(key, v, "declaration" if key == "stubs" else "name") for v in values))
    return FamilyCode(*names, find_variant, *lists)


def _parse_scales(table: object, path: Path) -> tuple[tuple[str, str], ...]:
    """[family] scales = { mode = "name fragment", ... }: the family's scales modes (DEFAULT_SCALES without)."""
    if table is None:
        return DEFAULT_SCALES
    if not isinstance(table, dict) or not table or not all(
            isinstance(fragment, str) and mode.isidentifier() for mode, fragment in table.items()):
        raise ConfigError(f"{path}: [family] scales must be a table of scales modes (identifiers) to the fragment "
                          f"their variant names have ({{scales}} of name_format), got {table!r}")
    return tuple(table.items())


MODEL_NAME = re.compile(r"[a-z][a-z0-9_]*")


def _parse_model(table: object, path: Path) -> tuple[ModelValue, ...]:
    """The file's ``[model]`` table: ``name = { value = ..., why = "one line" }`` per constant (none: no table)."""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [model] must be a table of name = {{ value = ..., why = \"...\" }}")
    out = []
    for name, entry in table.items():
        where = f"{path}: [model] {name}"
        if not MODEL_NAME.fullmatch(name):
            raise ConfigError(f"{where}: a name is lower case letters, digits and underscores, starting with a letter")
        if not isinstance(entry, dict) or set(entry) != {"value", "why"}:
            raise ConfigError(f"{where}: must be {{ value = ..., why = \"...\" }}, got {entry!r}")
        why = entry["why"]
        if not isinstance(why, str) or not why.strip() or "\n" in why:
            raise ConfigError(f"{where}: why must be one non-empty line, got {why!r}")
        out.append(ModelValue(name, _model_value(entry["value"], where), why.strip()))
    return tuple(out)


def _model_value(value: object, where: str) -> bool | int | float | tuple:
    """A [model] value as the generated struct holds it; lists become tuples of one scalar type."""
    items = value if isinstance(value, list) else [value]
    kinds = {type(x) for x in items}
    if not items or len(kinds) != 1 or not kinds <= {bool, int, float} or (isinstance(value, list) and bool in kinds):
        raise ConfigError(f"{where}: value must be a bool, an integer, a float, or a non-empty list of integers "
                          f"or of floats, got {value!r}")
    if any(isinstance(x, float) and not math.isfinite(x) for x in items):
        raise ConfigError(f"{where}: value must be finite, got {value!r}")
    if any(type(x) is int and not -2**63 < x < 2**63 for x in items):
        raise ConfigError(f"{where}: an integer value must fit in 64 bits, got {value!r}")
    return tuple(items) if isinstance(value, list) else value


def _cpp_scalar_type(value: bool | int | float) -> str:
    return {bool: "bool", int: "int64_t", float: "double"}[type(value)]


def _cpp_literal(value: bool | int | float) -> str:
    """The C++ literal of a value: repr gives the shortest decimal that reads back as the same double."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _with_fixed_axes(group: dict, family: Family, where: str, keys: set[str] = GROUP_KEYS) -> dict:
    """The group with the axes its family does not vary filled in (those of ``keys``); other values for them are
    refused."""
    fixed = {key: values for key, values in family.fixed_axes if key in keys}
    for key, values in fixed.items():
        if key in group and group[key] != list(values):
            raise ConfigError(f"{where}: the {family.name} family has {key} = {list(values)} only, got {group[key]!r}")
    return {**{key: list(values) for key, values in fixed.items()}, **group}


def _parse_fallback(table: object, by_name: dict[str, Variant], path: Path) -> tuple:
    """[fallback] col/row = [[max_m, variant without dtype prefix], ...] -> rows for both dtypes.

    Optional: without it, a GPU with no table gets any compiled variant of the right dtype and layout.
    """
    if table is None:
        return ()
    if not isinstance(table, dict) or set(table) != set(B_LAYOUTS):
        raise ConfigError(f"{path}: [fallback] needs a bucket list for each B layout ({', '.join(B_LAYOUTS)})")
    rows = []
    for layout, buckets in table.items():
        where = f"{path}: [fallback] {layout}"
        if not isinstance(buckets, list) or not buckets or not all(
                isinstance(b, list) and len(b) == 2 and isinstance(b[0], int) and isinstance(b[1], str) for b in buckets):
            raise ConfigError(f"{where}: must be a non-empty list of [max_m, variant] pairs")
        limits = [b[0] for b in buckets]
        if limits[-1] != 0 or any(m <= 0 for m in limits[:-1]) or limits[:-1] != sorted(set(limits[:-1])):
            raise ConfigError(f"{where}: max_m must ascend and the last bucket must be 0 (every larger M), got {limits}")
        for dtype in DTYPES:
            for max_m, suffix in buckets:
                variant = by_name.get(f"{dtype}_{suffix}")
                if variant is None or variant.b_layout != layout:
                    raise ConfigError(f"{where}: {dtype}_{suffix} is not a {layout}-major variant of this space")
                rows.append((dtype, layout, max_m, variant))
    return tuple(rows)


def table_variant_names(tables_dir: Path | None) -> set[str]:
    """Variant names in the `config` records of the tables in a directory (docs/tables.md)."""
    tables = sorted(Path(tables_dir).glob("*.wtt")) if tables_dir else []
    return set().union(*(table_file_variant_names(table) for table in tables))


def table_file_variant_names(table: Path) -> set[str]:
    """Variant names in the `config` records of one table file."""
    return {line.split()[2] for line in Path(table).read_text().splitlines() if line.startswith("config ")}


# ----------------------------------------------------------------------------------------------
# Code generation: one translation unit per variant (a CUTLASS sm90 instantiation is the slow part
# of the build, so they compile in parallel), and one X-macro list that the runtime registry reads.

VARIANT_TEMPLATE = """\
// Generated by python/wavetune/codegen/config_space.py from {source}. Do not edit.
{portable}#define WAVETUNE_VARIANT_SCHEDULER_{scheduler}  // before the template, which may configure CUTLASS by it
#include "{header}"

{instantiate}({name}, {dtype}, {b_layout}, {swap_ab}, {schedule}, {tile_m}, {tile_n}, {tile_k}, {cluster_m}, {cluster_n}, {scheduler}{args})
"""
# The marker of a source the build also compiles to compute_80 PTX (CMakeLists.txt): code of a portable arch.
PORTABLE_MARKER = "// wavetune: portable\n"

REGISTRY_TEMPLATE = """\
// Generated by python/wavetune/codegen/config_space.py from {source}. Do not edit.
// WAVETUNE_VARIANT(id, name, dtype, b_layout, swap_ab, schedule, tile_m, tile_n, tile_k, cluster_m, cluster_n, scheduler,
//                  arch)
#define {prefix}_CONFIG_SPACE_HASH "{hash}"
#define {prefix}_KERNEL_SET_NAME "{kernel_set}"
#define {prefix}_VARIANT_LIST(WAVETUNE_VARIANT) \\
{rows}

// WAVETUNE_FALLBACK(dtype, b_layout, max_m (0: no limit), variant id): the built-in heuristic's buckets.
#define {prefix}_FALLBACK_LIST(WAVETUNE_FALLBACK) \\
{fallback}

// Every variant of the config space, compiled or not, as WAVETUNE_VARIANT rows: what a table tuned against it
// may name, and what the Python package compiles on demand.
#define {prefix}_SPACE_VARIANT_LIST(WAVETUNE_VARIANT) \\
{space_rows}

// The names of the variants the family's built-in choice takes (ConfigSpace.heuristic_set).
#define {prefix}_HEURISTIC_VARIANT_NAMES \\
{heuristic_names}

// {{scales mode, the hash of its variants}} per scales mode of the variants (ConfigSpace.scales_hash).
#define {prefix}_SCALES_HASHES \\
{scales_hashes}
"""


def _fields_of(v: Variant) -> dict[str, object]:
    """The variant's own fields (its family's generation data left out)."""
    return {f.name: getattr(v, f.name) for f in dataclasses.fields(v) if f.name != "generation"}


def _fields(v: Variant) -> dict[str, object]:
    """The variant's fields as C++ tokens for the templates."""
    return {**_fields_of(v), "swap_ab": "true" if v.swap_ab else "false", "name": v.name}


def render_variant(v: Variant, source: str) -> str:
    portable = PORTABLE_MARKER if v.arch in ARCHS_PORTABLE else ""
    return VARIANT_TEMPLATE.format(source=source, header=v.generation.header, instantiate=v.instantiate_macro,
                                   args=v.instantiate_args, portable=portable, **_fields(v))


_REGISTRY_ROW = ("  WAVETUNE_VARIANT({id}, {name}, {dtype}, {b_layout}, {swap_ab}, {schedule}, {tile_m}, {tile_n}, "
                 "{tile_k}, {cluster_m}, {cluster_n}, {scheduler}, {arch})")


def render_registry(space: ConfigSpace, chosen: list[Variant], kernel_set: str) -> str:
    rows = " \\\n".join(_REGISTRY_ROW.format(**_fields(v)) for v in chosen)
    compiled = {v.id for v in chosen}
    fallback = " \\\n".join(f"  WAVETUNE_FALLBACK({dtype}, {layout}, {max_m}, {v.id})"
                             for dtype, layout, max_m, v in space.fallback if v.id in compiled)
    space_rows = " \\\n".join(_REGISTRY_ROW.format(**_fields(v)) for v in space.variants)
    heuristic_names = ", \\\n".join(f'  "{v.name}"' for v in space.heuristic_set())
    modes = dict.fromkeys(v.scales for v in space.variants)
    scales_hashes = ", \\\n".join(f'  {{"{m}", "{space.scales_hash(m)}"}}' for m in modes)
    return REGISTRY_TEMPLATE.format(source=space.path.name, prefix=space.generation.macro_prefix,
                                    hash=space.hash, kernel_set=kernel_set, rows=rows, fallback=fallback,
                                    space_rows=space_rows, heuristic_names=heuristic_names,
                                    scales_hashes=scales_hashes)


VARIANT_LIBRARY_TEMPLATE = """\
// A variant library (csrc/include/wavetune/variant_library.h): the variants above, for loading at run time.
#include "variant_library_abi.h"

#define WAVETUNE_LIBRARY_VARIANTS(WAVETUNE_VARIANT) \\
{rows}

WAVETUNE_DEFINE_VARIANT_LIBRARY("{family}", "{hash}", WAVETUNE_LIBRARY_VARIANTS)
"""


def render_variant_library(space: ConfigSpace, chosen: list[Variant]) -> str:
    """The source of a shared object holding ``chosen`` (compiled at run time, python/wavetune/jit.py): each
    variant's source as the build generates it, then the entry point that lists them."""
    sources = "\n".join(render_variant(v, space.path.name) for v in chosen)
    rows = " \\\n".join(_REGISTRY_ROW.format(**_fields(v)) for v in chosen)
    return sources + "\n" + VARIANT_LIBRARY_TEMPLATE.format(rows=rows, family=space.family, hash=space.hash)


MODEL_TEMPLATE = """\
// Generated by python/wavetune/codegen/config_space.py from {source}'s [model] table. Do not edit.
// The {family} family's built-in model: each constant with the reason its file gives.
#pragma once

#include <array>
#include <cstdint>

namespace wavetune {{

struct {struct} {{
{fields}

  // visit(name, field) on each field in the file's order: how the bindings read and override them by name.
  template <class Self, class Visit>
  static void visit_fields(Self& self, Visit&& visit) {{
{visits}
  }}
}};

}}  // namespace wavetune
"""


def model_header(space: ConfigSpace) -> str:
    """The file name of the family's generated model struct."""
    return f"{space.family}_model_data.h"


def model_struct(space: ConfigSpace) -> str:
    """The C++ name of the family's model struct: the family's name in CamelCase, then ``Model``."""
    return "".join(part.capitalize() for part in space.family.split("_")) + "Model"


def render_model(space: ConfigSpace) -> str:
    fields = "\n".join(f"  // {v.why}\n  {v.cpp_type} {v.name} = {v.cpp_value};" for v in space.model)
    visits = "\n".join(f'    visit("{v.name}", self.{v.name});' for v in space.model)
    return MODEL_TEMPLATE.format(source=space.path.name, family=space.family, struct=model_struct(space),
                                 fields=fields, visits=visits)


REGISTRATION_TEMPLATE = """\
// Generated by python/wavetune/codegen/config_space.py from {source}'s [family] table. Do not edit.
// The {family} family's compiled variants ({registry} and its built-in entries), registered with the kernel
// library (family.h's KernelFamily), where variant libraries add to them.
#include <cstdint>
#include <vector>

#include "{ops_header}"
#include "registered_variants.h"
#include "{registry}"
#include "{public_header}"

namespace wavetune {{
namespace detail {{

#define WAVETUNE_DECLARE_OPS(ID, NAME, ...) extern const {ops} variant_##NAME;
{prefix}_VARIANT_LIST(WAVETUNE_DECLARE_OPS)
#undef WAVETUNE_DECLARE_OPS

namespace {{
VariantRegistry<{ops}>& registry() {{
  static VariantRegistry<{ops}> list({{{prefix}_VARIANT_LIST(WAVETUNE_REGISTRY_ENTRY)}},
                                     {{{entries}}});
  return list;
}}
}}  // namespace

const {ops}* {variant_ops}(int32_t id) {{ return registry().ops(id); }}

}}  // namespace detail

const std::vector<VariantInfo>& {variants}() {{ return detail::registry().infos(); }}
{find_variant}
const char* {config_space_hash}() {{ return {prefix}_CONFIG_SPACE_HASH; }}

namespace {{
const detail::RegisteredVariants<detail::{ops}, &detail::registry> registration("{family}", &{config_space_hash});
}}  // namespace

}}  // namespace wavetune
"""

UNAVAILABLE_TEMPLATE = """\
// Generated by python/wavetune/codegen/config_space.py from {source}'s [family] table. Do not edit.
// The {family} family's launch functions in a build without a CUDA compiler: each says why it cannot run.
#include "{public_header}"
#include "unavailable.h"
#include "wavetune/errors.h"

namespace wavetune {{
{stubs}
}}  // namespace wavetune
"""

BINDINGS_TEMPLATE = """\
// Generated by python/wavetune/codegen/config_space.py from {source}'s [family] table. Do not edit.
// Registers the {family} family's bindings (FamilyBindings): its compiled variants and config space hash, then
// the family's own functions (bind_{family} in its bindings.cpp).
#include "bindings.h"
#include "{public_header}"

namespace wavetune::bindings {{

void bind_{family}(pybind11::module_& m, const FamilyBindings& registration);

namespace {{
void bind(pybind11::module_& m);
FamilyBindings registration("{family}", &bind);

void bind(pybind11::module_& m) {{
  m.def("{variants}", [] {{ return variant_dicts({variants}()); }}, "The {family} family's compiled variants.");
{hash_binding}  bind_{family}(m, registration);
}}
}}  // namespace

}}  // namespace wavetune::bindings
"""


def family_sources(space: ConfigSpace) -> dict[str, str]:
    """The file names of the family's generated C++ (FamilyCode): its registration (the kernel library), its
    launch stubs (a kernel library without CUDA) and its bindings (the Python module)."""
    return {kind: f"{space.family}_{kind}.cpp" for kind in ("registration", "unavailable", "bindings")}


def render_family_code(space: ConfigSpace, with_kernels: bool) -> dict[str, str]:
    """The family's generated C++ by file name; a build without kernels registers no kernel_entries."""
    family, code = space.generation, space.generation.code
    entries = [*code.entries, *(code.kernel_entries if with_kernels else ())]
    names = {"source": space.path.name, "family": space.family, "registry": family.registry,
             "prefix": family.macro_prefix, **dataclasses.asdict(code)}
    find_variant = (f"const VariantInfo* {code.find_variant}(int32_t id) {{ return detail::registry().info(id); }}"
                    if code.find_variant else "")
    hash_binding = "" if "::" in code.config_space_hash else (
        f'  m.def("{code.config_space_hash}", &{code.config_space_hash},\n        "The hash of the {space.family} '
        f'config space this build was compiled from (its tables are checked against it).");\n')
    files = family_sources(space)
    return {
        files["registration"]: REGISTRATION_TEMPLATE.format(**{**names, "find_variant": find_variant,
                                                                "entries": ", ".join(f"{e}()" for e in entries)}),
        files["unavailable"]: UNAVAILABLE_TEMPLATE.format(**{**names, "stubs": "".join(
            f"\n{stub} {{ WAVETUNE_FAIL(detail::kNoKernels); }}\n" for stub in code.stubs)}),
        files["bindings"]: BINDINGS_TEMPLATE.format(**{**names, "hash_binding": hash_binding}),
    }


def write_if_changed(path: Path, text: str) -> bool:
    """Rewrite only on change, so an unchanged variant is not recompiled after a reconfigure."""
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return True


def generate(space: ConfigSpace, out_dir: Path, kernel_set: str, name_filter: str, with_kernels: bool,
             tables_dir: Path | None = None, allow_empty: bool = False) -> list[Path]:
    """Write the family's registry list, its model struct (if it has a [model] table) and (with kernels) one .cu
    per chosen variant; return the .cu paths."""
    family = space.generation
    chosen = space.select(kernel_set, name_filter, tables_dir, allow_empty) if with_kernels else []
    write_if_changed(out_dir / family.registry, render_registry(space, chosen, kernel_set if with_kernels else "none"))
    for name, text in render_family_code(space, with_kernels).items():
        write_if_changed(out_dir / name, text)
    if space.model:
        write_if_changed(out_dir / model_header(space), render_model(space))
    sources_dir = out_dir / family.sources_dir
    sources = []
    for v in chosen:
        path = sources_dir / f"{v.name}.cu"
        write_if_changed(path, render_variant(v, space.path.name))
        sources.append(path)
    wanted = set(sources)
    for stale in sources_dir.glob("*.cu") if sources_dir.exists() else []:
        if stale not in wanted:
            stale.unlink()
    return sources


FAMILIES_LIST = "families.inc"  # the generated families, for tools that take any of them
FAMILY_SOURCES_LIST = "family_sources.cmake"  # the families' generated C++ (family_sources), for the build


def render_family_list(spaces: list[ConfigSpace]) -> str:
    """X-macros over every generated family: its name, config-space hash and compiled variant list, and its
    name, hash, whole config space, built-in choice's variant names and hash per scales mode (the macros of its
    registry list, which it includes)."""
    includes = "".join(f'#include "{s.generation.registry}"\n' for s in spaces)
    rows = "".join(f'  WAVETUNE_FAMILY("{s.family}", {s.generation.macro_prefix}_CONFIG_SPACE_HASH, '
                   f'{s.generation.macro_prefix}_VARIANT_LIST) \\\n' for s in spaces)
    space_rows = "".join(f'  WAVETUNE_SPACE("{s.family}", {s.generation.macro_prefix}_CONFIG_SPACE_HASH, '
                         f'{s.generation.macro_prefix}_SPACE_VARIANT_LIST, '
                         f'{s.generation.macro_prefix}_HEURISTIC_VARIANT_NAMES, '
                         f'{s.generation.macro_prefix}_SCALES_HASHES) \\\n' for s in spaces)
    return (f"// Generated by python/wavetune/codegen/config_space.py. Do not edit.\n{includes}\n"
            f"#define WAVETUNE_GENERATED_FAMILIES(WAVETUNE_FAMILY) \\\n{rows}\n"
            f"#define WAVETUNE_GENERATED_SPACES(WAVETUNE_SPACE) \\\n{space_rows}\n")


def render_family_sources_list(spaces: list[ConfigSpace], out_dir: Path) -> str:
    """CMake lists of every family's generated C++ by kind: WAVETUNE_GENERATED_REGISTRATION (the kernel library),
    WAVETUNE_GENERATED_UNAVAILABLE (the kernel library without CUDA), WAVETUNE_GENERATED_BINDINGS (the module)."""
    kinds = ("registration", "unavailable", "bindings")
    lists = {kind: ";".join(str(out_dir.resolve() / family_sources(s)[kind]) for s in spaces) for kind in kinds}
    return ("# Generated by python/wavetune/codegen/config_space.py. Do not edit.\n"
            + "".join(f'set(WAVETUNE_GENERATED_{kind.upper()} "{paths}")\n' for kind, paths in lists.items()))


def generate_families(spaces: list[ConfigSpace], out_dir: Path, kernel_set: str, name_filter: str,
                      with_kernels: bool, tables_dir: Path | None = None) -> list[Path]:
    """``generate`` for every family's file: a kernel set or filter may select from some families only."""
    if len({s.family for s in spaces}) != len(spaces):
        raise ConfigError(f"one config-space file per kernel family, got families {[s.family for s in spaces]}")
    write_if_changed(out_dir / FAMILIES_LIST, render_family_list(spaces))
    write_if_changed(out_dir / FAMILY_SOURCES_LIST, render_family_sources_list(spaces, out_dir))
    if len(spaces) == 1:
        return generate(spaces[0], out_dir, kernel_set, name_filter, with_kernels, tables_dir)
    known = [*BUILT_IN_SETS, *dict.fromkeys(name for s in spaces for name in s.kernel_sets)]
    if kernel_set not in known:
        raise ConfigError(f"unknown kernel set {kernel_set!r} (known: {', '.join(known)})")
    sources = [p for s in spaces for p in generate(s, out_dir, kernel_set, name_filter, with_kernels, tables_dir, True)]
    if with_kernels and not sources and kernel_set != BUILTIN_SET:
        raise ConfigError(f"kernel set {kernel_set!r} with filter {name_filter!r} selects no variant in "
                          f"{', '.join(str(s.path) for s in spaces)}")
    return sources


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate wavetune's CUTLASS variant sources.")
    parser.add_argument("config", type=Path, nargs="+", help="config-space TOML files, one per kernel family")
    parser.add_argument("out_dir", type=Path, help="directory for generated sources")
    parser.add_argument("--kernel-set", default="full")
    parser.add_argument("--tables-dir", type=Path, help="shipped tables, for the `tables` kernel set")
    parser.add_argument("--filter", default="", help="comma-separated globs over variant names")
    parser.add_argument("--no-kernels", action="store_true", help="registry only (no CUDA compiler)")
    args = parser.parse_args(argv)
    try:
        sources = generate_families([load(path) for path in args.config], args.out_dir, args.kernel_set, args.filter,
                                    not args.no_kernels, args.tables_dir)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    # CMake reads this list of sources from stdout.
    print(";".join(str(p) for p in sources))
    return 0


if __name__ == "__main__":
    sys.exit(main())

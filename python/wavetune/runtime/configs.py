"""Compiled variants and launches as Python values: ``KernelConfig`` (every family's variant listing),
``ConfigSpace`` (a family's config space as the build lists it, compiled or not), ``LaunchConfig`` (a dense GEMM
launch with its run-time parameters), and resolving a family's ``config`` argument to a variant id."""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Iterable, Mapping

from .native import _C


LIBRARY_SCHEDULES = ("cublas", "cudnn", "paged")


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    """A compiled GEMM variant: its compile-time ("macro") parameters."""

    id: int
    name: str
    dtype: str  # "bf16" | "fp16"
    b_layout: str  # "col" (B[K,N] column-major, an nn.Linear weight's .T) | "row"
    swap_ab: bool  # computes D^T = B^T A^T: tile M runs over N, tile N over M (tokens)
    # "cooperative" | "pingpong" | "cublas" (cuBLAS picks its kernel per problem) | "decode" | "cudnn" and
    # "paged" (attention: cuDNN's attention, the paged decode kernel; each picks its own kernel per problem)
    schedule: str
    tile: tuple[int, int, int]  # CTA tile M, N, K (cublas, cudnn, paged: nominal, for the model's mapping)
    cluster: tuple[int, int]  # thread-block cluster M, N
    scheduler: str  # "persistent" | "stream_k" | "data_parallel" (one CTA per tile and split: decode)
    # What its code is built for (docs/kernels.md, "Architectures"): "sm90a" (compute capability 9.0 only),
    # "sm80" or "sm89" (that compute capability and later), "any" (a library candidate: wherever its library runs)
    arch: str

    def runs_on(self, compute_capability: int) -> bool:
        """Whether it runs on a GPU of that compute capability (major * 10 + minor)."""
        return _C.runs_on(self.arch, compute_capability)

    @property
    def from_library(self) -> bool:
        """The cuBLAS, cuDNN and paged candidates: their kernel, tile and tile order are their own choice, so
        run-time options (raster, swizzle) do not apply and their tile is nominal."""
        return self.schedule in LIBRARY_SCHEDULES

    @property
    def built_in(self) -> bool:
        """The library candidates and the decode GEMM: in every build, never compiled on demand."""
        return self.schedule == "decode" or self.from_library

    @property
    def fixed_tile_order(self) -> bool:
        """Raster order and swizzle do not apply: cuBLAS orders its own tiles, the decode GEMM's CTAs are
        scheduled by the hardware."""
        return self.schedule in ("cublas", "decode")


# CTAs per SM of multistage variants, by name, as the measurement log being fitted recorded them on its GPU
# (``record_ctas``). NOTES: process-wide, as the current GPU is: a tuning run fits one GPU model's log, and the
# mappings that read a variant's capacity (its family's coordinates) take no log.
RECORDED_CTAS: dict[str, int] = {}


def record_ctas(ctas: Mapping[str, int]) -> None:
    """Take the CTAs per SM of variants (by name) that a measurement log recorded: ``resident_ctas`` gives them
    without reading the kernel, so a table is refitted from the log on a machine without its GPU."""
    RECORDED_CTAS.update({name: int(n) for name, n in ctas.items()})


@functools.cache
def kernel_ctas(variant: KernelConfig, read: Callable[[int], int]) -> int:
    """CTAs of a variant resident per SM of the current GPU, read from its kernel by ``read(variant.id)``."""
    try:
        return read(variant.id)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"the CTAs per SM of {variant.name} are neither in the measurement log nor readable from "
                         f"its kernel on a GPU: re-measure on the GPU the table is for, which records them in the "
                         f"log ({exc})") from None


def resident_ctas(variant: KernelConfig, read: Callable[[int], int]) -> int:
    """CTAs of a variant resident per SM of the GPU being tuned, which a wave of it holds (the mapping's capacity, a
    table's ``occupancy`` record): a multistage kernel's from its registers and shared memory, as the measurement
    log recorded it (``record_ctas``), else read from the kernel on the current GPU by ``read`` (its family's
    binding, ``_C.gemm_ctas_per_sm`` or ``_C.grouped_ctas_per_sm``); 1 for the others (a Hopper kernel's stages
    fill the SM's shared memory, a library candidate is modeled as one)."""
    if variant.schedule != "multistage":
        return 1
    ctas = RECORDED_CTAS.get(variant.name)
    if ctas is None:
        ctas = kernel_ctas(variant, read)
    if ctas < 1:
        raise ValueError(f"{variant.name} does not fit an SM of this GPU (no CTA of it is resident): leave it out of "
                         f"the tuned build (WAVETUNE_KERNEL_FILTER)")
    return ctas


def multistage_ctas(variants: Iterable[KernelConfig], ctas_per_sm: Callable[[KernelConfig], int]) -> dict[str, int]:
    """Variant name -> ``ctas_per_sm(variant)`` of the multistage ``variants`` (a log's ``ctas_per_sm`` record)."""
    return {v.name: ctas_per_sm(v) for v in variants if v.schedule == "multistage"}


def runnable(configs) -> list[KernelConfig]:
    """Those of ``configs`` that run on the current GPU as the kernels serve it (WAVETUNE_ARCH's architecture where
    set); all of them on a host without a GPU and without WAVETUNE_ARCH. What the families' listings give, so that
    the tuner and the choices see only what can run."""
    served = _C.served_compute_capability()
    return [c for c in configs if served == 0 or c.runs_on(served)]


@dataclasses.dataclass(frozen=True)
class ConfigSpace:
    """A family's config space as the build lists it (its generator's output, compiled into the native module):
    every variant, compiled into this build or not, and the names of those the family's built-in choice takes."""

    hash: str
    variants: tuple[KernelConfig, ...]
    heuristic_set: frozenset[str]


@functools.cache
def config_space(family: str) -> ConfigSpace | None:
    """The config space the family's variants are generated from; None for a family with built-in variants only."""
    space = _C.config_space(family)
    if space is None:
        return None
    return ConfigSpace(space["hash"], tuple(KernelConfig(**v) for v in space["variants"]),
                       frozenset(space["heuristic_set"]))


def code(names: list[str], value: str, what: str) -> int:
    """The position of ``value`` in a native vocabulary (``_C.DECOMPOSITIONS``, ...); a ValueError naming it."""
    if value not in names:
        raise ValueError(f"{what}={value!r} is not one of {names}")
    return names.index(value)


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
        code(_C.DECOMPOSITIONS, self.decomposition, "decomposition")
        code(_C.RASTERS, self.raster, "raster")
        if not isinstance(self.splits, int) or isinstance(self.splits, bool) or self.splits < 1:
            raise ValueError(f"splits={self.splits!r}: a positive integer (the split-K factor)")
        if self.splits > 1 and self.decomposition != "split_k":
            raise ValueError(f"splits={self.splits} needs decomposition='split_k', got {self.decomposition!r}")
        if self.max_swizzle not in (1, 2, 4, 8):
            raise ValueError(f"max_swizzle={self.max_swizzle!r} is not one of 1, 2, 4, 8")


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

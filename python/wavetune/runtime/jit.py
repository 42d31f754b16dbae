"""Variants compiled when needed (docs/kernels.md): a variant outside the installed kernel set is compiled
with nvcc into the per-user cache (``kernel_cache``), one shared object per variant, and added to the kernel
library at run time; the family's loaded tables are then bound again so that they can choose it.

A loaded table's missing variants (its working set minus what is compiled) compile in a background thread
while its calls run the best compiled candidate; ``python -m wavetune build`` compiles ahead of time.
``WAVETUNE_JIT=0`` turns the background compiles off (variants the cache already holds still load).

NOTES: which variants are missing comes from the native module (the config spaces it was generated from,
``configs.config_space``); only a compile runs the code generator, in a process of its own
(``wavetune.codegen.variant_library``), so that run time never imports it. ``runtime.tables`` calls this module
and hears of its compiles through ``on``; this module never imports it.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import dataclasses
import functools
import hashlib
import importlib.util
import logging
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Callable

from .. import families
from .configs import ConfigSpace, KernelConfig, config_space, runnable
from .kernel_cache import CacheError, CacheKey, KernelCache
from .native import _C

JIT_ENV = "WAVETUNE_JIT"
PACKAGE_DIR = Path(__file__).resolve().parents[1]
# Installed by CMakeLists.txt: the shared runtime headers and each family's folder (templates, private
# headers), the config spaces, and the CUTLASS headers the build compiled with.
KERNEL_SOURCES = PACKAGE_DIR / "data" / "csrc"
CONFIG_SPACES = PACKAGE_DIR / "data" / "cutlass_configs"
GENERATOR = PACKAGE_DIR / "codegen"  # the code generator's package: its sources are part of a variant's cache key
PACKAGED_CUTLASS = PACKAGE_DIR / "data" / "cutlass"
INCLUDE_DIR = PACKAGE_DIR / "include"
LIBRARY_DIR = PACKAGE_DIR / "lib"
SUPPORTED_CUDA = (12, 13)

log = logging.getLogger("wavetune")


class JitUnavailable(RuntimeError):
    """Variants cannot be compiled here; the message says what is missing."""


class CompileError(RuntimeError):
    """nvcc failed on a variant; the message holds the end of its output."""


@dataclasses.dataclass(frozen=True)
class Toolchain:
    nvcc: str
    cuda_version: str  # "13.0"
    cutlass_dir: Path  # CUTLASS's include/, tools/util/include/ and examples/ (the package's own copy)
    cutlass_version: str  # "4.2.0"


@dataclasses.dataclass(frozen=True)
class Built:
    """A variant compiled into the cache (or found there) and registered."""

    name: str
    library: Path
    compiled: bool  # False: taken from the cache


@dataclasses.dataclass(frozen=True)
class GpuArch:
    """The GPU variants are compiled for: its compute capability (major * 10 + minor) and the one its kernels
    serve it as (``served``: WAVETUNE_ARCH's, lower, where set; else the same)."""

    own: int
    served: int

    @classmethod
    def named(cls, name: str) -> "GpuArch":
        """A GPU of the architecture ``name`` ("sm86", "sm_86", "sm90a"): ``python -m wavetune build --arch``."""
        cc = _C.parse_compute_capability(name.replace("_", ""))  # a ValueError naming the accepted form
        return cls(cc, cc)

    def runs(self, variant: KernelConfig) -> bool:
        """Whether the variant runs here: on the architecture served, and on the GPU's own (sm90a code runs on
        compute capability 9.0 alone, whatever the GPU is served as)."""
        return variant.runs_on(self.served) and variant.runs_on(self.own)


@dataclasses.dataclass(frozen=True)
class Target:
    """What nvcc compiles a variant's code for: the compute capability its code is written against (the virtual
    architecture, its ``__CUDA_ARCH__``), the one its machine code runs on (the real architecture), and whether
    both are the architecture-specific target ("sm_90a": wgmma, setmaxnreg)."""

    virtual: int
    real: int
    specific: bool = False

    @property
    def name(self) -> str:
        """In the cache key: "sm_86", "sm_90a"; "sm_90-compute_80" where a GPU is served as an older one."""
        suffix = "a" if self.specific else ""
        return f"sm_{self.real}{suffix}" + ("" if self.virtual == self.real else f"-compute_{self.virtual}")

    @property
    def gencode(self) -> str:
        suffix = "a" if self.specific else ""
        return f"--generate-code=arch=compute_{self.virtual}{suffix},code=[sm_{self.real}{suffix}]"


def current_gpu_arch() -> GpuArch:
    """The current CUDA device's architecture; JitUnavailable on a host without a usable one."""
    if reason := _C.no_device_reason():
        raise JitUnavailable(f"no CUDA GPU to compile for ({reason}): python -m wavetune build --arch sm86 "
                             "(sm80, sm89, sm90, sm100, ...) names the architecture to compile for")
    major, minor = _C.device_properties()["compute_capability"]
    return GpuArch(major * 10 + minor, _C.served_compute_capability())


def compile_target(variant: KernelConfig, gpu: GpuArch) -> Target:
    """A variant's target on ``gpu``: an architecture-specific variant (sm90a) its own architecture, any other
    the GPU's own machine code from the served architecture's virtual one (so that a GPU served as an older one
    runs that one's code paths). A ValueError for a variant that does not run there: nothing is compiled."""
    if not gpu.runs(variant):
        as_served = "" if gpu.served == gpu.own else f" served as sm{gpu.served} (WAVETUNE_ARCH)"
        raise ValueError(f"variant {variant.name} is built for {variant.arch} and does not run on a GPU of compute "
                         f"capability {gpu.own // 10}.{gpu.own % 10}{as_served}: it is not compiled for it")
    if variant.arch.endswith("a"):  # architecture-specific: runs_on took its own architecture alone
        cc = _C.parse_compute_capability(variant.arch)
        return Target(cc, cc, specific=True)
    return Target(gpu.served, gpu.own)


def jit_enabled() -> bool:
    """Whether loaded tables' missing variants compile in the background (``WAVETUNE_JIT``, default on)."""
    return os.environ.get(JIT_ENV, "1") != "0"


def find_nvcc() -> str | None:
    """``$CUDACXX``, else ``$CUDA_HOME/bin/nvcc``, else nvcc on PATH (the build's order, CMake's)."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidates = [os.environ.get("CUDACXX"), home and str(Path(home) / "bin" / "nvcc"), shutil.which("nvcc")]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


@functools.cache
def toolchain() -> Toolchain:
    """nvcc and the CUTLASS headers a compile uses; JitUnavailable naming what is missing."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise JitUnavailable("no nvcc (a CUDA 12.x or 13.x toolkit: put nvcc on PATH or set CUDACXX)")
    try:
        output = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise JitUnavailable(f"{nvcc} --version failed ({exc})") from exc
    release = re.search(r"release (\d+)\.(\d+)", output)
    if release is None or int(release.group(1)) not in SUPPORTED_CUDA:
        raise JitUnavailable(f"{nvcc} is not the nvcc of a CUDA 12.x or 13.x toolkit ({output.strip()[-60:]!r})")
    cutlass = cutlass_dir()
    if cutlass is None:
        raise JitUnavailable(f"no CUTLASS headers: not in {PACKAGED_CUTLASS} (reinstall wavetune) nor an "
                             "nvidia-cutlass package (pip install nvidia-cutlass==4.2.0.0)")
    version = (cutlass / "include" / "cutlass" / "version.h").read_text()
    parts = [re.search(rf"#define CUTLASS_{part} (\d+)", version).group(1) for part in ("MAJOR", "MINOR", "PATCH")]
    return Toolchain(nvcc, f"{release.group(1)}.{release.group(2)}", cutlass, ".".join(parts))


def cutlass_dir() -> Path | None:
    """The CUTLASS headers the build compiled with (installed with the package), else those of an installed
    nvidia-cutlass package, else None."""
    spec = importlib.util.find_spec("cutlass_library")
    package = Path(spec.submodule_search_locations[0]) / "source" if spec else None
    return next((d for d in (PACKAGED_CUTLASS, package) if d and (d / "include" / "cutlass" / "version.h").exists()),
                None)


def unavailable_reason() -> str | None:
    """Why no variant can be compiled here, or None when they can."""
    if not _C.build_info()["kernels_compiled"]:
        return "this wavetune build has no GPU kernels (it was built without nvcc)"
    if not KERNEL_SOURCES.is_dir() or not CONFIG_SPACES.is_dir():
        return f"the kernel sources are not installed with this package (no {KERNEL_SOURCES})"
    try:
        toolchain()
    except JitUnavailable as exc:
        return str(exc)
    return None


def check_family(family: str) -> str:
    return families.get(family).name  # an unknown family: a ValueError naming the known ones


def compiled_names(family: str) -> set[str]:
    return {c.name for c in families.get(family).list_configs()}


def missing_variants(family: str, names: set[str] | frozenset[str] | None = None,
                     gpu: GpuArch | None = None) -> list[KernelConfig]:
    """The family's variants not compiled yet that would run on ``gpu`` (default: the current GPU as the kernels
    serve it), of ``names`` only where given; other names, such as cuBLAS's, are not variants of the config space
    and are left out."""
    space = config_space(family)
    if space is None:
        return []  # built-in variants only: every one is compiled
    compiled = compiled_names(family)
    candidates = runnable(space.variants) if gpu is None else [v for v in space.variants if gpu.runs(v)]
    return [v for v in candidates if v.name not in compiled and (names is None or v.name in names)]


def working_set(table: Path, family: str, gpu: GpuArch | None = None) -> list[KernelConfig]:
    """The variants a table's configs name that are not compiled yet (and run on ``gpu``, as missing_variants).
    The table is read by the loader ``load_table`` uses: one it refuses raises its ValueError."""
    return missing_variants(family, set(_C.Selector(str(table), family).variant_names()), gpu)


def build_requests(table: Path | None, family: str | None, everything: bool,
                   gpu: GpuArch | None = None) -> list[tuple[str, list]]:
    """(family, variants not compiled yet that run on ``gpu``) for ``python -m wavetune build``: a table's working
    set, a family's variants, or every family's. A table the loader refuses is refused here, with its message,
    before anything compiles."""
    if table is not None:
        family = check_family(_C.table_family(str(table)))  # ValueError naming the file if it is not a table
        return [(family, working_set(table, family, gpu))]
    names = families.names() if everything else [check_family(family)]
    return [(f, missing_variants(f, gpu=gpu)) for f in names]


@functools.cache
def sources_digest() -> str:
    """Of everything a variant's object is compiled from besides CUTLASS: the templates, the headers and the
    code generator."""
    digest = hashlib.sha256()
    sources = [p for p in KERNEL_SOURCES.rglob("*") if p.is_file()]
    for path in sorted([*sources, *(INCLUDE_DIR / "wavetune").iterdir(), *GENERATOR.glob("*.py")]):
        digest.update(str(path.relative_to(PACKAGE_DIR)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def abi_version() -> int:
    text = (INCLUDE_DIR / "wavetune" / "version.h").read_text()
    return int(re.search(r"#define WAVETUNE_ABI_VERSION (\d+)", text).group(1))


@functools.cache
def cache_for(family: str, target: Target) -> KernelCache:
    """The cache directory of the family's variants as this installation and toolchain compile them for
    ``target``."""
    tools, space = toolchain(), generated_space(family)
    return KernelCache(CacheKey(family, space.hash, target.name, tools.cuda_version, tools.cutlass_version,
                                abi_version(), sources_digest()))


def generated_space(family: str) -> ConfigSpace:
    """The family's config space; JitUnavailable for a family with built-in variants only (nothing to compile)."""
    space = config_space(check_family(family))
    if space is None:
        raise JitUnavailable(f"the {family} family has built-in variants only: none is compiled on demand")
    return space


def source_dirs() -> list[Path]:
    """The include directories of the installed kernel sources: the shared runtime and every family's folder
    (the build's, CMakeLists.txt)."""
    return [KERNEL_SOURCES / "runtime", *sorted(p for p in (KERNEL_SOURCES / "families").iterdir() if p.is_dir())]


def compile_command(tools: Toolchain, source: Path, output: Path, target: Target) -> list[str]:
    """nvcc with the build's flags (CMakeLists.txt: Release, hidden symbols) for ``target``, linked as a shared
    object against the kernel library the process has loaded."""
    cutlass = tools.cutlass_dir
    return [
        tools.nvcc, "-forward-unknown-to-host-compiler", "-O3", "-DNDEBUG", "-std=c++17", target.gencode,
        "-Xcompiler=-fPIC", "-Xcompiler=-fvisibility=hidden",
        "--expt-relaxed-constexpr", f"-I{INCLUDE_DIR}", *(f"-I{d}" for d in source_dirs()),
        "-isystem", str(cutlass / "include"),
        "-isystem", str(cutlass / "tools" / "util" / "include"), "-isystem", str(cutlass / "examples"),
        "-shared", "-x", "cu", str(source), "-o", str(output), f"-L{LIBRARY_DIR}",
        f"-l:libwavetune_kernels.so.{abi_version()}", f"-Xlinker=-rpath,{LIBRARY_DIR}",
        # NOTES: as the kernel library: a static C++ runtime stays private (CMakeLists.txt says why).
        "-Xlinker=--exclude-libs,ALL",
    ]


# The compile steps' processes running now (the code generator, nvcc), ended when the interpreter exits (a
# compile cut short is redone later).
_running: set[subprocess.Popen] = set()
_exiting = threading.Event()


@atexit.register
def stop_compiles() -> None:
    _exiting.set()
    for process in list(_running):
        process.kill()


def run_step(command: list[str], what: str, env: dict | None = None) -> None:
    """Run one step of a compile (stopped as the interpreter exits); CompileError with the end of its output."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    _running.add(process)
    try:
        output, _ = process.communicate()
    finally:
        _running.discard(process)
    if process.returncode != 0:
        raise CompileError(f"{what} failed (status {process.returncode}):\n{output[-4000:]}")


def generate_source(family: str, names: list[str], source: Path) -> None:
    """Write the variant library source of the family's variants ``names`` to ``source``: the code generator, run
    in a process of its own, reads the installed config space and checks it is the one the build was compiled
    from."""
    space_file = CONFIG_SPACES / families.get(family).config_space
    command = [sys.executable, "-m", "wavetune.codegen.variant_library", str(space_file), generated_space(family).hash,
               str(source), *names]
    path = os.pathsep.join(filter(None, [str(PACKAGE_DIR.parent), os.environ.get("PYTHONPATH")]))
    run_step(command, f"generating the source of {', '.join(names)}", {**os.environ, "PYTHONPATH": path})


def compiler_of(family: str, variant: KernelConfig, cache: KernelCache, target: Target) -> Callable[[Path], dict]:
    """``compile(output)`` for ``KernelCache.load``: the variant's library source, written beside the entry,
    compiled for ``target`` to ``output``."""
    def compile(output: Path) -> dict:
        source = cache.dir / f"{variant.name}.cu"
        generate_source(family, [variant.name], source)
        command = compile_command(toolchain(), source, output, target)
        run_step(command, f"nvcc on {variant.name}")
        return {"command": command, "source_sha256": hashlib.sha256(source.read_bytes()).hexdigest()}

    return compile


def register(library: Path) -> tuple:
    """Add a variant library's variants to the kernel library (ValueError when it does not load)."""
    return _C.load_variant_library(str(library))


def build(family: str, variants: list[KernelConfig], *, jobs: int | None = None, progress: bool = False,
          gpu: GpuArch | None = None) -> list[Built]:
    """Compile ``variants`` of ``family`` for ``gpu`` (default: the current GPU) into the cache where it does not
    hold them yet, ``jobs`` nvcc at once (default: the cores), register them, and bind the family's loaded tables
    again. A ValueError before any compile where one does not run on ``gpu``; CompileError after the others are
    done where some failed."""
    gpu = gpu or current_gpu_arch()
    targets = {v.name: compile_target(v, gpu) for v in variants}
    built, failed = [], []
    with concurrent.futures.ThreadPoolExecutor(jobs or os.cpu_count() or 1) as pool:
        futures = {pool.submit(build_one, family, v, targets[v.name]): v for v in variants}
        for future in progress_bar(concurrent.futures.as_completed(futures), len(futures), family, progress):
            try:
                built.append(future.result())
            except (CompileError, ValueError, OSError) as exc:
                failed.append(f"{futures[future].name}: {exc}")
    if built:
        notify("registered", family, "")
    if failed:
        raise CompileError(f"{len(failed)} of {len(variants)} {family} variants failed to compile:\n"
                           + "\n".join(failed))
    return sorted(built, key=lambda b: b.name)


def build_one(family: str, variant: KernelConfig, target: Target) -> Built:
    """One variant compiled for ``target`` into the cache where it does not hold it yet, and registered."""
    cache = cache_for(family, target)
    compiled = cache.load(variant.name, compiler_of(family, variant, cache, target), register)[1]
    return Built(variant.name, cache.library(variant.name), compiled)


def progress_bar(items, total: int, family: str, shown: bool):
    if not shown:
        return items
    from tqdm import tqdm

    return tqdm(items, total=total, desc=f"compiling {family} variants", unit="variant")


def load_cached(family: str, variants: list[KernelConfig], gpu: GpuArch) -> list[KernelConfig]:
    """Register the variants the cache holds verified for ``gpu``; returns those it does not (nothing is
    compiled)."""
    rest = [v for v in variants
            if cache_for(family, compile_target(v, gpu)).load_cached(v.name, register) is None]
    if len(rest) < len(variants):
        notify("registered", family, "")
    return rest


# Per event, what is called with the family and the scales mode of the tables the variants serve: "queued" as a
# batch of its variants is queued for a background compile, "ended" as that batch is done (or failed),
# "registered" after variants were registered (scales "": any).
_listeners: dict[str, list[Callable[[str, str], None]]] = {"queued": [], "ended": [], "registered": []}


def on(event: str, callback: Callable[[str, str], None]) -> None:
    """Call ``callback(family, scales)`` on ``event`` ("queued", "ended" or "registered") from now on."""
    _listeners[event].append(callback)


def notify(event: str, family: str, scales: str) -> None:
    for callback in _listeners[event]:
        callback(family, scales)


_background: queue.Queue | None = None
_queued: set[tuple[str, str]] = set()
_warned: set[str] = set()


def prepare_table(table: Path, family: str, scales: str = "") -> bool:
    """As a table of ``family`` (and of a scales mode) is loaded: register the variants of its working set that the cache holds, and
    queue the others for a background compile (unless WAVETUNE_JIT=0). True when variants were registered,
    so the caller binds the table again. Where they cannot be compiled, a one-time warning says why."""
    if not _C.build_info()["kernels_compiled"]:
        return False  # launches say why nothing runs
    missing = working_set(table, family)
    return prepare(family, missing, unavailable_reason() if missing else None, f"the {family} table {table} names",
                   scales)


def newest_architecture(variants: list[KernelConfig], gpu: GpuArch) -> list[KernelConfig]:
    """Those of ``variants`` built for the newest architecture that ``gpu`` runs. NOTES: a built-in choice takes
    that architecture's kernels alone (grouped_default_variant: its rates are theirs), so a Hopper GPU compiles
    no Ampere-style variant for it, and an Ampere, Ada or Blackwell GPU the Ampere-style ones."""
    runnable = [v for v in variants if gpu.runs(v)]
    newest = max((_C.parse_compute_capability(v.arch) for v in runnable), default=None)
    return [v for v in runnable if _C.parse_compute_capability(v.arch) == newest]


def prepare_builtin_choice(family: str) -> bool:
    """As ``family`` starts without a table: its built-in choice's variants (its config space's fallback and
    heuristic ones, ``ConfigSpace.heuristic_set``, of the newest architecture the GPU runs), as ``prepare_table``
    does a table's working set."""
    space = config_space(family)
    if not _C.build_info()["kernels_compiled"] or space is None:
        return False
    try:
        gpu = current_gpu_arch()
    except JitUnavailable:
        return False  # no GPU: its launches say why nothing runs
    builtin = newest_architecture([v for v in space.variants if v.name in space.heuristic_set], gpu)
    missing = missing_variants(family, {v.name for v in builtin})
    return prepare(family, missing, unavailable_reason() if missing else None,
                   f"the {family} family's built-in choice takes")


def prepare(family: str, missing: list, reason: str | None, names: str, scales: str = "") -> bool:
    """Register the ``missing`` variants the cache holds and queue the others for a background compile (for the
    tables of ``scales``), unless ``reason`` says why they cannot be compiled (warned once); True when variants
    were registered."""
    rest = missing
    if reason is None and missing:
        try:
            gpu = current_gpu_arch()
        except JitUnavailable:
            return False  # no GPU: its launches say why nothing runs
        missing = rest = [v for v in missing if gpu.runs(v)]  # served as 9.0, a newer GPU runs no sm90a code
        try:
            rest = load_cached(family, missing, gpu)
        except CacheError as exc:  # no loads and no compiles: the call runs the compiled variants
            reason = str(exc)
    if reason is not None:
        count = f" ({len(missing)})" if missing else ""
        warn_once(family, f"wavetune: {names} variants that are not compiled into this build{count}, and they "
                          f"cannot be compiled here: {reason}; its choices fall back to the best compiled candidate")
        return False
    if rest and jit_enabled():
        compile_in_background(family, rest, gpu, scales)
    return len(rest) < len(missing)


def warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=3)


def compile_in_background(family: str, variants: list[KernelConfig], gpu: GpuArch, scales: str = "") -> None:
    """Queue variants for the background thread (started on first use) to compile for ``gpu``, a batch for the
    family's tables of a scales mode; each batch is registered and the family's tables bound again when it is
    done."""
    global _background
    fresh = [v for v in variants if (family, v.name) not in _queued]
    if not fresh:
        return
    _queued.update((family, v.name) for v in fresh)
    notify("queued", family, scales)
    if _background is None:
        _background = queue.Queue()
        threading.Thread(target=background_worker, args=(_background,), name="wavetune-jit", daemon=True).start()
    _background.put((family, scales, fresh, gpu))


def background_worker(jobs: queue.Queue) -> None:
    while True:
        family, scales, variants, gpu = jobs.get()
        log.info("wavetune: compiling %d %s variants in the background", len(variants), family)
        try:
            build(family, variants, gpu=gpu)
        except Exception as exc:  # noqa: BLE001 - a background failure must not end the thread; it is reported
            if not _exiting.is_set():  # else the compiles were stopped as the process exits
                log.warning("wavetune: background compile of %s variants failed: %s", family, exc)
        finally:
            notify("ended", family, scales)

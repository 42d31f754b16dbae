"""Variants compiled when needed (docs/kernels.md): the per-user cache (keys, ownership, integrity, locks),
the working set of a table, the build command; with nvcc, a real compile into the cache; on a GPU, a table
whose choice is compiled at run time."""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import re
import stat
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

import wavetune
from conftest import REPO, compiled_rows, gpu_skip_reason
from wavetune import __main__ as cli
from wavetune import families
from wavetune.codegen import config_space as cs
from wavetune.codegen import variant_library
from wavetune.runtime import configs, jit, kernel_cache, tables
from wavetune.runtime.jit import JIT_ENV
from wavetune.runtime.kernel_cache import CacheError, CacheKey, KernelCache
from wavetune.tuning import tablefile

KEY = CacheKey("gemm", "0123456789abcdef", "sm_90a", "13.0", "4.2.0", 3, "fedcba9876543210")


def fake_compile(content: bytes, calls: list | None = None, delay: float = 0.0):
    """A compile that writes ``content`` (and counts its calls) in place of nvcc."""
    def compile(output: Path) -> dict:
        if calls is not None:
            calls.append(output)
        time.sleep(delay)
        output.write_bytes(content)
        return {"command": ["fake"]}

    return compile


def read_back(library: Path) -> bytes:
    return library.read_bytes()


def test_the_cache_key_changes_with_each_input():
    names = {KEY.dirname}
    for field in dataclasses.fields(CacheKey):
        value = getattr(KEY, field.name)
        other = dataclasses.replace(KEY, **{field.name: value + 1 if isinstance(value, int) else value + "x"})
        names.add(other.dirname)
    assert len(names) == 1 + len(dataclasses.fields(CacheKey))


def test_the_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(kernel_cache.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kernel_cache.cache_root() == tmp_path / "xdg" / "wavetune"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert kernel_cache.cache_root() == Path.home() / ".cache" / "wavetune"
    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(tmp_path / "mine"))
    assert kernel_cache.cache_root() == tmp_path / "mine"


def test_directories_are_created_for_this_user_only(tmp_path):
    cache = KernelCache(KEY, tmp_path / "cache")
    for directory in (tmp_path / "cache", cache.dir):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert cache.dir == tmp_path / "cache" / KEY.dirname


def test_a_directory_others_can_write_is_refused(tmp_path):
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    root.chmod(0o770)
    with pytest.raises(CacheError, match=rf"{root} is writable by group or others.*chmod go-w"):
        KernelCache(KEY, root)


def test_a_directory_of_another_user_is_refused(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    monkeypatch.setattr(kernel_cache.os, "geteuid", lambda: root.stat().st_uid + 1)
    with pytest.raises(CacheError, match=rf"{root} belongs to user id .*{kernel_cache.CACHE_ENV}"):
        KernelCache(KEY, root)


@pytest.mark.parametrize("root, error", [("file", "File exists"), ("file/below", "Not a directory")])
def test_a_root_that_cannot_be_a_directory_is_a_cache_error(tmp_path, root, error):
    """Like an insecure directory (a read-only home too): a CacheError naming it, which callers warn of once."""
    (tmp_path / "file").write_text("a regular file")
    with pytest.raises(CacheError, match=rf"{tmp_path / root} cannot be used \({error}.*{kernel_cache.CACHE_ENV}"):
        KernelCache(KEY, tmp_path / root)


def test_no_home_directory_is_a_cache_error(monkeypatch):
    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv(kernel_cache.CACHE_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(kernel_cache.Path, "home", no_home)
    with pytest.raises(CacheError, match=rf"no directory \(Could not determine home.*{kernel_cache.CACHE_ENV}"):
        kernel_cache.cache_root()


def test_a_lock_that_cannot_be_made_is_a_cache_error(tmp_path):
    cache = KernelCache(KEY, tmp_path)
    (cache.dir / "v.lock").mkdir()  # where the lock file goes: it cannot be opened, as in a read-only cache
    with pytest.raises(CacheError, match=rf"{cache.dir} cannot be used"):
        cache.load_cached("v", read_back)


def test_an_unusable_cache_warns_once_and_the_table_loads_without_it(tmp_path, monkeypatch):
    """A cache root that is a regular file, even with WAVETUNE_JIT=0: one warning naming it, and load_table goes
    on with the compiled variants (it raised FileExistsError)."""
    (tmp_path / "file").write_text("a regular file")
    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(tmp_path / "file"))
    monkeypatch.setenv(JIT_ENV, "0")
    monkeypatch.setattr(jit, "_warned", set())
    monkeypatch.setattr(jit, "unavailable_reason", lambda: None)
    monkeypatch.setattr(jit, "cache_for", lambda family, target: KernelCache(KEY))
    monkeypatch.setattr(jit, "current_gpu_arch", lambda: jit.GpuArch(90, 90))
    monkeypatch.setattr(jit, "working_set", lambda table, family: list(jit.config_space("gemm").variants[:1]))
    monkeypatch.setattr(jit._C, "build_info", lambda: {"kernels_compiled": True})
    table = REPO / "tables" / "nvidia-h100-80gb-hbm3.wtt"
    with pytest.warns(UserWarning, match=rf"cannot be compiled here: wavetune's kernel cache {tmp_path / 'file'} "
                                         "cannot be used"):
        assert jit.prepare_table(table, "gemm") is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert jit.prepare_table(table, "gemm") is False  # warned once


def test_an_entry_is_compiled_once_and_its_manifest_records_it(tmp_path):
    cache, calls = KernelCache(KEY, tmp_path), []
    assert cache.load("v", fake_compile(b"library", calls), read_back) == (b"library", True)
    assert cache.load("v", fake_compile(b"other", calls), read_back) == (b"library", False)
    assert len(calls) == 1
    manifest = json.loads(cache.manifest("v").read_text())
    assert manifest["sha256"] == kernel_cache.file_sha256(cache.library("v"))
    assert manifest["key"] == dataclasses.asdict(KEY) and manifest["command"] == ["fake"]
    assert not list(cache.dir.glob("*.tmp"))


@pytest.mark.parametrize("damage", ["truncated", "corrupt", "no manifest"])
def test_a_damaged_entry_is_compiled_again(tmp_path, damage):
    cache = KernelCache(KEY, tmp_path)
    cache.load("v", fake_compile(b"library v1"), read_back)
    if damage == "truncated":
        cache.library("v").write_bytes(b"lib")
    elif damage == "corrupt":
        cache.library("v").write_bytes(b"LIBRARY v1")
    else:
        cache.manifest("v").unlink()
    assert cache.verified("v") is None
    assert cache.load_cached("v", read_back) is None
    assert cache.load("v", fake_compile(b"library v2"), read_back) == (b"library v2", True)


def test_an_entry_that_does_not_load_is_compiled_again(tmp_path):
    cache = KernelCache(KEY, tmp_path)
    cache.load("v", fake_compile(b"stale"), read_back)

    def load(library: Path) -> bytes:
        if library.read_bytes() == b"stale":
            raise ValueError("does not fit this build")
        return library.read_bytes()

    assert cache.load_cached("v", load) is None
    assert cache.load("v", fake_compile(b"fresh"), load) == (b"fresh", True)


def test_a_failed_compile_leaves_no_entry(tmp_path):
    cache = KernelCache(KEY, tmp_path)

    def failing(output: Path) -> dict:
        output.write_bytes(b"half")
        raise jit.CompileError("nvcc failed")

    with pytest.raises(jit.CompileError):
        cache.load("v", failing, read_back)
    assert not cache.library("v").exists() and not cache.manifest("v").exists()
    assert not list(cache.dir.glob("*.tmp"))


def test_threads_asking_for_one_entry_compile_it_once(tmp_path):
    cache, calls, results = KernelCache(KEY, tmp_path), [], []
    def ask() -> None:
        results.append(cache.load("v", fake_compile(b"x", calls, 0.3), read_back))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert sorted(compiled for _, compiled in results) == [False, False, False, True]


def test_loading_from_the_cache_never_waits_for_a_compile(tmp_path):
    cache, calls = KernelCache(KEY, tmp_path), []
    compiling = threading.Thread(target=cache.load, args=("v", fake_compile(b"x", calls, 1.0), read_back))
    compiling.start()
    while not calls:
        time.sleep(0.01)
    start = time.monotonic()
    assert cache.load_cached("v", read_back) is None and time.monotonic() - start < 0.5
    compiling.join()
    assert cache.load_cached("v", read_back) == b"x"


def test_processes_asking_for_one_entry_compile_it_once(tmp_path):
    counter = tmp_path / "compiles"
    code = f"""
import sys, time
from pathlib import Path
from wavetune.runtime.kernel_cache import CacheKey, KernelCache
key = CacheKey(*{list(dataclasses.astuple(KEY))!r})
def compile(output):
    with open({str(counter)!r}, "a") as f:
        f.write("compile\\n")
    time.sleep(0.5)
    output.write_bytes(b"library")
    return {{}}
print(KernelCache(key, Path({str(tmp_path / 'cache')!r})).load("v", compile, lambda p: p.read_bytes())[1])
"""
    processes = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = sorted(p.communicate()[0].strip() for p in processes)
    assert all(p.returncode == 0 for p in processes)
    assert outputs == ["False", "False", "True"]
    assert counter.read_text().count("compile") == 1


def test_the_builtin_set_selects_no_variant_and_codegen_accepts_it(tmp_path, capsys):
    """What `pip install .` compiles (the default, `builtin`): no variant of any config space, which the code
    generator takes (every family's registry, no source) where another set that selects nothing is refused."""
    paths = sorted((REPO / "cutlass_configs").glob("*.toml"))
    spaces = [cs.load(path) for path in paths]
    for space in spaces:
        assert space.select(cs.BUILTIN_SET) == [], space.path.name
        assert space.select(cs.BUILTIN_SET, "*") == [], space.path.name
    assert cs.generate_families(spaces, tmp_path / "generated", cs.BUILTIN_SET, "", True, REPO / "tables") == []
    for space in spaces:
        registry = (tmp_path / "generated" / space.generation.registry).read_text()
        assert f'_KERNEL_SET_NAME "{cs.BUILTIN_SET}"' in registry and compiled_rows(registry) == []
        assert registry.count("  WAVETUNE_VARIANT(") == len(space.variants)  # the whole space, listed once
    assert not list((tmp_path / "generated").rglob("*.cu"))
    out = tmp_path / "cli"
    assert cs.main([*map(str, paths), str(out), "--kernel-set", cs.BUILTIN_SET, "--tables-dir", str(REPO / "tables")]) == 0
    assert capsys.readouterr().out.strip() == ""  # the sources CMake compiles: none
    with pytest.raises(cs.ConfigError, match="selects no variant"):
        cs.generate_families(spaces, tmp_path / "none", "ci", "no_such_variant_*", True, REPO / "tables")


@pytest.mark.parametrize("path", sorted((REPO / "cutlass_configs").glob("*.toml")), ids=lambda p: p.name)
def test_the_build_lists_its_config_spaces_as_the_generator_reads_them(path):
    """What the JIT compiles comes from the native module (run time never imports the generator): every variant of
    each config space, compiled or not, with the generator's ids, names and fields, and its built-in choice's."""
    space = cs.load(path)
    listed = configs.config_space(space.family)
    assert listed.hash == space.hash == families.get(space.family).compiled_hash()
    assert [(c.id, c.name, c.dtype, c.b_layout, c.swap_ab, c.schedule, c.tile, c.cluster, c.scheduler)
            for c in listed.variants] == [
        (v.id, v.name, v.dtype, v.b_layout, v.swap_ab, v.schedule, (v.tile_m, v.tile_n, v.tile_k),
         (v.cluster_m, v.cluster_n), v.scheduler) for v in space.variants]
    assert listed.heuristic_set == {v.name for v in space.heuristic_set()}


def test_a_family_of_built_in_variants_has_no_config_space():
    for family in families.all():
        assert (configs.config_space(family.name) is None) == (not family.config_space), family.name
        if not family.config_space:
            assert jit.missing_variants(family.name) == []


def test_a_compile_writes_the_source_the_generator_renders(tmp_path):
    """The source of a variant library is written by the code generator in a process of its own, as the build
    renders it."""
    space = cs.load(REPO / "cutlass_configs" / "sm90_gemm.toml")
    chosen = [v for v in space.variants if v.name.startswith("bf16_bcol_pingpong_64x")][:2]
    jit.generate_source("gemm", [v.name for v in chosen], tmp_path / "library.cu")
    assert (tmp_path / "library.cu").read_text() == cs.render_variant_library(space, chosen)


def test_a_compile_refuses_an_installed_config_space_of_another_build(tmp_path, monkeypatch):
    """An installed config space that is not the one the build was compiled from fails the compile with a
    message, before nvcc (the generator, in its own process, checks it)."""
    edited = (REPO / "cutlass_configs" / "sm90_gemm.toml").read_text().replace('"64x64x64", ', "", 1)
    (tmp_path / "sm90_gemm.toml").write_text(edited)
    monkeypatch.setattr(jit, "CONFIG_SPACES", tmp_path)
    name = cs.load(REPO / "cutlass_configs" / "sm90_gemm.toml").variants[0].name
    with pytest.raises(jit.CompileError, match=rf"(?s)generating the source of {name} failed.*"
                                               "is not the one this build was compiled from"):
        jit.generate_source("gemm", [name], tmp_path / "library.cu")
    assert not (tmp_path / "library.cu").exists()


def test_the_generator_refuses_a_variant_its_space_lacks(tmp_path, capsys):
    path = REPO / "cutlass_configs" / "sm90_gemm.toml"
    space_hash = cs.load(path).hash
    assert variant_library.main([str(path), space_hash, str(tmp_path / "x.cu"), "no_such_variant"]) == 1
    assert "has no variant no_such_variant" in capsys.readouterr().err and not (tmp_path / "x.cu").exists()


@pytest.mark.parametrize("table", sorted((REPO / "tables").glob("*.wtt")), ids=lambda p: p.name)
def test_the_working_set_of_a_shipped_table(table):
    family = tablefile.read_table(table)["meta"].get("family", "gemm")
    named = {c["variant"] for c in tablefile.read_table(table)["configs"]}
    space = next(s for s in map(cs.load, (REPO / "cutlass_configs").glob("*.toml")) if s.family == family)
    compiled = jit.compiled_names(family)
    expected = {v.name for v in space.variants if v.name in named and v.name not in compiled}
    assert {v.name for v in jit.working_set(table, family)} == expected
    assert all(not name.startswith("cublas_") for name in expected)
    if wavetune.build_info()["kernel_set"] != "full" and family == "gemm":
        assert expected, "the shipped gemm tables choose more than a small build compiles"


def test_a_table_chooses_among_compiled_variants_only():
    """Where its best config is not compiled, the selector's choice is the best compiled candidate."""
    for table in sorted((REPO / "tables").glob("nvidia-h100*.wtt")):
        family = tablefile.read_table(table)["meta"].get("family", "gemm")
        selector = tables.open_table(table, family)
        compiled = jit.compiled_names(family)
        if not selector.config_count() - selector.skipped_configs():
            continue  # no config of this table is compiled in: launches use the built-in heuristic
        head_dim = 128 if family == "attention" else 4096
        for m in (1, 16, 300, 4096):
            choice = selector.select("bf16", "col", m, 4096, head_dim)
            rows = selector.explain("bf16", "col", m, 4096, head_dim)
            assert choice["name"] in compiled | {"cublas_bf16_bcol"}
            assert {r["variant"] for r in rows} <= {c.id for c in families.get(family).list_configs()}


def test_a_table_bound_to_added_variants_waits_for_a_call_outside_capture(monkeypatch):
    """variants_added binds the loaded tables again; the family's next call swaps one in, never under capture."""
    torch = pytest.importorskip("torch")
    capturing, dropped = [True], []
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    monkeypatch.setitem(tables._loaded_tables, ("gemm", ""), {7: str(REPO / "tables" / "nvidia-h100-80gb-hbm3.wtt")})
    monkeypatch.setitem(tables._checked_tables, ("gemm", ""), {7})
    monkeypatch.setattr(tables, "_table_listeners", [lambda: dropped.append(1)])
    try:
        tables.variants_added("gemm")
        assert tables.table_swap_pending(7) and len(dropped) == 1  # plans dropped, so calls reach ensure_table
        tables.ensure_table(7)
        assert tables.table_swap_pending(7) and len(dropped) == 1  # under capture: not now
        capturing[0] = False
        tables.ensure_table(7)
        assert not tables.table_swap_pending(7) and len(dropped) == 2
    finally:
        tables._pending_tables.pop(("gemm", "", 7), None)
        wavetune._C.use_table(7, None)


@pytest.mark.parametrize("argv, message", [
    ([], "one of --table PATH, --family F or --all"),
    (["--family", "gemm", "--all"], "one of --table PATH, --family F or --all"),
    (["--family", "nope"], "unknown kernel family 'nope'"),
    (["--table", "/nonexistent/table.wtt"], "/nonexistent/table.wtt"),
    (["--all", "--jobs", "0"], "--jobs must be at least 1"),
])
def test_build_argument_errors_are_one_line(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(jit, "unavailable_reason", lambda: None)
    monkeypatch.setattr(jit, "current_gpu_arch", lambda: jit.GpuArch(90, 90))
    assert cli.main(["build", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("wavetune build: error: ") and message in err


def test_build_says_why_nothing_can_compile(capsys, monkeypatch):
    monkeypatch.setattr(jit, "unavailable_reason", lambda: "no nvcc (a CUDA 12.x or 13.x toolkit)")
    assert cli.main(["build", "--all"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "variants cannot be compiled here: no nvcc" in err


def variant_of_arch(arch: str) -> wavetune.KernelConfig:
    """A gemm variant of the config space whose architecture is ``arch``, as a config space would list it."""
    return dataclasses.replace(jit.config_space("gemm").variants[0], arch=arch)


@pytest.mark.parametrize("gpu, arch, name, gencode", [
    ((90, 90), "sm90a", "sm_90a", "arch=compute_90a,code=[sm_90a]"),
    ((80, 80), "sm80", "sm_80", "arch=compute_80,code=[sm_80]"),
    ((86, 86), "sm80", "sm_86", "arch=compute_86,code=[sm_86]"),
    ((89, 89), "sm89", "sm_89", "arch=compute_89,code=[sm_89]"),
    ((90, 90), "sm80", "sm_90", "arch=compute_90,code=[sm_90]"),
    ((100, 100), "sm80", "sm_100", "arch=compute_100,code=[sm_100]"),
    ((120, 120), "any", "sm_120", "arch=compute_120,code=[sm_120]"),
    ((90, 80), "sm80", "sm_90-compute_80", "arch=compute_80,code=[sm_90]"),  # WAVETUNE_ARCH=sm80 on an H100
])
def test_a_variant_compiles_for_the_gpu_in_hand(gpu, arch, name, gencode):
    """Architecture-specific code for its own architecture; portable code as the GPU's own machine code, from the
    virtual architecture the GPU is served as; the cache key names the target."""
    target = jit.compile_target(variant_of_arch(arch), jit.GpuArch(*gpu))
    assert target.name == name and target.gencode == f"--generate-code={gencode}"
    key = jit.cache_for("gemm", target).key if jit.unavailable_reason() is None else None
    assert key is None or key.arch == name


@pytest.mark.parametrize("gpu, arch, message", [
    ((86, 86), "sm90a", "built for sm90a and does not run on a GPU of compute capability 8.6"),
    ((100, 100), "sm90a", "built for sm90a and does not run on a GPU of compute capability 10.0"),
    ((80, 80), "sm89", "built for sm89 and does not run on a GPU of compute capability 8.0"),
    ((90, 80), "sm90a", "compute capability 9.0 served as sm80 \\(WAVETUNE_ARCH\\)"),
    ((100, 90), "sm90a", "compute capability 10.0 served as sm90 \\(WAVETUNE_ARCH\\)"),
])
def test_a_variant_that_does_not_run_on_the_gpu_is_refused_before_a_compile(gpu, arch, message, monkeypatch):
    started = []
    monkeypatch.setattr(jit, "build_one", lambda *args: started.append(args))
    with pytest.raises(ValueError, match=message):
        jit.build("gemm", [variant_of_arch("sm80"), variant_of_arch(arch)], gpu=jit.GpuArch(*gpu))
    assert not started


def test_a_build_compiles_each_variant_for_its_own_target(monkeypatch):
    """On an H100, the sm90a variants for sm_90a and the portable ones for sm_90, in caches of their own."""
    targets = {}

    def build_one(family: str, variant: wavetune.KernelConfig, target: jit.Target) -> jit.Built:
        targets[variant.name] = target
        return jit.Built(variant.name, Path(target.name) / variant.name, True)

    monkeypatch.setattr(jit, "build_one", build_one)
    hopper, portable = variant_of_arch("sm90a"), dataclasses.replace(variant_of_arch("sm80"), name="portable")
    built = jit.build("gemm", [hopper, portable], gpu=jit.GpuArch(90, 90))
    assert targets == {hopper.name: jit.Target(90, 90, specific=True), "portable": jit.Target(90, 90)}
    assert {b.library.parent.name for b in built} == {"sm_90a", "sm_90"}


def test_the_compile_command_names_the_target(tmp_path):
    tools = jit.Toolchain("nvcc", "13.0", tmp_path, "4.2.0")
    command = jit.compile_command(tools, tmp_path / "v.cu", tmp_path / "v.so", jit.Target(86, 86))
    assert "--generate-code=arch=compute_86,code=[sm_86]" in command
    assert not [c for c in command if "90a" in c]


@pytest.mark.parametrize("capability, served", [((8, 6), 86), ((9, 0), 90), ((9, 0), 80), ((12, 0), 120)])
def test_the_current_gpu_arch_is_the_devices_own_and_the_one_it_is_served_as(capability, served, monkeypatch):
    monkeypatch.setattr(jit._C, "no_device_reason", lambda: "")
    monkeypatch.setattr(jit._C, "device_properties", lambda: {"compute_capability": capability})
    monkeypatch.setattr(jit._C, "served_compute_capability", lambda: served)
    assert jit.current_gpu_arch() == jit.GpuArch(capability[0] * 10 + capability[1], served)


def test_without_a_gpu_a_compile_asks_for_the_architecture(monkeypatch):
    monkeypatch.setattr(jit._C, "no_device_reason", lambda: "no NVIDIA driver is installed")
    with pytest.raises(jit.JitUnavailable, match=r"no CUDA GPU to compile for \(no NVIDIA driver.*--arch sm86"):
        jit.current_gpu_arch()
    assert jit.prepare("gemm", [variant_of_arch("sm90a")], None, "the gemm table T names") is False  # silently


def test_a_table_on_a_newer_gpu_served_as_hopper_queues_no_sm90a_variant(monkeypatch):
    """WAVETUNE_ARCH=sm90 on a 10.0 GPU: the sm90a variants a table names are neither loaded nor compiled."""
    calls = []
    monkeypatch.setattr(jit, "current_gpu_arch", lambda: jit.GpuArch(100, 90))
    monkeypatch.setattr(jit, "load_cached", lambda family, variants, gpu: calls.append(variants) or variants)
    monkeypatch.setattr(jit, "compile_in_background", lambda *args: calls.append(args))
    assert jit.prepare("gemm", [variant_of_arch("sm90a")], None, "the gemm table T names") is False
    assert calls == [[]]


@pytest.mark.parametrize("name, gpu", [("sm86", (86, 86)), ("sm_89", (89, 89)), ("sm90a", (90, 90)),
                                       ("sm120", (120, 120))])
def test_an_architecture_named_for_the_build(name, gpu):
    assert jit.GpuArch.named(name) == jit.GpuArch(*gpu)


def test_an_architecture_name_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="'ampere' is not an architecture name"):
        jit.GpuArch.named("ampere")


def test_the_missing_variants_of_an_architecture_are_those_that_run_there():
    space = jit.config_space("gemm")
    for gpu in (jit.GpuArch(86, 86), jit.GpuArch(90, 90), jit.GpuArch(100, 100)):
        missing = jit.missing_variants("gemm", gpu=gpu)
        assert {v.name for v in missing} == {v.name for v in space.variants
                                             if v.runs_on(gpu.own) and v.name not in jit.compiled_names("gemm")}


@pytest.mark.parametrize("arch", ["sm86", "sm90"])
def test_build_arch_compiles_what_runs_on_the_named_architecture(arch, capsys, monkeypatch):
    """`build --arch` on a host without a GPU: the variants that run there, compiled for it."""
    calls = []
    monkeypatch.setattr(jit, "unavailable_reason", lambda: None)
    monkeypatch.setattr(jit._C, "no_device_reason", lambda: "no NVIDIA driver is installed")
    monkeypatch.setattr(jit, "build", lambda family, variants, **options: calls.append((variants, options)) or [])
    assert cli.main(["build", "--family", "gemm", "--arch", arch]) == 0
    gpu = jit.GpuArch.named(arch)
    expected = [v.name for v in jit.missing_variants("gemm", gpu=gpu)]
    assert [[v.name for v in variants] for variants, _ in calls] == ([expected] if expected else [])
    assert all(options["gpu"] == gpu for _, options in calls)
    assert all(v.runs_on(gpu.own) for variants, _ in calls for v in variants)
    if not expected:
        assert f"runs on {arch} is compiled already" in capsys.readouterr().out


def test_build_without_a_gpu_or_an_architecture_says_to_name_one(capsys, monkeypatch):
    monkeypatch.setattr(jit, "unavailable_reason", lambda: None)
    monkeypatch.setattr(jit._C, "no_device_reason", lambda: "no NVIDIA driver is installed")
    assert cli.main(["build", "--family", "gemm"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no CUDA GPU to compile for" in err and "--arch sm86" in err


def resealed_shipped_table(tmp_path: Path, edit) -> Path:
    """The shipped H100 gemm table edited by ``edit`` and given a valid checksum again."""
    text = (REPO / "tables" / "nvidia-h100-80gb-hbm3.wtt").read_text()
    body = edit(text[:text.rindex("checksum ")])
    path = tmp_path / "edited.wtt"
    path.write_text(body + f"checksum {tablefile.fnv1a64(body.encode()):016x}\n")
    return path


@pytest.mark.parametrize("edit, message", [
    (lambda t: re.sub(r"^meta config_space_hash \w+$", "meta config_space_hash 0123456789abcdef", t, flags=re.M),
     "tuned against config space 0123456789abcdef"),
    (lambda t: re.sub(r"^(wave 0 \d+) \S+", r"\1 nan", t, count=1, flags=re.M),
     "coefficient a 'nan' is not a finite decimal number"),
    (lambda t: t.replace("config 0 ", "config 0 x", 1), "config 0 names variant 'xbf16_"),
])
def test_build_refuses_a_table_the_loader_refuses_before_compiling(tmp_path, capsys, monkeypatch, edit, message):
    """`build --table` reads the table as load_table does: where the loader refuses it, with the loader's
    message, nothing compiles (its own reader started 41 compiles)."""
    compiles = []
    monkeypatch.setattr(jit, "unavailable_reason", lambda: None)
    monkeypatch.setattr(jit, "current_gpu_arch", lambda: jit.GpuArch(90, 90))
    monkeypatch.setattr(jit, "build", lambda family, variants, **options: compiles.append(variants) or [])
    assert cli.main(["build", "--table", str(resealed_shipped_table(tmp_path, edit))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wavetune build: error: ") and message in err and not compiles


@pytest.mark.parametrize("table", sorted((REPO / "tables").glob("*.wtt")), ids=lambda p: p.name)
def test_build_asks_for_the_working_set_of_a_table_the_loader_reads(table):
    family = tablefile.read_table(table)["meta"].get("family", "gemm")
    assert jit.build_requests(table, None, False) == [(family, jit.working_set(table, family))]


def test_a_variant_library_of_another_build_is_refused(tmp_path):
    not_a_library = tmp_path / "x.so"
    not_a_library.write_bytes(b"\x7fELF truncated")
    with pytest.raises(ValueError, match="cannot load the variant library"):
        jit.register(not_a_library)


def compile_skip_reason() -> str | None:
    """The real compile (about 100 s of a core) runs on the GPU tier or with WAVETUNE_TEST_COMPILE=1."""
    if os.environ.get("WAVETUNE_TEST_COMPILE") != "1" and gpu_skip_reason() is not None:
        return f"a compile of about 100 s: GPU tier ({gpu_skip_reason()}) or WAVETUNE_TEST_COMPILE=1"
    return jit.unavailable_reason()


def run_isolated(call: str, tmp_path: Path, jit: str = "0") -> str:
    """Run a call of a function below in a fresh interpreter with a cache of its own (and WAVETUNE_JIT=jit), so
    that the variants it registers and its environment stay out of this process; returns its output."""
    env = {**os.environ, kernel_cache.CACHE_ENV: str(tmp_path / "cache"), JIT_ENV: jit,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))}
    call = call if call.endswith(")") else call + "()"
    done = subprocess.run([sys.executable, "-c", f"import test_jit; test_jit.{call}"], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def uncompiled_variant() -> wavetune.KernelConfig | None:
    """A gemm variant this build lacks, a 64-row ping-pong tile first (among the quickest to compile)."""
    missing = jit.missing_variants("gemm")
    quick = [v for v in missing if fnmatch.fnmatchcase(v.name, "bf16_bcol_pingpong_64x*_1x1_persistent")]
    return (quick or missing or [None])[0]


def test_nvcc_compiles_a_variant_into_the_cache(tmp_path):
    if (reason := compile_skip_reason()) is not None:
        pytest.skip(reason)
    if uncompiled_variant() is None:
        pytest.skip("every gemm variant is compiled into this build")
    print(run_isolated("compile_a_variant", tmp_path))


def compile_a_variant() -> None:
    variant = uncompiled_variant()
    (built,) = jit.build("gemm", [variant], gpu=jit.GpuArch.named("sm90"))  # its target on a host without a GPU
    assert built.name == variant.name and built.compiled
    assert built.library.parent.parent == Path(os.environ[kernel_cache.CACHE_ENV])
    assert built.library.parent.name.startswith(f"gemm-{wavetune.build_info()['config_space_hash']}-sm_90a-cuda")
    manifest = json.loads(built.library.with_suffix(".json").read_text())
    assert manifest["sha256"] == kernel_cache.file_sha256(built.library)
    assert "--generate-code=arch=compute_90a,code=[sm_90a]" in manifest["command"]
    assert variant.name in {c.name for c in wavetune.configs()}
    assert jit.register(built.library) == ("gemm", [variant.name], 0)  # registered once
    assert jit.build("gemm", [variant], gpu=jit.GpuArch.named("sm90"))[0].compiled is False  # the cache holds it


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["build", "background"])
def test_a_table_choice_compiled_at_run_time(tmp_path, how):
    """A table prefers a variant the build lacks: the first call runs the best compiled candidate; once the
    working set is compiled (by the build function, or in the background as the table loads), a later call
    runs the table's variant; every result is right."""
    if (reason := jit.unavailable_reason()) is not None:
        pytest.skip(reason)
    if uncompiled_variant() is None or compiled_fallback() is None:
        pytest.skip("needs a compiled bf16 column-major variant and one that is not compiled")
    print(run_isolated(f"table_choice_compiled_at_run_time(background={how == 'background'})", tmp_path,
                       jit="1" if how == "background" else "0"))


def compiled_fallback() -> wavetune.KernelConfig | None:
    return next((c for c in wavetune.configs() if (c.dtype, c.b_layout, c.scheduler) == ("bf16", "col", "persistent")
                 and not c.from_library), None)


def table_choice_compiled_at_run_time(background: bool) -> None:
    import torch

    wanted, fallback = uncompiled_variant(), compiled_fallback()
    props = wavetune.device_properties()
    table = Path("table.wtt")
    tablefile.write_table(
        table, meta={"gpu_name": props["name"], "sm_count": props["sm_count"],
                     "config_space_hash": wavetune.build_info()["config_space_hash"], "wavetune_version": "test",
                     "cuda_version": 13000, "created": "2026-11-23T00:00:00+00:00"},
        configs=[{"variant": v.name, "decomposition": "data_parallel", "splits": 1} for v in (wanted, fallback)],
        waves={0: {1: [1.0, 0.0, 0.0, 0.0]}, 1: {1: [5.0, 0.0, 0.0, 0.0]}}, micro={}, exact=None)
    m, n, k = 200, 1024, 512
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    reference = x.float() @ w.float().T

    def chosen() -> str:
        prepared = wavetune._C.PreparedGemm(m, n, k, k, k, n, 0, 0, torch.cuda.current_device())
        return next(c.name for c in wavetune.configs() if c.id == prepared.variant)

    start = time.monotonic()
    wavetune.load_table(table)  # with WAVETUNE_JIT=1 the working set starts compiling in the background
    torch.testing.assert_close(wavetune.gemm(x, w.t()).float(), reference, rtol=2e-2, atol=2e-1)
    assert chosen() == fallback.name
    assert [v.name for v in jit.working_set(table, "gemm")] == [wanted.name]
    if background:
        while chosen() != wanted.name and time.monotonic() - start < 600:
            time.sleep(1)
            torch.testing.assert_close(wavetune.gemm(x, w.t()).float(), reference, rtol=2e-2, atol=2e-1)
    else:
        jit.build("gemm", jit.working_set(table, "gemm"))
        torch.testing.assert_close(wavetune.gemm(x, w.t()).float(), reference, rtol=2e-2, atol=2e-1)
    print(f"{wanted.name} compiled and chosen after {time.monotonic() - start:.0f} s")
    assert chosen() == wanted.name
    assert tables.open_table(table).select("bf16", "col", m, n, k)["name"] == wanted.name

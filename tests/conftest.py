"""Test tiers: the CPU tier runs everywhere; tests marked `gpu` skip, with the reason, unless a Hopper GPU,
torch with CUDA and a wavetune build with kernels are all present."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG_SPACE = REPO / "cutlass_configs" / "sm90_gemm.toml"
RESULTS_INDEX = REPO / "docs" / "results.md"


@functools.cache
def cpp_family_folders() -> list[Path]:
    """csrc/families' family folders: those holding files (a checkout updated across a family's removal may keep
    its emptied folder, which git does not track)."""
    root = REPO / "csrc" / "families"
    return sorted(p for p in root.iterdir() if p.is_dir() and any(f.is_file() for f in p.rglob("*")))


def family_table(family: str = "gemm") -> str:
    """The ``[family]`` table of a shipped config-space file (``cutlass_configs/sm90_<family>.toml``), for
    a test's own file: appended after its groups, it names the family and how its code is generated."""
    lines = (CONFIG_SPACE.parent / f"sm90_{family}.toml").read_text().splitlines()
    start = lines.index("[family]")
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip() or lines[i].startswith("[")), len(lines))
    return "\n" + "\n".join(lines[start:end]) + "\n"


def config_space_with(tmp_path: Path, config_space: Path, group: str, before: str, text: str | None = None) -> Path:
    """A config-space file (``text``, else ``config_space``'s) with ``group`` inserted before its ``before`` table
    (``"[fallback]"``, ``"[kernel_sets]"``), written under ``tmp_path``."""
    text = text if text is not None else config_space.read_text()
    at = text.index("\n" + before)
    path = tmp_path / config_space.name
    path.write_text(text[:at] + "\n" + group + text[at:])
    return path


def compiled_rows(registry: str) -> list[str]:
    """The rows of a generated registry list's compiled variants (its ``_VARIANT_LIST``; the whole config space's
    rows, ``_SPACE_VARIANT_LIST``, come after it)."""
    listing = registry.split("_VARIANT_LIST(WAVETUNE_VARIANT) \\\n", 1)[1].split("\n\n", 1)[0]
    return [row.strip(" \\") for row in listing.splitlines() if row.strip(" \\")]


@functools.cache
def gpu_skip_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return f"{torch.cuda.get_device_name()} is sm_{major}{minor}; the kernels need sm_90 (Hopper)"
    import wavetune

    if not wavetune.build_info()["kernels_compiled"]:
        return "this wavetune build has no kernels (built without nvcc)"
    return None


@pytest.fixture(autouse=True, scope="session")
def private_kernel_cache(tmp_path_factory):
    """The suite neither compiles variants in the background nor loads the user's compiled ones, which would
    change what the tests see mid-run (tests/test_jit.py turns both on in processes of its own)."""
    os.environ["WAVETUNE_JIT"] = "0"
    os.environ["WAVETUNE_CACHE_DIR"] = str(tmp_path_factory.mktemp("kernel-cache"))


def pytest_collection_modifyitems(config, items):
    reason = gpu_skip_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"GPU tier: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def capture_graph(step):
    """``step()`` captured in a CUDA graph by PyTorch's recipe (a warm-up on a side stream, then the capture):
    (the graph, the outputs its replays write)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    return graph, captured


def run_served_as_sm80(script: str) -> None:
    """Run ``script`` (printing "ok" last) in a Python process that serves the GPU as an Ampere one
    (WAVETUNE_ARCH=sm80), and fail with its stderr unless it succeeds."""
    env = {**os.environ, "WAVETUNE_ARCH": "sm80"}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-2000:]


def builtin_choice_compiles(monkeypatch, family: str, gpu: tuple[int, int] = (90, 90)) -> list:
    """The variants ``jit.prepare_builtin_choice(family)`` queues for a background compile on a GPU of compute
    capability ``gpu`` (its own, the one served) where nothing is compiled and nvcc works: nothing compiles."""
    from wavetune.runtime import jit

    queued = {}
    arch = jit.GpuArch(*gpu)
    monkeypatch.setattr(jit, "compiled_names", lambda name: set())
    monkeypatch.setattr(jit, "unavailable_reason", lambda: None)
    monkeypatch.setattr(jit, "current_gpu_arch", lambda: arch)
    monkeypatch.setattr(jit, "runnable", lambda variants: [v for v in variants if arch.runs(v)])
    monkeypatch.setattr(jit, "load_cached", lambda name, variants, gpu: variants)
    monkeypatch.setattr(jit, "compile_in_background",
                        lambda name, variants, gpu, scales="": queued.update({name: variants}))
    monkeypatch.setattr(jit._C, "build_info", lambda: {"kernels_compiled": True})
    monkeypatch.setenv("WAVETUNE_JIT", "1")
    jit.prepare_builtin_choice(family)
    return queued.get(family, [])


def norms_served_ahead(monkeypatch) -> list[bool]:
    """Per call of a ``wavetune.fused.RMSNorm`` from now on: whether it returned the norm computed ahead."""
    from wavetune import fused

    served, forward = [], fused.RMSNorm.forward

    def counted(self, x):
        ahead = self._ahead
        result = forward(self, x)
        served.append(ahead is not None and result is ahead[2])
        return result

    monkeypatch.setattr(fused.RMSNorm, "forward", counted)
    return served


def load_benchmark(path: Path):
    """The benchmark script at ``path``, loaded from its file: what a test of the script's own harness checks (the
    script imports no other benchmark, so benchmarks/ stays off sys.path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import does (importlib's recipe): what looks it up by name finds it
    spec.loader.exec_module(module)
    return module


def cpp_program(source: Path, target: str, root: Path) -> Path:
    """Builds the C++ project at `source` against the installed wavetune CMake package, as docs/cpp.md tells C++
    users (the package directory as the prefix); skips when there is no cmake or C++ compiler."""
    from wavetune.__main__ import cmake_dir

    if shutil.which("cmake") is None:
        pytest.skip("cmake is not on PATH: cannot build C++ programs against the installed package")
    if not (os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")):
        pytest.skip("no C++ compiler (c++, g++, clang++ or $CXX): cannot build C++ programs")
    assert (cmake_dir() / "wavetuneConfig.cmake").is_file(), f"no CMake package installed in {cmake_dir()}"
    build = root / target
    configure = ["cmake", "-S", str(source), "-B", str(build), f"-DCMAKE_PREFIX_PATH={cmake_dir()}",
                 "-DCMAKE_BUILD_TYPE=Release"]
    for cmd in (configure, ["cmake", "--build", str(build), "--parallel", "2"]):
        done = subprocess.run(cmd, capture_output=True, text=True)
        assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}"
    return build / target


# ---------------------------------------------------------------------------------------------------------
# Raw results: files of the `results` branch, indexed with their sha256 in docs/results.md.

INDEX_ROW = re.compile(r'^\| <a name="([^"]+)"></a>`\1` \| (.*) \|$', re.M)


@functools.cache
def results_index() -> dict[str, list[str]]:
    """docs/results.md's rows: file name -> the row's other cells (what, [command,] device, date, sha256)."""
    return {name: re.split(r"(?<!\\) \| ", cells) for name, cells in INDEX_ROW.findall(RESULTS_INDEX.read_text())}


@functools.cache
def results_commit() -> str:
    """The commit of the results branch whose files docs/results.md's checksums were taken at."""
    found = re.search(r"commit `([0-9a-f]{40})`", RESULTS_INDEX.read_text())
    assert found, "docs/results.md must name the results branch's commit its checksums were taken at"
    return found.group(1)


def results_commit_skip_reason() -> str | None:
    """Why the raw results cannot be read here (no git, or a checkout without the results branch's commit)."""
    commit = results_commit()
    found = shutil.which("git") and subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{commit}^{{commit}}"],
                                                   capture_output=True).returncode == 0
    return None if found else (f"the raw results are on the results branch, whose commit {commit} this checkout "
                               "lacks: git fetch origin results:results")


def indexed_result(name: str) -> bytes:
    """A raw result's bytes at the index's results commit, checked against its row's sha256."""
    assert name in results_index(), f"docs/results.md has no row for {name}"
    data = subprocess.run(["git", "-C", str(REPO), "show", f"{results_commit()}:{name}"], capture_output=True,
                          check=True).stdout
    assert f"`{hashlib.sha256(data).hexdigest()}`" == results_index()[name][-1], f"{name}: its sha256 is not its row's"
    return data


@pytest.fixture(scope="session")
def raw_result(tmp_path_factory):
    """A raw result by its name in docs/results.md (indexed_result), written to a temporary folder; skips where
    the results commit is not fetched."""
    folder = tmp_path_factory.mktemp("results")

    def path(name: str) -> Path:
        target = folder / name
        if not target.exists():
            reason = results_commit_skip_reason()
            if reason:
                pytest.skip(reason)
            target.write_bytes(indexed_result(name))
        return target

    return path

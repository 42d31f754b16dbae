"""The installed package without a GPU: import, build metadata, variant listing, config resolution."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import wavetune
from conftest import CONFIG_SPACE
from wavetune import _C
from wavetune.families.gemm import api
from wavetune.codegen import config_space as cs


def test_imports_without_torch_and_without_a_gpu():
    # A fresh interpreter where `import torch` fails and no GPU is visible.
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import wavetune\n"
        "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
        "print(len(wavetune.configs()), wavetune.build_info()['kernel_set'])\n"
    )
    env = {"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/")
    assert done.returncode == 0, done.stderr
    count, kernel_set = done.stdout.split()
    assert int(count) == len(wavetune.configs()) and kernel_set == wavetune.build_info()["kernel_set"]


def test_wavetune_nn_is_there_after_import_wavetune():
    pytest.importorskip("torch")
    code = "import wavetune; print(wavetune.nn.FP8Linear.__name__, wavetune.nn.Linear.__name__)"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["FP8Linear", "Linear"]


def test_cublas_is_looked_for_in_the_nvidia_wheels(tmp_path):
    """Without WAVETUNE_CUBLAS, importing wavetune names the lib/ folders of the nvidia-* wheels (a
    namespace package `nvidia`), where the native side looks for libcublas after its soname."""
    for wheel in ("cu13", "cublas"):
        (tmp_path / "nvidia" / wheel / "lib").mkdir(parents=True)
    code = "import os, wavetune; print(os.environ['WAVETUNE_CUBLAS'])"
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/")
    assert done.returncode == 0, done.stderr
    dirs = done.stdout.split()[0].split(":")  # PYTHONPATH first; installed nvidia-* wheels may follow
    assert dirs[:2] == [str(tmp_path / "nvidia" / w / "lib") for w in ("cu13", "cublas")]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/",
                          env={**env, "WAVETUNE_CUBLAS": "0"})
    assert done.stdout.split() == ["0"]  # a user's setting is kept


def test_build_matches_the_config_space():
    info = wavetune.build_info()
    space = cs.load(CONFIG_SPACE)
    assert info["config_space_hash"] == space.hash
    if not info["kernels_compiled"]:
        assert info["kernel_set"] == "none" and wavetune.configs() == []
        pytest.skip("built without nvcc: no variants to compare")
    expected = {v.id: v for v in space.variants}
    listed = wavetune.configs()
    assert listed, "a build with kernels lists at least one variant"
    assert [c.id for c in listed] == sorted(c.id for c in listed)
    # cuBLAS's candidates (where libcublas loads) follow the config space's ids...
    library = [c for c in listed if c.from_library]
    assert all(c.id >= 1 << 20 and c.name == f"cublas_{c.dtype}_b{c.b_layout}" for c in library)
    # The decode GEMM's, hand-written and in every CUDA build, between the two.
    decode = [c for c in listed if c.schedule == "decode"]
    assert decode and all(1 << 19 <= c.id < 1 << 20 and "_decode_" in c.name for c in decode)
    listed = [c for c in listed if not c.built_in]
    for c in listed:
        v = expected[c.id]
        assert c.name == v.name
        assert (c.dtype, c.b_layout, c.swap_ab, c.schedule, c.scheduler) == (
            v.dtype, v.b_layout, v.swap_ab, v.schedule, v.scheduler)
        assert c.tile == (v.tile_m, v.tile_n, v.tile_k) and c.cluster == (v.cluster_m, v.cluster_n)
    if info["kernel_set"] != "full":
        tables = CONFIG_SPACE.parents[1] / "tables"
        assert {c.name for c in listed} <= {v.name for v in space.select(info["kernel_set"], tables_dir=tables)}
    assert info["cuda_version"] >= 12000 and info["cutlass_version"] == 420


def test_enum_names_match_the_config_vocabulary():
    assert tuple(_C.DTYPES) == cs.DTYPES
    assert tuple(_C.B_LAYOUTS) == cs.B_LAYOUTS
    assert _C.DECOMPOSITIONS == ["heuristic", "data_parallel", "split_k", "stream_k"]
    assert _C.RASTERS == ["heuristic", "along_m", "along_n"]


def test_config_resolution():
    assert api._resolve(None) == (-1, 0, 1, 0, 1)
    for c in wavetune.configs():
        assert api._resolve(c.id)[0] == c.id
        assert api._resolve(c.name)[0] == c.id
        micro = api._resolve(wavetune.LaunchConfig(c.name, "split_k", 3, "along_n", 4))
        assert micro == (c.id, 2, 3, 2, 4)
    with pytest.raises(ValueError, match="no compiled variant named 'nope'"):
        api._resolve("nope")
    with pytest.raises(ValueError, match="no compiled variant with id 100000"):
        api._resolve(100000)
    with pytest.raises(TypeError, match="config must be"):
        api._resolve(2.5)
    with pytest.raises(TypeError, match="config must be"):
        api._resolve(True)
    if wavetune.configs():
        name = wavetune.configs()[0].name
        with pytest.raises(ValueError, match="decomposition='splitk' is not one of"):
            api._resolve(wavetune.LaunchConfig(name, decomposition="splitk"))
        with pytest.raises(ValueError, match="raster='diagonal' is not one of"):
            api._resolve(wavetune.LaunchConfig(name, raster="diagonal"))


def test_gemm_rejects_non_tensors():
    with pytest.raises(TypeError, match="takes torch tensors, got list and list"):
        wavetune.gemm([[1.0]], [[1.0]])


def problem(m=16, n=64, k=64, a=256, lda=None, b=512, ldb=None, d=1024, ldd=None, dtype=0, b_layout=0):
    lda = k if lda is None else lda
    ldb = (k if b_layout == 0 else n) if ldb is None else ldb
    ldd = n if ldd is None else ldd
    return _C.problem_error(m, n, k, a, lda, b, ldb, d, ldd, dtype, b_layout)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, ""),
        ({"b_layout": 1}, ""),
        ({"lda": 72, "ldb": 80, "ldd": 136}, ""),
        ({"m": 0}, "must be positive"),
        ({"k": 60}, "K=60 and N=64 must be multiples of 8"),
        ({"n": 100}, "multiples of 8"),
        ({"lda": 56}, "lda=56 \\(needs >= K=64\\)"),
        ({"b_layout": 1, "ldb": 64, "n": 128, "ldd": 128}, "needs >= 128 for row-major B"),
        ({"ldd": 68}, "must be multiples of 8 elements"),
        ({"a": 258}, "16-byte aligned for TMA \\(A is not, B is, D is\\)"),
        ({"d": 0}, "null data pointer"),
    ],
)
def test_problem_checks_need_no_gpu(kwargs, message):
    error = problem(**kwargs)
    if message:
        assert re.search(message, error), error
    else:
        assert error == ""

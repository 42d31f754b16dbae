"""The shipped tables' choices stay what they were: benchmarks/cpp/choice_dump.cpp, built against the installed
lookup library as if every variant of the config space were compiled, chooses for 200,000 seeded random
problems per shipped table, and the digest of its output must be the one recorded below. A change of the
lookup library or of a table that changes a choice fails here; if the change is meant, record the new digest.
CPU tier: no GPU or kernels needed."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import wavetune
from conftest import REPO

PROBLEMS = 200_000
# sha256 (first 16 hex digits) of choice_dump's output per shipped table: bit-identical to the choices of
# commit a4fc6c0's lookup library; the attention tables' are those of their head-dim-64-to-256 retuning
# (commits 32ec14a and db2d29e) and, for the H200's, of its retuning with the cuDNN and paged candidates. The
# GEMM families' since the floors bound calibrated predictions (issue 75): predictions below a floor rose to it,
# and 151 (H100) and 323 (H200) of the dense tables' 200,000 choices went from a CUTLASS config to another or
# to the cuBLAS prior; the grouped tables' choices stayed. The scaled grouped tables' (<slug>.grouped_gemm.<scales>
# .wtt) are those of the same records under their own FP8 families' names and config spaces.
DIGESTS = {
    "nvidia-h100-80gb-hbm3.wtt": "521b7e089d4f01ee",
    "nvidia-h100-80gb-hbm3.grouped_gemm.wtt": "b6d874f00e66617f",
    "nvidia-h100-80gb-hbm3.grouped_gemm.row.wtt": "22c2cc1b48841a5b",
    "nvidia-h100-80gb-hbm3.grouped_gemm.block128.wtt": "b885532340f95c20",
    "nvidia-h100-80gb-hbm3.attention.wtt": "5437f367f3b6bbbc",
    "nvidia-h200.wtt": "b69f46d496fae8cd",
    "nvidia-h200.grouped_gemm.wtt": "4b9d8f11e4d326cb",
    "nvidia-h200.attention.wtt": "41417c2dc7d0104e",
    "nvidia-h200.grouped_gemm.row.wtt": "b170e38dc72a3561",
    "nvidia-h200.grouped_gemm.block128.wtt": "c0f38f6748310aee",
}


def family_of(table: Path) -> str:
    """<gpu-slug>.<family>[.<scales>].wtt, or <gpu-slug>.wtt for the dense GEMM's."""
    parts = table.name.split(".")
    return parts[1] if len(parts) >= 3 else "gemm"


@pytest.fixture(scope="module")
def choice_dump(tmp_path_factory) -> Path:
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler (c++, g++ or $CXX): cannot build choice_dump")
    root = tmp_path_factory.mktemp("choice_dump")
    spaces = sorted((REPO / "cutlass_configs").glob("*.toml"))
    subprocess.run([sys.executable, str(REPO / "python" / "wavetune" / "codegen" / "config_space.py"), *map(str, spaces),
                    str(root / "gen"), "--kernel-set=full"], check=True, capture_output=True)
    package = Path(wavetune.__file__).parent
    (library,) = (package / "lib").glob("libwavetune_lookup.so.*")
    program = root / "choice_dump"
    subprocess.run([compiler, "-O2", "-std=c++17", f"-I{package / 'include'}", f"-I{root / 'gen'}",
                    str(REPO / "benchmarks" / "cpp" / "choice_dump.cpp"), str(library), f"-Wl,-rpath,{library.parent}",
                    "-o", str(program)], check=True, capture_output=True)
    return program


def test_every_shipped_table_has_a_recorded_digest():
    assert sorted(p.name for p in (REPO / "tables").glob("*.wtt")) == sorted(DIGESTS)


@pytest.mark.parametrize("name", sorted(DIGESTS))
def test_choices_are_bit_identical_to_the_recorded_ones(choice_dump, name):
    table = REPO / "tables" / name
    done = subprocess.run([str(choice_dump), family_of(table), str(table), str(PROBLEMS)], capture_output=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.count(b"\n")
    assert lines == PROBLEMS and b"refused" not in done.stdout
    digest = hashlib.sha256(done.stdout).hexdigest()[:16]
    assert digest == DIGESTS[name], f"{name}: the choices changed (digest {digest})"

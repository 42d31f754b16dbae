"""Run time imports neither the tuner (wavetune.tuning) nor the code generator (wavetune.codegen), checked where it
counts: in a fresh interpreter that imports wavetune and every run-time module, drives the run-time paths that
work without a GPU (tables loaded, named and bound by the native loader, the variants the JIT would compile and
their cache, a variant library's source written as a compile writes it), and then lists ``sys.modules``. On a
GPU, the same after a first call that starts a background compile. (tests/test_package_structure.py checks the
import lines themselves.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

PACKAGE = REPO / "python" / "wavetune"
OFFLINE = ("wavetune.tuning", "wavetune.codegen")
# The run-time modules, as globs over the package's source: the shared run-time layer, each family's entry points
# and torch operators, and the torch-facing modules.
RUN_TIME = ("runtime/*.py", "families/*/api.py", "families/*/torch_ops.py", "torch_ops.py", "torch_library.py",
            "nn.py", "fused.py", "hf.py")


def run_time_modules() -> list[str]:
    paths = sorted({p for pattern in RUN_TIME for p in PACKAGE.glob(pattern)})
    return [".".join(["wavetune", *p.relative_to(PACKAGE).with_suffix("").parts]).removesuffix(".__init__")
            for p in paths]


# Run in a fresh interpreter: imports the run-time modules (those that need torch where it is installed), drives
# the run-time paths, prints the offline modules it finds in sys.modules as JSON. argv[1]: a scratch directory.
DRIVE_RUN_TIME = """
import importlib, json, sys, warnings
from pathlib import Path
import wavetune
from wavetune import families
from wavetune.runtime import configs, jit, tables

try:
    import torch  # noqa: F401
except ImportError:
    torch = None
for name in MODULES:
    needs_torch = name.endswith(("torch_ops", "torch_library")) or name in ("wavetune.nn", "wavetune.fused",
                                                                            "wavetune.hf")
    if torch is not None or not needs_torch:
        importlib.import_module(name)
scratch = Path(sys.argv[1])
for family in families.all():
    tables.table_file_name("NVIDIA H100 80GB HBM3", family.name), tables.default_table_path("NVIDIA H100", family.name)
    family.list_configs(), family.compiled_hash()
    configs.config_space(family.name)
    jit.missing_variants(family.name)
    jit.build_requests(None, family.name, False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a build that cannot compile says so once
        jit.prepare_builtin_choice(family.name)  # as a family's first call without a table prepares
for table in sorted(tables.TABLE_DIR.glob("*.wtt")):
    family = wavetune._C.table_family(str(table))
    tables.open_table(table, family).variant_names()
    jit.working_set(table, family)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a build that cannot compile says so once
        jit.prepare_table(table, family)  # as load_table prepares a table (WAVETUNE_JIT=0: nothing compiles)
if jit.unavailable_reason() is None:
    jit.cache_for("gemm", jit.Target(90, 90, specific=True))
missing = jit.missing_variants("gemm")
if missing:  # the code generator runs in a process of its own
    jit.generate_source("gemm", [missing[0].name], scratch / "variant.cu")
    assert missing[0].name in (scratch / "variant.cu").read_text()
print(json.dumps(sorted(m for m in sys.modules if m.startswith(OFFLINE))))
"""


def offline_modules_after(code: str, tmp_path, env: dict | None = None, timeout: int = 300) -> list[str]:
    """The offline modules in sys.modules after ``code`` ran in a fresh interpreter (its last line of output)."""
    prelude = f"MODULES = {run_time_modules()!r}\nOFFLINE = {OFFLINE!r}\n"
    done = subprocess.run([sys.executable, "-c", prelude + code, str(tmp_path)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "WAVETUNE_CACHE_DIR": str(tmp_path / "cache"),
                                                **(env or {})})
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_run_time_module_is_driven():
    names = run_time_modules()
    assert {"wavetune.runtime.jit", "wavetune.runtime.tables", "wavetune.families.gemm.api",
            "wavetune.families.gemm.torch_ops", "wavetune.nn", "wavetune.hf"} <= set(names)
    assert not [n for n in names if n.startswith(OFFLINE)]


def test_run_time_imports_neither_the_tuner_nor_the_code_generator(tmp_path):
    assert offline_modules_after(DRIVE_RUN_TIME, tmp_path, {"WAVETUNE_JIT": "0"}) == []


def test_the_check_sees_an_offline_import(tmp_path):
    """The same run with one tuning module imported on the way reports it: the check is not blind."""
    code = DRIVE_RUN_TIME.replace("scratch = Path", "import wavetune.tuning.tablefile\nscratch = Path", 1)
    assert "wavetune.tuning.tablefile" in offline_modules_after(code, tmp_path, {"WAVETUNE_JIT": "0"})


# A first dense GEMM call on the GPU with an empty kernel cache and the background compiles on: it loads the
# shipped table, whose working set starts compiling; once a variant's source is in the cache (the compile's code
# generation ran), the offline modules in sys.modules are printed.
FIRST_CALL = """
import glob, json, os, sys, time
import torch, wavetune
x = torch.randn(200, 512, device="cuda", dtype=torch.bfloat16)
w = torch.randn(1024, 512, device="cuda", dtype=torch.bfloat16)
torch.testing.assert_close(wavetune.gemm(x, w.t()).float(), x.float() @ w.float().T, rtol=2e-2, atol=2e-1)
start = time.monotonic()
while not glob.glob(os.path.join(os.environ["WAVETUNE_CACHE_DIR"], "*", "*.cu")) and time.monotonic() - start < 120:
    time.sleep(0.2)
assert glob.glob(os.path.join(os.environ["WAVETUNE_CACHE_DIR"], "*", "*.cu")), "no background compile started"
print(json.dumps(sorted(m for m in sys.modules if m.startswith(OFFLINE))))
"""


@pytest.mark.gpu
def test_a_first_call_that_starts_a_background_compile_imports_neither(tmp_path):
    import wavetune
    from wavetune.runtime import jit, tables

    if (reason := jit.unavailable_reason()) is not None:
        pytest.skip(reason)
    table = tables.default_table_path(wavetune.device_properties()["name"])
    if table is None or not jit.working_set(table, "gemm"):
        pytest.skip("this GPU's gemm table names no variant this build lacks: nothing compiles on the first call")
    assert offline_modules_after(FIRST_CALL, tmp_path, {"WAVETUNE_JIT": "1"}) == []

"""A kernel family is a folder on each side (docs/architecture.md, "What a kernel family touches"): its C++ in
csrc/families/<name>/, its Python in python/wavetune/families/<name>/, its variants generated from a config
space in cutlass_configs/ with a [family] table naming it, built into its C++ folder, or both, and tuned tables
with their rules where it has a tuning driver; the build, the registries and the bindings find them, so no file outside a
family's folders lists the families. Read from the tree; needs neither a build nor a GPU."""

from __future__ import annotations

import re
import tomllib

from conftest import REPO, cpp_family_folders

CPP_FAMILIES = REPO / "csrc" / "families"
PY_FAMILIES = REPO / "python" / "wavetune" / "families"
# What each C++ folder holds: its launch (CUDA) and bindings; without a config space also its registry
# (KernelFamily) and the launch stubs of a build without nvcc, which a config space's [family] table generates.
CPP_FILES = {"launch.cu", "bindings.cpp"}
HAND_REGISTERED_CPP_FILES = {"registry.cpp", "unavailable.cpp"}
PY_MODULES = {"__init__.py", "api.py", "torch_ops.py"}
# What a family with a config space has besides: its tables' rules (TableFamily) and its tuning driver.
TABLE_CPP_FILES, TABLE_PY_MODULES = {"table_rules.cpp"}, {"tuning.py"}


def config_space_families() -> set[str]:
    return {tomllib.loads(p.read_text())["family"]["name"] for p in (REPO / "cutlass_configs").glob("*.toml")}


def test_each_family_has_a_cpp_folder_a_python_folder_and_its_variants():
    cpp = {p.name for p in cpp_family_folders()}
    python = {p.name for p in PY_FAMILIES.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert cpp == python and config_space_families() <= cpp
    for name in cpp:
        descriptor = (PY_FAMILIES / name / "__init__.py").read_text()
        declared = re.search(r'config_space="([^"]*)"', descriptor).group(1)
        generated = name in config_space_families()
        assert bool(declared) == generated, f"{name}: config_space={declared!r} but cutlass_configs/ says {generated}"
        tuned = not re.search(r'tuning=""', descriptor)  # a tuning driver (the default), hence tables
        assert not tuned or generated, f"{name}: tables are tuned over a config space"
        cpp_files = CPP_FILES | (TABLE_CPP_FILES if tuned else set()) | (set() if generated else HAND_REGISTERED_CPP_FILES)
        assert cpp_files <= {p.name for p in (CPP_FAMILIES / name).iterdir()}
        assert PY_MODULES | (TABLE_PY_MODULES if tuned else set()) <= {p.name for p in (PY_FAMILIES / name).iterdir()}


def test_each_folder_registers_its_family_once_under_its_own_name():
    """A family with a config space has its KernelFamily and FamilyBindings registered by the code generated from
    its [family] table (and defines bind_<name> for it); one without registers them by hand."""
    generated = config_space_families()
    for folder in cpp_family_folders():
        registrations = {
            "KernelFamily": (folder / "registry.cpp", r'KernelFamily \w+\{"(\w+)"'),
            "TableFamily": (folder / "table_rules.cpp", r'TableFamily \w+\{"(\w+)"'),
            "FamilyBindings": (folder / "bindings.cpp", r'FamilyBindings registration\("(\w+)"'),
        }
        for kind, (path, pattern) in registrations.items():
            if kind == "TableFamily" and not path.exists():
                continue  # built-in variants only: no tables yet
            text = path.read_text() if path.exists() else ""
            expected = [] if folder.name in generated and kind != "TableFamily" else [folder.name]
            assert re.findall(pattern, text) == expected, f"{path}: {len(expected)} {kind} named {folder.name}"
        if folder.name in generated:
            bindings = (folder / "bindings.cpp").read_text()
            assert f"void bind_{folder.name}(py::module_& m, const FamilyBindings&" in bindings, folder
    for folder in PY_FAMILIES.iterdir():
        if (folder / "__init__.py").is_file():
            text = (folder / "__init__.py").read_text()
            assert re.findall(r'register\(Family\(\s*name="(\w+)"', text) == [folder.name], folder


def test_the_build_names_no_family():
    cmake = (REPO / "CMakeLists.txt").read_text()
    code = "\n".join(line for line in cmake.splitlines() if not line.lstrip().startswith("#"))
    for name in config_space_families():
        assert not re.search(rf"\b{name}\b", code), f"CMakeLists.txt names the {name} family"

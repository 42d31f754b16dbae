"""The Python package's modules, subpackages included, use each other through public names only, and import
each other without a cycle at module level. The kernel families are found by the registry, so no module
outside a family's subpackage names one. Read from the source with ast; needs neither torch nor a build."""

from __future__ import annotations

import ast

from conftest import REPO

PACKAGE = REPO / "python" / "wavetune"
NATIVE = "wavetune._C"  # the compiled module: underscored by the extension convention, public to the package
FAMILIES = ("gemm", "grouped_gemm", "attention", "scaled_gemm", "paged_attention")


def module_name(path) -> str:
    parts = ["wavetune", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, tuple[ast.Module, bool]]:
    """Dotted name -> (tree, is a package's __init__) of every module of the package."""
    return {module_name(path): (ast.parse(path.read_text(), str(path)), path.name == "__init__.py")
            for path in sorted(PACKAGE.rglob("*.py"))}


def package_imports(name: str, tree: ast.Module, is_package: bool, known: set[str], top_level_only: bool
                    ) -> list[tuple[str, list[str]]]:
    """(imported module, imported names) of each import of one of the package's modules: ``from . import m``
    and ``from .p import m`` name module m ([] names); ``from .m import n`` names n of module m."""
    nodes = tree.body if top_level_only else ast.walk(tree)
    here = name if is_package else name.rsplit(".", 1)[0]
    found = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            base = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
            base = f"{base}.{node.module}" if node.module else base
            names = []
            for alias in node.names:
                if f"{base}.{alias.name}" in known or f"{base}.{alias.name}" == NATIVE:
                    found.append((f"{base}.{alias.name}", []))
                else:
                    names.append(alias.name)
            if names:
                found.append((base, names))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("wavetune"):
            found.append((node.module, [alias.name for alias in node.names]))
    return found


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name != NATIVE.rsplit(".", 1)[1]


def test_every_module_is_found():
    found = modules()
    for name in ("wavetune.families", "wavetune.families.gemm.api", "wavetune.runtime.tables",
                 "wavetune.tuning.runner", "wavetune.codegen.config_space", "wavetune.nn", "wavetune.torch_ops"):
        assert name in found
    for family in FAMILIES:
        tuned = (PACKAGE / "families" / family / "tuning.py").exists()  # built-in variants only: no tuning
        roles = ("api", "torch_ops", "tuning") if tuned else ("api", "torch_ops")
        assert {f"wavetune.families.{family}.{m}" for m in roles} <= set(found)


def test_no_private_name_crosses_a_module():
    found = modules()
    known = set(found)
    crossings = []
    for name, (tree, is_package) in found.items():
        imported_modules = {}
        for module, names in package_imports(name, tree, is_package, known, top_level_only=False):
            if module != name:
                crossings += [f"{name}: from {module} import {n}" for n in names if private(n)]
            if not names:
                imported_modules[module.rsplit(".", 1)[1]] = module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:  # `from .p import m as alias`
                    if alias.asname:
                        for module in list(imported_modules.values()):
                            if module.endswith(f".{alias.name}"):
                                imported_modules[alias.asname] = module
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in imported_modules and imported_modules[node.value.id] != NATIVE
                    and private(node.attr)):
                crossings.append(f"{name}: {node.value.id}.{node.attr}")
    assert not crossings, crossings


def test_no_import_cycle_at_module_level():
    found = modules()
    known = set(found)
    graph = {}
    for name, (tree, is_package) in found.items():
        edges = set()
        for module, _ in package_imports(name, tree, is_package, known, top_level_only=True):
            # Importing a submodule runs its packages' __init__ first.
            parts = module.split(".")
            edges |= {".".join(parts[:i]) for i in range(2, len(parts) + 1)} & known
        graph[name] = edges - {name}

    def cycle_from(start: str, path: list[str]) -> list[str] | None:
        for nxt in graph.get(path[-1], ()):
            if nxt == start:
                return path + [nxt]
            if nxt not in path and (found := cycle_from(start, path + [nxt])):
                return found
        return None

    # A package's __init__ importing its own submodules is the package's business; any other cycle is not.
    cycles = [c for name in graph if (c := cycle_from(name, [name]))
              and not all(b.startswith(a + ".") or a.startswith(b + ".") for a, b in zip(c, c[1:]))]
    assert not cycles, cycles[0]


# Modules that may name a family other than gemm, and why.
NAMES_FAMILIES = {
    "__init__.py": "the public API: each family's entry points, by name",
    "codegen/config_space.py": "its rule sets (a [family] table's check) are named after the kernels they check",
    "tuning/tablefile.py": "the table format's per-family rules, as the C++ reader has them (docs/tables.md)",
    "hf.py": "transformers' vocabulary: the attention and experts implementations of its model classes",
}


def test_no_module_outside_a_family_names_the_families():
    """The families come from the registry: a family named in code anywhere else (a list of them, a branch on
    one, an import of its modules) would go stale when one is added. Docstrings and comments may say them."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "families" and len(relative.parts) > 2 or relative.as_posix() in NAMES_FAMILIES:
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module)) and node.body
                      and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in FAMILIES[1:] and id(node) not in docstrings:
                offenders.append(f"{relative}:{node.lineno}: {node.value!r}")
            if isinstance(node, ast.ImportFrom) and any(f"families.{f}" in (node.module or "") for f in FAMILIES[1:]):
                offenders.append(f"{relative}:{node.lineno}: from {node.module}")
    assert not offenders, offenders

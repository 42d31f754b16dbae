"""The Python package's modules use each other through public names only, and import each other without a
cycle at module level. Read from the source with ast; needs neither torch nor a build."""

from __future__ import annotations

import ast

from conftest import REPO

PACKAGE = REPO / "python" / "wavetune"
NATIVE = "_C"  # the compiled module: underscored by the extension convention, public to the package


def modules() -> dict[str, ast.Module]:
    return {path.stem: ast.parse(path.read_text(), str(path)) for path in PACKAGE.glob("*.py")}


def sibling_imports(tree: ast.Module, top_level_only: bool) -> list[tuple[str, list[str]]]:
    """(module, imported names) of each ``from . import m`` / ``from .m import n``; [] names for a module."""
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is None:
                found += [(alias.name, []) for alias in node.names]
            else:
                found.append((node.module, [alias.name for alias in node.names]))
    return found


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name != NATIVE


def test_no_private_name_crosses_a_module():
    crossings = []
    for name, tree in modules().items():
        imported_modules = set()
        for module, names in sibling_imports(tree, top_level_only=False):
            crossings += [f"{name}: from .{module} import {n}" for n in names if private(n)]
            if not names:
                imported_modules.add(module)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in imported_modules and private(node.attr)):
                crossings.append(f"{name}: {node.value.id}.{node.attr}")
    assert not crossings, crossings


def test_no_import_cycle_at_module_level():
    graph = {name: {module for module, _ in sibling_imports(tree, top_level_only=True) if module != NATIVE}
             for name, tree in modules().items()}

    def cycle_from(start: str, path: list[str]) -> list[str] | None:
        for nxt in graph.get(path[-1], ()):
            if nxt == start:
                return path + [nxt]
            if nxt not in path and (found := cycle_from(start, path + [nxt])):
                return found
        return None

    cycles = [c for name in graph if (c := cycle_from(name, [name]))]
    assert not cycles, cycles[0]

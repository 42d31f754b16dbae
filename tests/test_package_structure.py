"""The Python package's modules, subpackages included, use each other through public names only, and import
each other without a cycle at module level (the run-time layer, runtime/, at any level). The kernel families
are found by the registry, so no module outside a family's subpackage names one, and the tuner and the code
generator reach one through its descriptor. The tests use the package and their own helpers, not benchmark
scripts. Read from the source with ast; needs neither torch nor a build (tests/test_layers.py checks what run
time imports, in a fresh interpreter)."""

from __future__ import annotations

import ast

from conftest import REPO, cpp_family_folders

PACKAGE = REPO / "python" / "wavetune"
NATIVE = "wavetune._C"  # the compiled module: underscored by the extension convention, public to the package


def registered_families() -> list[str]:
    """The families the registry finds: the name each subpackage of wavetune.families registers
    (``register(Family(name=...))``), read from its source."""
    names = []
    for init in sorted((PACKAGE / "families").glob("*/__init__.py")):
        calls = [n for n in ast.walk(ast.parse(init.read_text())) if isinstance(n, ast.Call)
                 and ast.unparse(n.func) == "Family"]
        assert len(calls) == 1, f"{init.relative_to(PACKAGE)} describes {len(calls)} families, not one"
        names += [k.value.value for k in calls[0].keywords if k.arg == "name"]
    return names


FAMILIES = registered_families()
# The families other than dense GEMM, the default that shared code may name (load_table's family="gemm").
OTHER_FAMILIES = [f for f in FAMILIES if f != "gemm"]


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
    folders = [p.name for p in cpp_family_folders()]
    assert sorted(FAMILIES) == folders, "one Python family package per csrc/families folder, named alike"
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


def import_graph(top_level_only: bool) -> dict[str, set[str]]:
    """Module -> the package's modules its imports run (module level only, or function level too)."""
    found = modules()
    known = set(found)
    graph = {}
    for name, (tree, is_package) in found.items():
        edges = set()
        for module, _ in package_imports(name, tree, is_package, known, top_level_only):
            # Importing a submodule runs its packages' __init__ first.
            parts = module.split(".")
            edges |= {".".join(parts[:i]) for i in range(2, len(parts) + 1)} & known
        graph[name] = edges - {name}
    return graph


def cycles_of(graph: dict[str, set[str]]) -> list[list[str]]:
    def cycle_from(start: str, path: list[str]) -> list[str] | None:
        for nxt in graph.get(path[-1], ()):
            if nxt == start:
                return path + [nxt]
            if nxt not in path and (found := cycle_from(start, path + [nxt])):
                return found
        return None

    # A package's __init__ importing its own submodules is the package's business; any other cycle is not.
    return [c for name in graph if (c := cycle_from(name, [name]))
            and not all(b.startswith(a + ".") or a.startswith(b + ".") for a, b in zip(c, c[1:]))]


def test_no_import_cycle_at_module_level():
    cycles = cycles_of(import_graph(top_level_only=True))
    assert not cycles, cycles[0]


def test_the_run_time_layer_imports_one_way_at_any_level():
    """runtime/'s modules import each other in one direction only, in functions too: runtime.tables calls
    runtime.jit, which tells it of its compiles through listeners (a cycle would hide in a function-level import)."""
    runtime = {name: edges for name, edges in import_graph(top_level_only=False).items()
               if name.startswith("wavetune.runtime.")}
    cycles = cycles_of({name: {e for e in edges if e in runtime} for name, edges in runtime.items()})
    assert not cycles, cycles[0]


def test_the_tuner_and_the_code_generator_reach_families_through_the_registry():
    """No module of wavetune.tuning or wavetune.codegen imports a family's modules: they take the family's
    descriptor (families.get(name), families.all()) and its modules from it."""
    found = modules()
    offenders = [f"{name}: {module}" for name, (tree, is_package) in found.items()
                 if name.startswith(("wavetune.tuning.", "wavetune.codegen."))
                 for module, _ in package_imports(name, tree, is_package, set(found), top_level_only=False)
                 if module.startswith("wavetune.families.")]
    assert not offenders, offenders


def docstring_ids(tree: ast.Module) -> set[int]:
    """The ids of a module's docstring nodes (its own, its classes' and functions')."""
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module)) and node.body
            and isinstance(node.body[0], ast.Expr)}


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
        docstrings = docstring_ids(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in OTHER_FAMILIES and id(node) not in docstrings:
                offenders.append(f"{relative}:{node.lineno}: {node.value!r}")
            if isinstance(node, ast.ImportFrom) and any(f"families.{f}" in (node.module or "") for f in OTHER_FAMILIES):
                offenders.append(f"{relative}:{node.lineno}: from {node.module}")
    assert not offenders, offenders


# ---- The tests use the package and their own helpers, not benchmark scripts (issue 76) ---------------------

TESTS = REPO / "tests"
BENCHMARK_SCRIPTS = {path.stem for path in (REPO / "benchmarks").glob("*.py")}
# The tests whose subject is a benchmark script's own harness, and that script: each may load it from its file
# (never with benchmarks/ on sys.path). e2e.py's model twins, options, runs and report are a torch and
# transformers benchmark's, no part of the package.
TESTS_OF_A_BENCHMARK = {"test_e2e.py": "e2e", "test_logits_error.py": "logits_error"}
FILE_LOADERS = ("spec_from_file_location", "SourceFileLoader", "run_path")


def named_scripts(tree: ast.Module) -> set[str]:
    """The benchmark scripts a test file's strings name as files ("e2e.py", "benchmarks/e2e.py")."""
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return {name.rsplit("/", 1)[-1][:-3] for name in strings
            if name.endswith(".py") and name.rsplit("/", 1)[-1][:-3] in BENCHMARK_SCRIPTS}


def says_benchmarks(node: ast.AST, assigned: dict[str, list[ast.AST]], unknown: set[str]) -> bool:
    """Whether what an expression holds may be benchmarks/: a string that says it, a name the file assigns one to,
    or a name of ``unknown`` value (a parameter, in a file that names benchmarks/)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and "benchmarks" in sub.value:
            return True
        if isinstance(sub, ast.Name) and (sub.id in unknown or any(says_benchmarks(value, {}, set())
                                                                   for value in assigned.get(sub.id, ()))):
            return True
    return False


def added_to_sys_path(node: ast.AST) -> ast.AST | None:
    """What a call or statement adds to sys.path (sys.path.insert/append/extend, sys.path += or [...] =, pytest's
    monkeypatch.syspath_prepend), or None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "syspath_prepend" or (node.func.attr in ("insert", "append", "extend")
                                                   and ast.unparse(node.func.value) == "sys.path"):
            return ast.Tuple([*node.args, *(k.value for k in node.keywords)])
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
    return node.value if any(ast.unparse(t).startswith("sys.path") for t in targets) else None


def imported_benchmark(node: ast.AST) -> str | None:
    """The benchmark script an import statement or importlib.import_module call names, or None."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and not node.level:
        names = [node.module]
    elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module"):
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    else:
        return None
    return next((name for name in names if name.split(".")[0] in BENCHMARK_SCRIPTS), None)


def benchmark_uses(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, what) of each place a test file imports a benchmark script, puts benchmarks/ on sys.path, or loads
    a module from a file where it names a benchmark script ("loads <script>.py")."""
    assigned: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        for target in (t for t in getattr(node, "targets", ()) if isinstance(t, ast.Name)):
            assigned.setdefault(target.id, []).append(node.value)
    docstrings = docstring_ids(tree)
    names_benchmarks = any(isinstance(n, ast.Constant) and "benchmarks" in str(n.value) and id(n) not in docstrings
                           for n in ast.walk(tree))
    parameters = {a.arg for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.Lambda))
                  for a in [*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs]} if names_benchmarks else set()
    scripts = named_scripts(tree)
    found = []
    for node in ast.walk(tree):
        if name := imported_benchmark(node):
            found.append((node.lineno, f"imports {name}"))
        elif (added := added_to_sys_path(node)) is not None and says_benchmarks(added, assigned, parameters):
            found.append((node.lineno, "puts benchmarks/ on sys.path"))
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith(FILE_LOADERS):
            found += [(node.lineno, f"loads {script}.py") for script in sorted(scripts)]
    return found


def test_no_test_imports_a_benchmark_script():
    """Reference models, replays and case generators live in the package (or in the tests' own helpers), so no
    test imports a benchmark script or puts benchmarks/ on sys.path; a benchmark is at most run as a program.
    Only a test of a benchmark's own harness (TESTS_OF_A_BENCHMARK) loads that script from its file."""
    offenders = []
    for path in sorted(TESTS.glob("*.py")):
        subject = TESTS_OF_A_BENCHMARK.get(path.name)
        for line, what in benchmark_uses(ast.parse(path.read_text(), str(path))):
            if what != f"loads {subject}.py":
                offenders.append(f"tests/{path.name}:{line}: {what}")
    assert not offenders, offenders


def test_the_benchmark_check_finds_each_way_in():
    caught = ["import compare", "from scaled_gemm import replay_quality", "importlib.import_module('e2e')",
              "sys.path.insert(0, str(REPO / 'benchmarks'))", "sys.path += ['benchmarks']",
              "BENCH = REPO / 'benchmarks'\nsys.path.append(str(BENCH))", "monkeypatch.syspath_prepend('benchmarks')",
              "spec_from_file_location('e2e', REPO / 'benchmarks' / 'e2e.py')", "run_path('benchmarks/compare.py')",
              "def load(path):\n    return spec_from_file_location('x', path)\nload(REPO / 'benchmarks' / 'e2e.py')",
              "def add(path):\n    sys.path.insert(0, path)\nadd(REPO / 'benchmarks')"]
    for source in caught:
        assert benchmark_uses(ast.parse(source)), source
    for source in ["import wavetune.families.attention", "sys.path.insert(0, str(tmp_path))",
                   "paths.append('benchmarks')", "subprocess.run([sys.executable, REPO / 'benchmarks' / 'compare.py'])",
                   "spec_from_file_location('model', REPO / 'python' / 'wavetune' / 'tuning' / 'model.py')"]:
        assert not benchmark_uses(ast.parse(source)), source

"""The docs hold to the build and to themselves: every kernel set's variant counts in docs/kernels.md are the
ones cutlass_configs/*.toml select (config_space: the counts live nowhere else), the kernel sets the docs name
exist, the repository paths they cite exist, the README opens with its install and fits its speed table in 120
columns, and the code blocks of README.md, docs/torch.md's main calls and tables/README.md run. The CPU tier runs
the README's Use block and docs/torch.md's main calls up to the GPU: every wavetune call passes its own checks and
is refused only for want of a CUDA device; the GPU tier runs them as written. Raw results stay out of the tree:
docs/ stays under 2 MB, and docs/results.md indexes the results branch's files, each row with its checksum."""

from __future__ import annotations

import ast
import builtins
import functools
import gzip
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import wavetune
from conftest import (REPO, RESULTS_INDEX, INDEX_ROW, indexed_result, results_commit, results_commit_skip_reason,
                      results_index)
from wavetune.codegen import config_space

README = REPO / "README.md"
TABLES_README = REPO / "tables" / "README.md"
KERNELS_MD = REPO / "docs" / "kernels.md"
TORCH_MD = REPO / "docs" / "torch.md"
# The reference pages (docs/results.md indexes records of runs, each with its own date and build).
PAGES = [README, TABLES_README, *sorted(set((REPO / "docs").glob("*.md")) - {RESULTS_INDEX})]

# How docs/kernels.md's kernel-set table names each family's variants.
FAMILY_LABELS = {"dense": "gemm", "grouped": "grouped_gemm", "attention": "attention", "FP8": "scaled_gemm"}
COUNT_TERM = re.compile(r"(\d+) (FP8|grouped|dense|attention)\b")


@functools.cache
def spaces() -> dict[str, config_space.ConfigSpace]:
    """Each family's config space, as the build reads it."""
    return {s.family: s for s in map(config_space.load, sorted((REPO / "cutlass_configs").glob("*.toml")))}


def known_sets() -> list[str]:
    named = dict.fromkeys(name for s in spaces().values() for name in s.kernel_sets)
    return [*config_space.BUILT_IN_SETS, *named]


def selected(kernel_set: str, name_filter: str = "") -> dict[str, int]:
    """Variants per family that the build compiles for a kernel set (the `tables` set reads tables/)."""
    return {family: len(space.select(kernel_set, name_filter, REPO / "tables", allow_empty=True))
            for family, space in spaces().items()}


def code_blocks(page: Path) -> list[tuple[str, str]]:
    """(language, text) of each fenced code block of a page."""
    return re.findall(r"^```(\w*)\n(.*?)^```", page.read_text(), re.M | re.S)


def kernel_set_rows() -> list[list[str]]:
    """The cells of each row of docs/kernels.md's kernel-set table."""
    lines = KERNELS_MD.read_text().splitlines()
    start = lines.index("| kernel set | variants | build time |") + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


# ---------------------------------------------------------------------------------------------------------
# Counts: docs/kernels.md against the config files.

def test_kernels_md_states_each_kernel_sets_variants_as_the_config_files_select_them():
    documented = set()
    for name_cell, variants, *_ in kernel_set_rows():
        plain = re.fullmatch(r"\**`(\w+)`\**(?: \(.*\))?", name_cell)
        filtered = re.fullmatch(r"`(\w+)` filtered to `([^`]+)`(?: \(.*\))?", name_cell)
        if plain:
            kernel_set = plain.group(1)
            assert kernel_set in known_sets(), (
                f"docs/kernels.md lists a kernel set {kernel_set!r} that no cutlass_configs/*.toml defines "
                f"(known: {', '.join(known_sets())})")
            documented.add(kernel_set)
            counts = selected(kernel_set)
            stated = {FAMILY_LABELS[label]: int(n) for n, label in COUNT_TERM.findall(variants)}
            for family, n in counts.items():
                assert stated.get(family, 0) == n, (
                    f"docs/kernels.md: the `{kernel_set}` set has {n} {family} variants "
                    f"(cutlass_configs/sm90_{family}.toml), the table says {stated.get(family, 0)}: {variants!r}")
            total = re.findall(r"\((\d+)\)", variants)
            assert total and int(total[-1]) == sum(counts.values()), (
                f"docs/kernels.md: the `{kernel_set}` set has {sum(counts.values())} variants in all; its row must "
                f"end its count with that total in parentheses: {variants!r}")
        elif filtered:
            kernel_set, name_filter = filtered.groups()
            n = sum(selected(kernel_set, name_filter).values())
            assert variants == str(n), (
                f"docs/kernels.md: `{kernel_set}` filtered to `{name_filter}` selects {n} variants, "
                f"the table says {variants!r}")
        else:  # a measured build of a few families' variants
            attention = re.fullmatch(r"the (\d+) attention variants and one dense", name_cell)
            assert attention, f"docs/kernels.md: a kernel-set row this test cannot check: {name_cell!r}"
            n = selected("full")["attention"]
            assert (int(attention.group(1)), variants) == (n, str(n + 1)), (
                f"docs/kernels.md: the attention family has {n} variants: {name_cell!r} | {variants!r}")
    assert documented == set(known_sets()), (
        f"docs/kernels.md's kernel-set table must have a row for each kernel set: missing "
        f"{sorted(set(known_sets()) - documented)}")


def test_the_default_kernel_set_in_the_docs_is_the_builds():
    default = re.search(r'set\(WAVETUNE_KERNEL_SET "(\w+)" CACHE', (REPO / "CMakeLists.txt").read_text()).group(1)
    marked = [cells[0] for cells in kernel_set_rows() if "default, `pip install .`" in cells[0]]
    assert marked == [f"**`{default}`** (default, `pip install .`)"], (
        f"CMakeLists.txt builds {default!r} by default; docs/kernels.md marks {marked}")
    block = next(text for language, text in code_blocks(KERNELS_MD) if "WAVETUNE_KERNEL_SET=" in text)
    first = block.splitlines()[0]
    assert first.split("#")[0].strip() == "pip install ." and f"# {default}:" in first, first


def test_the_dense_and_attention_catalogs_are_counted_from_the_config_files():
    full = selected("full")
    catalog = re.search(r"^(\d+) variants: (\d+) bf16 with column-major B", KERNELS_MD.read_text(), re.M)
    assert catalog, "docs/kernels.md's dense catalog no longer opens with 'N variants: M bf16 with column-major B'"
    bcol = selected("full", "bf16_bcol_*")["gemm"]
    assert catalog.groups() == (str(full["gemm"]), str(bcol)), (
        f"docs/kernels.md's dense catalog: cutlass_configs/sm90_gemm.toml has {full['gemm']} variants, {bcol} of "
        f"them bf16 with column-major B; the page says {catalog.group(0)!r}")
    per_dtype = re.search(r"\| variants per dtype \((\d+)\) \|", (REPO / "docs" / "attention.md").read_text())
    variants = spaces()["attention"].variants
    counts = {dtype: sum(v.dtype == dtype for v in variants) for dtype in {v.dtype for v in variants}}
    assert per_dtype and set(counts.values()) == {int(per_dtype.group(1))}, (
        f"docs/attention.md's catalog table: the attention variants per dtype are {counts}")


def test_the_readme_leaves_counts_to_the_kernels_page():
    text = README.read_text()
    counts = re.findall(r"\b\d+[- ]variants?\b", text)
    assert not counts, f"README.md states variant counts {counts}: they live in docs/kernels.md's table alone"


def test_the_docs_name_only_kernel_sets_that_exist():
    pattern = re.compile(r"WAVETUNE_KERNEL_SET=(\w+)|`(\w+)`(?: kernel)? set\b")
    for page in PAGES:
        for match in pattern.finditer(page.read_text()):
            name = match.group(1) or match.group(2)
            assert name in known_sets(), (
                f"{page.relative_to(REPO)} names a kernel set {name!r} that no cutlass_configs/*.toml defines "
                f"(known: {', '.join(known_sets())})")


def test_the_default_install_time_is_stated_once():
    """A figure lives in one place: the default install's time is in docs/kernels.md's kernel-set table."""
    figure = re.search(r"\*\*(\d+ min \d+ s)\*\* wall for `pip install", KERNELS_MD.read_text())
    assert figure, "docs/kernels.md's `builtin` row gives the default install's wall time"
    elsewhere = [page.relative_to(REPO) for page in PAGES if page != KERNELS_MD and figure.group(1) in page.read_text()]
    assert not elsewhere, f"the install time {figure.group(1)!r} is repeated in {elsewhere}"


# ---------------------------------------------------------------------------------------------------------
# Paths the docs cite.

CITED = re.compile(r"`((?:benchmarks|tests|csrc|python|cmake|cutlass_configs|tables|docs|examples|\.ci)/[^`\s]*)`")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
LINK_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s+<?([^>\s#]+)", re.M)  # [key]: target, for [text][key] links
PLACEHOLDER = re.compile(r"[<>*{}\[\]]|(?:^|/|_)F(?:/|\.|$)")  # <family>, globs, `sm90_F.cuh` for a family F


def test_every_path_the_docs_cite_exists():
    package = Path(wavetune.__file__).parent
    roots = [REPO, package, package / "data" / "cutlass"]  # CUTLASS's examples/ come with the package
    missing = []
    for page in [*PAGES, RESULTS_INDEX]:
        text = page.read_text()
        for path in CITED.findall(text) if page in PAGES else []:
            path = path.split(":")[0].rstrip(".,;")
            if not PLACEHOLDER.search(path) and not any((root / path).exists() for root in roots):
                missing.append(f"{page.relative_to(REPO)}: `{path}`")
        for target in [*LINK.findall(text), *LINK_DEFINITION.findall(text)]:
            if not re.match(r"[a-z]+:", target) and not (page.parent / target).exists():
                missing.append(f"{page.relative_to(REPO)}: ({target})")
    assert not missing, "the docs cite paths that do not exist:\n" + "\n".join(missing)


# ---------------------------------------------------------------------------------------------------------
# Raw results: on the results branch, indexed in docs/results.md with their checksums.

DOCS_LIMIT_BYTES = 2 * 1024 * 1024
RESULT_ROW_LINK = re.compile(r"results\.md#([\w.*-]*[\w*])")  # a row's anchor is its file name (or a glob)


def sources_that_cite_results() -> list[Path]:
    """The pages, and the Python of the package, benchmarks and tests (this file aside), which name raw results
    in comments."""
    code = [path for folder in ("python", "benchmarks", "tests") for path in sorted((REPO / folder).rglob("*.py"))]
    return [*PAGES, *(path for path in code if path != Path(__file__).resolve())]


def test_docs_stay_under_2_mb():
    sizes = {path: path.stat().st_size for path in (REPO / "docs").rglob("*") if path.is_file()}
    total = sum(sizes.values())
    largest = sorted(sizes, key=sizes.get, reverse=True)[:5]
    assert total < DOCS_LIMIT_BYTES, (
        f"docs/ holds {total / 2**20:.2f} MB, over 2 MB: raw results go on the results branch, indexed in "
        f"docs/results.md; the largest files: {[f'{p.relative_to(REPO)} ({sizes[p]} B)' for p in largest]}")


def test_every_results_index_row_names_one_file_with_its_sha256_device_and_date():
    names = [name for name, _ in INDEX_ROW.findall(RESULTS_INDEX.read_text())]
    assert len(names) > 100 and len(names) == len(set(names)), "docs/results.md must have one row per file"
    rows = [line for line in RESULTS_INDEX.read_text().splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) == len(names), [row for row in rows if not INDEX_ROW.match(row)][:3]
    for name, cells in results_index().items():
        *_, device, date, checksum = cells
        assert re.fullmatch(r"`[0-9a-f]{64}`", checksum), f"{name}: no sha256 in its last column: {checksum}"
        assert re.search(r"H100|H200|CPU", device), f"{name}: its device column names no device: {device}"
        assert re.fullmatch(r"\d{4}-\d\d-\d\d(, \d{4}-\d\d-\d\d)*", date), f"{name}: no date: {date}"


def test_every_citation_of_a_raw_result_names_a_row_of_the_index():
    rows, stale = results_index(), []
    for source in sources_that_cite_results():
        text = source.read_text()
        stale += [f"{source.relative_to(REPO)}: docs/results/{path}" for path in re.findall(r"docs/results/(\S*)", text)]
        stale += [f"{source.relative_to(REPO)}: #{name}" for name in RESULT_ROW_LINK.findall(text)
                  if not any(re.fullmatch(re.escape(name).replace(r"\*", ".*"), row) for row in rows)]
    assert not stale, "raw results live on the results branch; cite a row of docs/results.md:\n" + "\n".join(stale)


def test_the_results_branch_holds_each_indexed_file_with_its_sha256():
    reason = results_commit_skip_reason()
    if reason:
        pytest.skip(reason)
    listed = subprocess.run(["git", "-C", str(REPO), "ls-tree", "-r", "--name-only", results_commit()],
                            capture_output=True, text=True, check=True).stdout.split()
    files, rows = set(listed) - {"README.md"}, set(results_index())
    assert files == rows, f"not indexed: {sorted(files - rows)}; indexed, not on the branch: {sorted(rows - files)}"
    for name in rows:
        indexed_result(name)  # checks the row's sha256


# ---------------------------------------------------------------------------------------------------------
# README.md's first screen: what it is, the install, one call, then one table of speedups.

SPEED_TABLE_HEADING = "## Measured speedups over what PyTorch calls by default"


def speed_table() -> list[str]:
    """The lines of the README's speed table, the one table under its heading."""
    lines = README.read_text().splitlines()
    assert SPEED_TABLE_HEADING in lines, f"README.md has no section {SPEED_TABLE_HEADING!r}"
    start = lines.index(SPEED_TABLE_HEADING) + 1
    first = next((i for i in range(start, len(lines)) if lines[i].startswith(("|", "## "))), len(lines))
    assert first < len(lines) and lines[first].startswith("|"), f"README.md's {SPEED_TABLE_HEADING!r} has no table"
    end = next((i for i in range(first, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[first:end]


def test_the_readme_opens_with_its_install_and_one_call_and_its_speed_table_fits_in_120_columns():
    text = README.read_text()
    lines = text.splitlines()
    assert any("pip install" in line for line in lines[:25]), "README.md must show `pip install` in its first 25 lines"
    assert lines.index("## Set up") < lines.index("## Use") < lines.index(SPEED_TABLE_HEADING), (
        "README.md opens with its install (## Set up) and one call (## Use); the speed table follows")
    table = speed_table()
    assert len(table) > 2 and re.fullmatch(r"\|( --- \|)+", table[1]), table[:2]
    others = [line for line in lines if line.startswith("|") and line not in table]
    assert not others, f"README.md holds one table, its speed table; other table lines: {others}"
    wide = [f"{len(line)} characters: {line}" for line in table if len(line) > 120]
    assert not wide, "README.md's speed table must stay within 120 columns:\n" + "\n".join(wide)
    defined = set(re.findall(r"^\[([^\]]+)\]:", text, re.M))
    used = set(re.findall(r"\]\[([^\]]+)\]", text))
    assert used <= defined, f"README.md links to references it does not define: {sorted(used - defined)}"


# ---------------------------------------------------------------------------------------------------------
# README.md's code blocks, and docs/torch.md's main calls.

def readme_blocks() -> dict[str, str]:
    """README.md's code blocks by what they are; a block this file does not know fails here, so that each
    one has a test."""
    kinds = {}
    for language, text in code_blocks(README):
        if language == "python":
            kind = "use"
        elif language == "bash" and 'pip install ".[test]"' in text:
            kind = "setup"  # tests/test_first_hour.py: the commands CI runs as written
        elif language == "bash" and all(line.startswith("python -m wavetune ") or line.startswith(" ")
                                        for line in text.splitlines()):
            kind = "cli"
        else:
            raise AssertionError(f"README.md has a code block no test runs; add it to tests/test_docs.py:\n{text}")
        assert kind not in kinds, f"README.md has two {kind} blocks; tests/test_docs.py runs one"
        kinds[kind] = text
    assert set(kinds) == {"setup", "use", "cli"}, sorted(kinds)
    return kinds


def main_calls_block() -> str:
    """docs/torch.md's block of the main calls: the one Python block under its heading."""
    text = TORCH_MD.read_text()
    heading = "\n## The main calls, in one block\n"
    assert heading in text, f"docs/torch.md has no section{heading.rstrip()}; tests/test_docs.py runs its block"
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```", section, re.M | re.S)
    assert len(blocks) == 1, f"docs/torch.md's main calls section must hold one Python block, not {len(blocks)}"
    return blocks[0]


# The Python blocks a reader copies: the README's one call, and docs/torch.md's main calls, which patch a model.
USE_BLOCKS = {"README.md (Use)": (lambda: readme_blocks()["use"], False),
              "docs/torch.md (the main calls)": (main_calls_block, True)}


@pytest.mark.parametrize("name", USE_BLOCKS)
def test_the_use_blocks_define_every_name_before_they_use_it(name):
    get_block, _ = USE_BLOCKS[name]
    defined = set(dir(builtins))
    undefined = []
    for statement in ast.parse(get_block()).body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in defined:
                undefined.append(f"line {node.lineno}: {node.id}")
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                defined.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    assert not undefined, f"{name} uses names it does not define: {undefined}"


def stand_ins(torch) -> dict:
    """A result of the right shape and dtype for each wavetune call the Use block makes, in place of what the
    GPU would compute."""
    fp8 = torch.float8_e4m3fn
    return {
        "gemm": lambda a, b, **_: torch.empty(a.shape[0], b.shape[1], dtype=a.dtype),
        "grouped_gemm": lambda x, w, offsets, **_: torch.empty(x.shape[0], w.shape[1], dtype=x.dtype),
        "attention": lambda q, k, v, **_: torch.empty_like(q),
        "paged_attention": lambda q, *_, **__: torch.empty_like(q),
        "quantize_fp8": lambda x, **_: (torch.empty(x.shape, dtype=fp8), torch.ones(*x.shape[:-1], 1)),
        "scaled_gemm": lambda a, b, *_, out_dtype=None, **__: torch.empty(
            a.shape[0], b.shape[1], dtype=out_dtype or torch.bfloat16),
        "scaled_grouped_gemm": lambda x, w, *_, out_dtype=None, **__: torch.empty(
            x.shape[0], w.shape[1], dtype=out_dtype or torch.bfloat16),
    }


class UpToTheGpu:
    """``wavetune`` for the Use block on CPU tensors: each call runs the real entry point, whose checks of
    shapes, dtypes and layouts must all pass, so that only the CUDA device is refused; a stand-in result then
    lets the block go on."""

    def __init__(self, torch):
        self.stand_ins = stand_ins(torch)
        self.reached_the_gpu: list[str] = []

    def __getattr__(self, name: str):
        entry = getattr(wavetune, name)

        def call(*args, **kwargs):
            try:
                return entry(*args, **kwargs)
            except ValueError as exc:
                if not re.search(r"CUDA (device|tensor)", str(exc)):
                    raise AssertionError(f"README.md's Use block: wavetune.{name} refuses its arguments "
                                         f"before the GPU: {exc}") from exc
            assert name in self.stand_ins, f"tests/test_docs.py: add a stand-in result for wavetune.{name}"
            self.reached_the_gpu.append(name)
            return self.stand_ins[name](*args, **kwargs)

        return call


@pytest.mark.parametrize("name", USE_BLOCKS)
def test_the_use_blocks_run_on_cpu_up_to_the_gpu(monkeypatch, name):
    torch = pytest.importorskip("torch")
    get_block, patches = USE_BLOCKS[name]
    block = get_block()
    assert ("wavetune.patch(" in block) == patches, f"{name}: this test expects patch {'in' if patches else 'out'}"
    on_cpu = block.replace('device="cuda"', 'device="cpu"').replace("import torch, wavetune\n", "import torch\n")
    assert "cuda" not in on_cpu, f"{name} names CUDA other than as device=\"cuda\""
    assert "wavetune =" not in on_cpu and "import wavetune" not in on_cpu, f"{name} must import wavetune once"
    # Shapes and dtypes are what the checks read: empty tensors spare filling gigabytes of weights.
    monkeypatch.setattr(torch, "randn", lambda *size, **kwargs: torch.empty(*size, **kwargs))
    proxy = UpToTheGpu(torch)
    scope = {"wavetune": proxy, "__name__": "readme"}
    exec(compile(on_cpu, name, "exec"), scope)
    called = set(re.findall(r"wavetune\.(\w+)\(", block))
    assert "gemm" in called and set(proxy.reached_the_gpu) == called - {"patch"}, proxy.reached_the_gpu
    if patches:
        report = scope["report"]  # patch runs on CPU: it leaves CPU layers alone and says why
        assert report.patched == [] and report.skipped, report
        assert all(reason.startswith("on cpu") for reason in report.skipped.values()), report.skipped


@pytest.mark.gpu
@pytest.mark.parametrize("name", USE_BLOCKS)
def test_the_use_blocks_run_as_written(name):
    import torch

    get_block, patches = USE_BLOCKS[name]
    scope = {"__name__": "readme"}
    exec(compile(get_block(), name, "exec"), scope)
    torch.cuda.synchronize()
    x, W, b = scope["x"], scope["W"], scope.get("b")  # the README's call has no bias
    torch.testing.assert_close(scope["y"], torch.nn.functional.linear(x, W, b), rtol=2e-2, atol=2e-1)
    if patches:
        assert len(scope["report"].patched) == 2, scope["report"]


NO_GPU = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


def test_the_readme_commands_work_or_say_in_one_line_what_they_need(tmp_path):
    """Each command of the README's command-line block, as written, without a GPU and without nvcc: it works,
    or (a GPU or nvcc needed) ends with one line saying what is missing. `T.wtt` is a shipped table.
    tests/test_first_hour.py explains the same GEMM with `--table`, as the block's comment says."""
    table = REPO / "tables" / "nvidia-h100-80gb-hbm3.wtt"
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    env = {key: value for key, value in NO_GPU.items() if key not in ("CUDACXX", "CUDA_HOME", "CUDA_PATH")}
    env |= {"PATH": path, "PYTHONPATH": str(Path(wavetune.__file__).parent.parent)}
    if shutil.which("nvcc", path=path):
        pytest.skip(f"nvcc is in {path}: `build` would compile for minutes")
    for line in readme_blocks()["cli"].splitlines():
        command = line.split("#")[0].split()
        if not command:
            continue
        assert command[:3] == ["python", "-m", "wavetune"], line
        args = [str(table) if arg == "T.wtt" else arg for arg in command[3:]]
        done = subprocess.run([sys.executable, "-m", "wavetune", *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=120)
        assert "Traceback" not in done.stderr, f"{line}\n{done.stderr}"
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines()
            assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"wavetune {args[0]}: error: "), (
                f"{line}\n{done.stderr}")
            assert re.search(r"GPU|nvcc|--table", lines[0]), f"{line}: fails for another reason than no GPU: {lines[0]}"


# ---------------------------------------------------------------------------------------------------------
# tables/README.md's code block.

@pytest.mark.parametrize("slug, log", [("nvidia-h200", "tune_h200"), ("nvidia-h100-80gb-hbm3", "tune_h100")])
def test_the_tables_readme_rebuilds_the_compute_record_byte_for_byte(tmp_path, raw_result, slug, log):
    """The block as written (for the H100, with its table and log in place of the H200's) on a copy of the
    table without its compute record, run from a directory laid out as the repository, with the tuning log
    from the results branch."""
    from wavetune.tuning import tablefile

    (block,) = [text for language, text in code_blocks(TABLES_README)]
    shipped = REPO / "tables" / f"{slug}.wtt"
    (tmp_path / "tables").mkdir()
    without = {**tablefile.read_table(shipped), "compute_flop_per_us": None}
    tablefile.write_table(tmp_path / "tables" / f"{slug}.wtt", **without)
    assert (tmp_path / "tables" / f"{slug}.wtt").read_bytes() != shipped.read_bytes()
    with gzip.open(raw_result(f"{log}.jsonl.gz")) as packed:  # the README's `git show ... | gunzip`
        (tmp_path / f"{log}.jsonl").write_bytes(packed.read())
    command = block.replace("tables/nvidia-h200.wtt", f"tables/{slug}.wtt").replace("tune_h200.jsonl", f"{log}.jsonl")
    env = {**NO_GPU, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "PYTHONPATH": str(Path(wavetune.__file__).parent.parent)}
    done = subprocess.run(["bash", "-euc", command], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "tables" / f"{slug}.wtt").read_bytes() == shipped.read_bytes()

"""What a new user meets first, on any machine: the README's commands, the build's incremental rebuilds and
progress, and every CLI command and public entry point without a GPU (CUDA_VISIBLE_DEVICES hides any):
each works or ends with one line saying what to do, never a traceback."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import wavetune
from wavetune.runtime import tables

from conftest import REPO

NO_GPU = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
SHIPPED_TABLE = tables.TABLE_DIR / "nvidia-h100-80gb-hbm3.wtt"


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wavetune", *args], capture_output=True, text=True, env=NO_GPU,
                          cwd=cwd or REPO.parent, timeout=120)


def one_line_error(done: subprocess.CompletedProcess, command: str) -> str:
    """The single stderr line of a command that failed as a user error (exit status 2)."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"wavetune {command}: error: "), done.stderr
    return lines[0]


def readme_setup() -> list[str]:
    block = re.search(r"## Set up\n\n```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines()]


def test_readme_setup_installs_pytest_and_ci_runs_it_as_written():
    install, test = readme_setup()
    assert (install, test) == ('pip install ".[test]"', "pytest")
    assert any(requirement.startswith("pytest") for requirement in extra("test"))
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert f"time {install}" in ci and test in ci


def extra(name: str) -> list[str]:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"][name]


LAUNCHER = REPO / "cmake" / "compile_launcher.py"


def fake_compile(tmp_path: Path, header_text: str) -> list[str]:
    """A compiler command the launcher recognizes: it 'compiles' x.cu into x.o, naming a header in its depfile."""
    (tmp_path / "x.cu").write_text("kernel")
    (tmp_path / "x.h").write_text(header_text)
    script = ("import sys, pathlib; out, dep = sys.argv[1], sys.argv[2]; "
              "pathlib.Path(out).write_text(pathlib.Path('x.cu').read_text() + pathlib.Path('x.h').read_text()); "
              "pathlib.Path(dep).write_text(out + ': x.cu x.h' + chr(10)); print('compiled')")
    return [sys.executable, "-c", script, "x.o", "x.d", "-o", "x.o", "-MF", "x.d", "-MT", "x.o", "x.cu"]


def launch(tmp_path: Path, command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LAUNCHER), str(tmp_path / "state"), "7", *command],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)


def test_the_launcher_reuses_an_object_only_while_its_inputs_are_unchanged(tmp_path):
    (tmp_path / "state").mkdir()
    assert launch(tmp_path, fake_compile(tmp_path, "v1")).stdout == "compiled\n"
    (tmp_path / "x.o").unlink()  # what scikit-build-core does to CMakeFiles/ in a new isolated environment
    reused = launch(tmp_path, fake_compile(tmp_path, "v1"))
    assert reused.stdout == "" and (tmp_path / "x.o").read_text() == "kernelv1"
    assert (tmp_path / "x.d").read_text().split() == ["x.o:", "x.cu", "\\", "x.h"]  # for ninja's deps log
    changed = launch(tmp_path, fake_compile(tmp_path, "v2"))  # a header changed: compiled again
    assert changed.stdout == "compiled\n" and (tmp_path / "x.o").read_text() == "kernelv2"


def test_progress_reaches_the_terminal_and_only_the_terminal(tmp_path):
    if shutil.which("script") is None:
        pytest.skip("util-linux `script` (a pseudo-terminal) is not installed")
    (tmp_path / "state").mkdir()
    command = " ".join([sys.executable, str(LAUNCHER), str(tmp_path / "state"), "7", "echo", "compiled", "-o",
                        "variant_a.o", "variant_a.cu"])
    on_tty = subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True, text=True, timeout=60,
                            cwd=tmp_path)
    assert "wavetune build: [1/7] compiling variant_a" in on_tty.stdout and "compiled" in on_tty.stdout
    off_tty = subprocess.run(["setsid", sys.executable, str(LAUNCHER), str(tmp_path / "state"), "7", "echo", "x.cu"],
                             capture_output=True, text=True, timeout=60)  # no controlling terminal
    assert off_tty.stdout == "x.cu\n" and off_tty.returncode == 0


def test_a_second_configure_from_another_cutlass_path_changes_no_compile_command(tmp_path):
    """pip's isolated build environment puts CUTLASS under a new path each time; the compile commands (and so
    ninja's rebuild decisions) must not follow it."""
    needed = [shutil.which("cmake"), shutil.which("ninja"), shutil.which("nvcc"), importlib.util.find_spec("pybind11"),
              importlib.util.find_spec("cutlass_library")]
    if not all(needed):
        pytest.skip("needs cmake, ninja, nvcc, pybind11 and nvidia-cutlass (pip install '.[test]' brings the last two)")
    import pybind11

    real = Path(importlib.util.find_spec("cutlass_library").submodule_search_locations[0])
    build = tmp_path / "build"
    commands = []
    for env_dir in ("env_a", "env_b"):
        (tmp_path / env_dir).mkdir()
        (tmp_path / env_dir / "cutlass_library").symlink_to(real)
        subprocess.run(["cmake", "-S", str(REPO), "-B", str(build), "-G", "Ninja", "-DWAVETUNE_KERNEL_SET=ci",
                        "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", "-DSKBUILD_PROJECT_VERSION=0.1.0",
                        f"-Dpybind11_DIR={pybind11.get_cmake_dir()}", f"-DPython_EXECUTABLE={sys.executable}"],
                       check=True, capture_output=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(tmp_path / env_dir)})
        entries = json.loads((build / "compile_commands.json").read_text())
        commands.append({e["file"]: e["command"] for e in entries if e["file"].endswith(".cu")})
    assert commands[0] and commands[0] == commands[1]
    assert all(str(tmp_path / "env_a") not in command for command in commands[0].values())


def test_info_without_a_gpu_lists_variants_and_tables():
    done = cli("info")
    assert done.returncode == 0 and "Traceback" not in done.stderr
    for config in wavetune.configs():
        assert f"  {config.name}" in done.stdout
    assert SHIPPED_TABLE.name in done.stdout
    gpu_line = next(line for line in done.stdout.splitlines() if line.startswith("GPU: "))
    assert gpu_line.startswith("GPU: none (") and "InsufficientDriver" not in gpu_line  # reads as an old driver


def test_explain_without_a_gpu_asks_for_a_table_and_explains_one():
    assert "--table PATH" in one_line_error(cli("explain", "16", "14336", "4096"), "explain")
    done = cli("explain", "16", "14336", "4096", "--table", str(SHIPPED_TABLE))
    assert done.returncode == 0 and "choice: " in done.stdout
    skipped = tables.open_table(SHIPPED_TABLE).skipped_configs()
    assert ("of the table's" in done.stdout) == bool(skipped)  # a note says what this build lacks


TABLE_DIR = REPO / "tables"
MAX_EXTENT, MAX_GROUPS = 2**31 - 1, 2**29


@pytest.mark.parametrize("args, says", [
    (["99999999999999999999", "4096", "4096"], f"M=99999999999999999999 is out of range: it must be in [1, {MAX_EXTENT}]"),
    (["16", "4096", str(2**31)], f"K={2**31} is out of range: it must be in [1, {MAX_EXTENT}]"),
    (["16", "0", "4096"], f"N=0 is out of range: it must be in [1, {MAX_EXTENT}]"),
    (["16", "4096", "4096", "--groups", str(2**63)], f"--groups={2**63} is out of range: it must be in [1, {MAX_GROUPS}]"),
    (["16", "14336", "4096", "--top", "-1"], "--top -1: list at least 1 config"),
    (["16", "14336", "4096", "--top", "0"], "--top 0: list at least 1 config"),
    (["16", "14336", "4096", "--heads", "32"], "--heads takes QUERY_HEADS,KV_HEADS"),
    (["16", "14336", "4096", "--heads", "32,x"], "--heads takes QUERY_HEADS,KV_HEADS"),
    (["16", "14336", "4100"], "K=4100 and N=14336 must be multiples of 8"),  # what wavetune.gemm says
])
def test_explain_checks_its_numbers_and_the_family_rules_in_one_line(args, says):
    assert says in one_line_error(cli("explain", *args, "--table", str(SHIPPED_TABLE)), "explain")


@pytest.mark.parametrize("table, args, says", [
    ("nvidia-h100-80gb-hbm3.attention.wtt", ["1", "1024", "100"], "head_dim=100 is not supported (64, 128 or 256)"),
    ("nvidia-h100-80gb-hbm3.grouped_gemm.wtt", ["64", "4100", "4096", "--groups", "8"],
     "K=4096 and N=4100 must be multiples of 8"),
    ("nvidia-h100-80gb-hbm3.grouped_gemm.row.wtt", ["64", "4096", "4104", "--groups", "8"],
     "K=4104 must be a multiple of 16"),
    ("nvidia-h100-80gb-hbm3.grouped_gemm.block128.wtt", ["64", "4096", "4104", "--groups", "8"],
     "K=4104 must be a multiple of 16"),
])
def test_explain_applies_each_familys_problem_checks(table, args, says):
    error = one_line_error(cli("explain", *args, "--table", str(TABLE_DIR / table)), "explain")
    assert "family does not run this problem" in error and says in error


def test_table_sizes_beyond_64_bits_are_refused_by_name():
    selector = tables.open_table(SHIPPED_TABLE)
    with pytest.raises(ValueError, match=rf"^m={2**70} is out of range: it must be in \[1, {MAX_EXTENT}\]$"):
        selector.explain("bf16", "col", 2**70, 4096, 4096)
    with pytest.raises(ValueError, match=rf"^groups={2**64} is out of range: it must be in \[1, {MAX_GROUPS}\]$"):
        selector.select("bf16", "col", 16, 4096, 4096, groups=2**64)
    attention = tables.open_table(TABLE_DIR / "nvidia-h200.attention.wtt", "attention")
    with pytest.raises(ValueError, match=r"^heads_kv=-1 is out of range"):  # a field of the attention family's key
        attention.select("bf16", "col", 1, 4096, 128, heads_kv=-1)


def test_native_errors_carry_no_source_paths():
    with pytest.raises(ValueError) as refused:  # M*N*K beyond 2^60: the lookup library's own check
        tables.open_table(SHIPPED_TABLE).select("bf16", "col", MAX_EXTENT, MAX_EXTENT, MAX_EXTENT)
    assert "M*N*K <= 2^60" in str(refused.value)
    assert not re.search(r"\.(cpp|cu|h):\d+|csrc/", str(refused.value)), refused.value
    error = one_line_error(cli("explain", *[str(MAX_EXTENT)] * 3, "--table", str(SHIPPED_TABLE)), "explain")
    assert "M*N*K <= 2^60" in error and not re.search(r"\.(cpp|cu|h):\d+|csrc/", error)


def explain_output(*args: str) -> tuple[float, list[float], float]:
    """explain's memory floor, listed predictions and choice's prediction, in us."""
    done = cli("explain", *args, "--top", "100")
    assert done.returncode == 0, done.stderr
    floor = float(re.search(r"^memory floor: ([\d.]+) us", done.stdout, re.M).group(1))
    rows = [float(line.split()[-1]) for line in done.stdout.splitlines() if re.match(r"\S+/\w+/\d+ ", line)]
    choice = float(re.search(r"^choice: .*\(([\d.]+) us, ", done.stdout, re.M).group(1))
    return floor, rows, choice


def test_explains_floor_and_choice_agree():
    """Issue 75: the H100 table's memory floor for a decode GEMM was 40.34 us and its choice predicted at
    32.99 us (3.57 TB/s, above the GPU's 3.35 TB/s): no prediction, calibrated or not, is under the floor."""
    floor, rows, choice = explain_output("16", "14336", "4096", "--table", str(SHIPPED_TABLE))
    assert rows and floor <= min(rows) and floor <= choice
    assert floor == pytest.approx(2 * (16 * 4096 + 14336 * 4096 + 16 * 14336) / tables.open_table(
        SHIPPED_TABLE).memory_bytes_per_us(), abs=0.005)


def test_explain_reads_the_family_from_the_table_and_lists_configs_this_build_lacks():
    """An attention table needs no --family; a grouped table is explained whatever the build compiled: its
    configs' predictions are listed, as a full install runs them."""
    attention = TABLE_DIR / "nvidia-h100-80gb-hbm3.attention.wtt"
    done = cli("explain", "1", "4096", "128", "--table", str(attention))
    assert done.returncode == 0, done.stderr
    assert f"{attention}: attention table of " in done.stdout and "choice: attn_" in done.stdout
    error = one_line_error(cli("explain", "1", "4096", "128", "--table", str(attention), "--family", "gemm"),
                           "explain")
    assert "a table of the attention family, not gemm: pass --family attention" in error
    grouped = TABLE_DIR / "nvidia-h100-80gb-hbm3.grouped_gemm.wtt"
    done = cli("explain", "300", "4096", "7168", "--groups", "8", "--table", str(grouped), "--top", "100")
    assert done.returncode == 0, done.stderr
    from wavetune.tuning.tablefile import read_table

    for config in read_table(grouped)["configs"]:
        assert f"{config['variant']}/{config['decomposition']}/{config['splits']} " in done.stdout


def test_the_no_gpu_message_names_what_exists():
    code = "import wavetune\ntry:\n    wavetune.device_properties()\nexcept RuntimeError as exc:\n    print(exc)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=NO_GPU, timeout=120)
    named = re.findall(r"\b(wavetune(?:\.\w+)+)", done.stdout)
    assert named, done.stdout
    for name in named:  # each a module attribute a user can reach
        module, _, attribute = name.rpartition(".")
        assert callable(getattr(importlib.import_module(module), attribute)), name


def test_info_counts_in_words_and_says_built_in_kernels_are_built_in():
    from wavetune.__main__ import compiled_count

    gemm, layer_ops = wavetune.families.get("gemm"), wavetune.families.get("layer_ops")
    assert (compiled_count(gemm, 1), compiled_count(gemm, 2)) == ("1 variant compiled", "2 variants compiled")
    assert compiled_count(layer_ops, 0) == "its kernels are built in (no variants to choose among)"
    done = cli("info")
    assert done.returncode == 0 and not re.search(r"\b1 variants\b", done.stdout)
    if not layer_ops.list_configs():
        assert "layer_ops: its kernels are built in" in done.stdout


def test_patch_reports_every_problem_of_a_layer_at_once():
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(64, 60), torch.nn.Linear(60, 64))  # float32, on the CPU
    report = wavetune.patch(model)
    assert report.patched == []
    for reason in report.skipped.values():  # the dtype, the widths and the device in one report
        assert "weight dtype torch.float32" in reason and "multiples of 8" in reason and "on cpu" in reason


@pytest.mark.parametrize("args, says", [
    (["tune", "--shapes", "missing.json"], "missing.json: no such file"),
    (["tune", "--shapes", "{config}"], "no hidden_size"),
    (["tune", "--offline", "--log", "missing.jsonl"], "no such measurement log"),
    (["tune"], "tune measures kernels on the GPU"),
    (["explain", "16", "14336", "4096", "--table", "{dir}"], "is a directory, not a table file"),
])
def test_cli_errors_are_one_line(tmp_path, args, says):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "num_attention_heads": 8}))
    args = [a.format(config=config, dir=tmp_path) for a in args]
    assert says in one_line_error(cli(*args, cwd=tmp_path), args[0])


def test_help_is_plain_text_and_explains_m_n_k():
    done = subprocess.run([sys.executable, "-m", "wavetune", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "``" not in done.stdout
    done = subprocess.run([sys.executable, "-m", "wavetune", "explain", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert "rows of A: tokens" in done.stdout and "out_features" in done.stdout and "in_features" in done.stdout


def test_load_table_checks_the_file_before_the_gpu():
    code = ("import torch, wavetune\n"
            "for path in ['missing.wtt', '.', {table!r}]:\n"
            "    try:\n        wavetune.load_table(path)\n"
            "    except (ValueError, RuntimeError) as exc:\n        print(type(exc).__name__, exc)\n")
    if importlib.util.find_spec("torch") is None:
        code = code.replace("import torch, ", "import ")
    done = subprocess.run([sys.executable, "-c", code.format(table=str(SHIPPED_TABLE))], capture_output=True,
                          text=True, env=NO_GPU, cwd=REPO.parent, timeout=120)
    missing, directory, good = done.stdout.splitlines()
    assert missing.startswith("ValueError") and "missing.wtt: cannot open the table file" in missing
    assert directory.startswith("ValueError") and "is a directory" in directory
    assert good.startswith("RuntimeError") and "no CUDA GPU is usable here" in good and "open_table" in good


@pytest.mark.parametrize("kwargs, message", [
    (dict(decomposition="bogus"), "decomposition='bogus' is not one of"),
    (dict(decomposition="split_k", splits=-3), "splits=-3: a positive integer"),
    (dict(splits=4), "needs decomposition='split_k'"),
    (dict(raster="sideways"), "raster='sideways' is not one of"),
    (dict(max_swizzle=3), "max_swizzle=3 is not one of 1, 2, 4, 8"),
])
def test_launch_config_is_checked_when_made(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        wavetune.LaunchConfig("any_variant", **kwargs)
    with pytest.raises(TypeError, match="variant must be a variant id or name"):
        wavetune.LaunchConfig(1.5)


def test_gemm_on_cpu_tensors_states_the_size_rules_first():
    torch = pytest.importorskip("torch")
    x, w = torch.randn(4, 60, dtype=torch.bfloat16), torch.randn(32, 60, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="K=60 and N=32 must be multiples of 8"):
        wavetune.gemm(x, w.t())
    with pytest.raises(ValueError, match="must be on one CUDA device"):
        wavetune.gemm(torch.randn(4, 56, dtype=torch.bfloat16), torch.randn(32, 56, dtype=torch.bfloat16).t())


def test_readme_explains_the_gemm_it_shows_and_docs_have_an_index():
    readme = (REPO / "README.md").read_text()
    x = re.search(r"x = torch.randn\((\d+), (\d+),", readme).groups()
    w = re.search(r"W = torch.randn\((\d+), (\d+),", readme).groups()
    m, k, n = x[0], x[1], w[0]
    assert f"python -m wavetune explain {m} {n} {k}" in readme
    index = (REPO / "docs" / "README.md").read_text()
    for page in (REPO / "docs").glob("*.md"):
        assert page.name == "README.md" or f"({page.name})" in index, f"docs/README.md does not list {page.name}"


def test_kernels_md_states_the_ci_set_as_built():
    from wavetune.codegen import config_space

    dense, grouped, attention = (len(config_space.load(REPO / "cutlass_configs" / f"sm90_{family}.toml")
                                     .select("ci", allow_empty=True)) for family in ("gemm", "grouped_gemm", "attention"))
    row = next(line for line in (REPO / "docs" / "kernels.md").read_text().splitlines() if line.startswith("| `ci` |"))
    assert f"{dense} dense + {grouped} grouped + {attention} attention" in row

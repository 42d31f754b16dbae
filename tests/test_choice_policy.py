"""The run-time choice is one policy in the kernel library (each family's wavetune::choose), so a
C++ program linking the installed libraries launches what a Python call launches for the same problem and
table. The C++ side is tests/cpp/choices.cpp, built against the installed CMake package."""

from __future__ import annotations

import random
import subprocess

import pytest

import wavetune
from conftest import REPO, cpp_program
from wavetune import _C
from wavetune.runtime.tables import table_slug

TABLES = REPO / "tables"
FAMILIES = ("attention", "gemm", "grouped_gemm", "layer_ops", "scaled_gemm")


@pytest.fixture(scope="module")
def choices(tmp_path_factory):
    program = cpp_program(REPO / "tests" / "cpp", "choices", tmp_path_factory.mktemp("choices"))

    def run(lines: list[str], **tables) -> list[str]:
        args = [f"{family}={path}" for family, path in tables.items()]
        done = subprocess.run([str(program), *args], input="\n".join(lines) + "\n", capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    return run


def test_every_family_registers_itself():
    assert _C.families() == sorted(FAMILIES)
    known = ", ".join(FAMILIES)
    with pytest.raises(ValueError, match=rf"unknown kernel family 'dense' \({known}\)"):
        _C.Selector(str(TABLES / "nvidia-h200.wtt"), "dense")


def test_without_a_table_cpp_chooses_the_builtin_heuristic(choices):
    rng = random.Random(7)
    problems = [(rng.choice(["bf16", "fp16"]), rng.choice(["col", "row"]), rng.randint(1, 20000),
                 8 * rng.randint(1, 4000), 8 * rng.randint(1, 4000)) for _ in range(300)]
    got = choices([f"gemm {d} {layout} {m} {n} {k}" for d, layout, m, n, k in problems])
    for (dtype, layout, m, n, k), line in zip(problems, got):
        try:
            expected = f"{_C.default_variant(dtype, layout, m, n, k)} heuristic 1 heuristic 1"
        except ValueError as exc:  # no compiled variant takes the data: both refuse alike
            expected = f"error: {exc}"
        assert line == expected


@pytest.mark.parametrize("table", sorted(TABLES.glob("*.grouped_gemm*.wtt")), ids=lambda p: p.name)
def test_grouped_gemm_chooses_the_same_through_python_and_cpp(choices, table):
    """Every scales mode's table: the problems of its mode."""
    selector = _C.Selector(str(table), "grouped_gemm")
    scales = [layout["name"] for layout in _C.GROUPED_SCALES].index(selector.scales)
    if selector.skipped_configs() == selector.config_count():
        pytest.skip(f"none of {table.name}'s configs is compiled in this build (kernel set "
                    f"{wavetune.build_info()['kernel_set']}): both sides would run the GPU heuristic")
    rng = random.Random(11)
    problems = [(rng.randint(1, 16384), rng.randint(1, 256), 8 * rng.randint(1, 2048), 8 * rng.randint(1, 2048))
                for _ in range(500)]
    device = 0
    _C.use_table(device, selector, "grouped_gemm")
    try:
        python = [_C.grouped_chosen_variant(0, rows, experts, n, k, device, scales) for rows, experts, n, k in problems]
    finally:
        _C.use_table(device, None, "grouped_gemm", selector.scales)
    cpp = choices([f"grouped_gemm bf16 {rows} {experts} {n} {k} {selector.scales}"
                   for rows, experts, n, k in problems], grouped_gemm=table)
    assert cpp == [str(v) for v in python]


def test_a_grouped_table_chooses_for_the_problems_of_its_scales_mode_only(choices):
    got = choices(["grouped_gemm bf16 64 8 4096 4096", "grouped_gemm bf16 64 8 4096 4096 block128"],
                  grouped_gemm=TABLES / "nvidia-h200.grouped_gemm.row.wtt")
    assert got == ["error: wavetune: a grouped table of scales 'row' chooses for the problems of those scales, not for a "
                   f"{kind} problem" for kind in ("grouped", "FP8 grouped (block128 scales)")]


def test_a_family_without_tables_refuses_one(choices):
    """The scaled GEMM and the paged attention kernels take a table argument like every family's choose, and
    refuse any but none; without one they choose as Python's calls do."""
    lines = ["scaled_gemm bf16 8 4096 4096 tensor", "paged_attention bf16 4 32 8 128 4096"]
    table = TABLES / "nvidia-h200.attention.wtt"
    refused = choices(lines, scaled_gemm=table, paged_attention=table)
    assert refused[0] == "error: wavetune: the scaled GEMM has no tables: its choice takes none (pass nullptr)"
    assert refused[1].startswith("error: wavetune: the paged attention kernels have no tables of their own")
    plain = choices(lines)
    assert plain[0] == str(_C.scaled_gemm_chosen_variant(8, 4096, 4096, 0, 0, 0))
    assert "tables" not in plain[1]


def shipped_table(family: str):
    """The running GPU's shipped table of the family, or a skip."""
    name = _C.device_properties()["name"]
    path = TABLES / (f"{table_slug(name)}.wtt" if family == "gemm" else f"{table_slug(name)}.{family}.wtt")
    if not path.is_file():
        pytest.skip(f"no shipped {family} table for {name}")
    return path


@pytest.mark.gpu
def test_gemm_chooses_the_same_through_python_and_cpp(choices):
    table = shipped_table("gemm")
    _C.use_table(0, _C.Selector(str(table), "gemm"), "gemm")
    rng = random.Random(13)
    problems = [(rng.randint(1, 16384), 8 * rng.randint(1, 4096), 8 * rng.randint(1, 4096)) for _ in range(300)]
    try:
        python = [_C.PreparedGemm(m, n, k, k, k, n, 0, 0, 0).variant for m, n, k in problems]
    finally:
        _C.use_table(0, None, "gemm")
    cpp = choices([f"gemm bf16 col {m} {n} {k}" for m, n, k in problems], gemm=table)
    assert [int(line.split()[0]) for line in cpp] == python


@pytest.mark.gpu
def test_attention_chooses_the_same_through_python_and_cpp(choices):
    table = shipped_table("attention")
    _C.use_table(0, _C.Selector(str(table), "attention"), "attention")
    rng = random.Random(17)
    problems = []
    for _ in range(200):
        heads_kv = rng.choice([1, 2, 4, 8])
        seqlen_k = rng.randint(1, 32768)
        seqlen_q = 1 if rng.random() < 0.5 else rng.randint(1, min(seqlen_k, 4096))
        problems.append((rng.randint(1, 64), seqlen_q, seqlen_k, heads_kv * rng.choice([1, 4, 8]), heads_kv, 128,
                         rng.random() < 0.5, rng.randrange(8)))

    def contiguous(batch, seq, heads, head_dim):
        return (0, seq * heads * head_dim, heads * head_dim, head_dim)

    try:
        python = []
        for batch, sq, sk, hq, hkv, hd, causal, routes in problems:
            q = contiguous(batch, sq, hq, hd)
            kv = contiguous(batch, sk, hkv, hd)
            python.append(_C.attention_chosen_launch((batch, sq, sk, hq, hkv, hd), q, kv, kv, q, 1.0, causal, 0, 0,
                                                     tuple(bool(routes >> bit & 1) for bit in range(3))))
    finally:
        _C.use_table(0, None, "attention")
    lines = [f"attention bf16 {b} {sq} {sk} {hq} {hkv} {hd} {int(c)} {r}" for b, sq, sk, hq, hkv, hd, c, r in problems]
    cpp = choices(lines, attention=table)
    assert cpp == [f"{variant} {splits}" for variant, splits in python]

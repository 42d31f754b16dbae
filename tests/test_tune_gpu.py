"""GPU tier of tuning every family from the installed package: a small `tune --family grouped_gemm` and
`--family attention` run (a few cases, about a minute each on an H100) writing a table that loads, a rerun
that measures nothing, and `--devices 0,1` spreading the cases over two GPUs (skipped on fewer).

    python -m pytest -q tests/test_tune_gpu.py
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import wavetune
from wavetune import families

pytestmark = pytest.mark.gpu
CASES = {"grouped_gemm": "4", "attention": "6"}


def tune(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "wavetune", "tune", *args], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def needs_bf16(family: str) -> None:
    if not any(v.dtype == "bf16" for v in families.get(family).list_configs()):
        pytest.skip(f"no bf16 {family} variant compiled")


@pytest.mark.parametrize("family", ["grouped_gemm", "attention"])
def test_a_small_tune_writes_a_loadable_table_and_resumes(family, tmp_path):
    needs_bf16(family)
    log = tmp_path / "log.jsonl"
    tune("--family", family, "--cases", CASES[family], "--out", str(tmp_path), "--log", str(log))
    lines = log.read_text().splitlines()
    assert len(lines) == 1 + int(CASES[family])
    records = [json.loads(line) for line in lines[1:]]
    assert all(r["variants_us"] and r["max_error"] <= 2e-2 for r in records)
    name = wavetune.device_properties()["name"]
    path = tmp_path / wavetune.runtime.tables.table_file_name(name, family)
    info = wavetune.load_table(path, family=family)
    assert info["family"] == family and info["configs"] >= 1
    tune("--family", family, "--cases", CASES[family], "--out", str(tmp_path), "--log", str(log))
    assert log.read_text().splitlines() == lines  # complete: nothing measured again


def test_two_devices_share_the_cases(tmp_path):
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip(f"--devices 0,1 needs two GPUs; {torch.cuda.device_count()} visible")
    needs_bf16("grouped_gemm")
    log = tmp_path / "log.jsonl"
    done = tune("--family", "grouped_gemm", "--cases", "6", "--devices", "0,1", "--out", str(tmp_path),
                "--log", str(log))
    assert "over GPUs 0,1" in done.stderr
    records = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    assert len(records) == len({r["case_key"] for r in records}) == 6
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("log")) == ["log.jsonl"]
    name = wavetune.device_properties()["name"]
    assert wavetune.load_table(tmp_path / wavetune.runtime.tables.table_file_name(name, "grouped_gemm"),
                               family="grouped_gemm")["configs"] >= 1

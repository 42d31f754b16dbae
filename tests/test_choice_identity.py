"""benchmarks/choice_identity.py: the tool that holds a lookup change to the shipped tables' earlier choices."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO

TOOL = REPO / "benchmarks" / "choice_identity.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), "--count", "300", *args], capture_output=True, text=True,
                          timeout=300)


def test_same_code_same_choices_and_a_changed_choice_is_reported(tmp_path):
    before = tmp_path / "before.json"
    assert run("--out", str(before)).returncode == 0
    same = run("--against", str(before))
    assert same.returncode == 0 and "300 of 300 choices identical" in same.stdout
    data = json.loads(before.read_text())
    table = sorted(data["choices"])[0]
    data["choices"][table][5] = ["another_variant", "data_parallel", 1, "heuristic", 1]
    before.write_text(json.dumps(data))
    changed = run("--against", str(before))
    assert changed.returncode == 1 and f"{table}: 299 of 300 choices identical (first difference: problem 5)" in changed.stdout

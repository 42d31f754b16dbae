"""The CUDA compiler launcher of the build: ``compile_launcher.py STATE_DIR TOTAL <compiler command...>``.

- Reuses the object of an earlier compile with the same command and the same contents of every file that
  compile read (its source and each header its depfile named), from ``STATE_DIR/objects``.
- Says on the terminal, if there is one, which kernel starts compiling: "[k/TOTAL] compiling NAME".

NOTES: scikit-build-core deletes the build tree's CMakeFiles/, and with it every object file, whenever pip
builds in a new isolated environment, which a plain ``pip install .`` does each time; the objects kept here,
outside CMakeFiles/, make a second identical install recompile nothing. pip shows a build's output only
with -v, so the terminal is the one place a progress line still reaches the user; without a terminal (CI,
logs) nothing is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def argument_after(command: list[str], flag: str) -> str | None:
    return command[command.index(flag) + 1] if flag in command else None


def file_digest(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def command_key(command: list[str], source: str) -> str:
    """The command with its output paths left out (they name no input), and the source's contents."""
    output_flags = {"-o", "-MF", "-MT"}
    kept = [arg for i, arg in enumerate(command) if arg not in output_flags and command[i - 1] not in output_flags]
    return hashlib.sha256(json.dumps([kept, file_digest(source)]).encode()).hexdigest()


def read_depfile(path: str) -> list[str]:
    """The prerequisites of a make-style depfile (paths without spaces, as the build's are)."""
    text = Path(path).read_text().replace("\\\n", " ")
    return text.split(":", 1)[1].split() if ":" in text else []


def reuse(entry: Path, output: str, depfile: str | None, target: str | None) -> bool:
    """Copy a cached object to ``output`` (and write its depfile) if every file it was made from is unchanged."""
    try:
        recorded = json.loads((entry / "inputs.json").read_text())
    except (OSError, ValueError):
        return False
    if any(file_digest(path) != digest for path, digest in recorded.items()):
        return False
    shutil.copyfile(entry / "object", output)
    if depfile:
        Path(depfile).write_text(f"{target or output}: " + " \\\n  ".join(recorded) + "\n")
    return True


def store(entry: Path, output: str, depfile: str | None) -> None:
    """Keep a fresh compile's object and the digests of its inputs; a concurrent writer of the same entry wins."""
    inputs = {path: file_digest(path) for path in read_depfile(depfile)} if depfile else {}
    entry.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=entry.parent))
    shutil.copyfile(output, staging / "object")
    (staging / "inputs.json").write_text(json.dumps(inputs))
    shutil.rmtree(entry, ignore_errors=True)
    try:
        os.replace(staging, entry)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)


def announce(state: Path, total: str, source: str) -> None:
    try:
        with open("/dev/tty", "w") as tty:
            with open(state / "compiles-started", "a+") as counter:
                counter.write(source + "\n")
                counter.seek(0)
                started = len(counter.read().splitlines())
            tty.write(f"\rwavetune build: [{started}/{total}] compiling {Path(source).stem}\n")
    except OSError:
        pass  # no terminal


def main(argv: list[str]) -> int:
    state, total, command = Path(argv[0]), argv[1], argv[2:]
    output, depfile, target = (argument_after(command, flag) for flag in ("-o", "-MF", "-MT"))
    source = next((arg for arg in command if arg.endswith(".cu")), None)
    if output is None or source is None:
        return subprocess.call(command)
    entry = state / "objects" / command_key(command, source)
    if reuse(entry, output, depfile, target):
        return 0
    announce(state, total, source)
    status = subprocess.call(command)
    if status == 0:
        store(entry, output, depfile)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Compile-checks the portable kernel sources for GPU architectures that no machine here has.

    python benchmarks/compile_check.py BUILD_DIR [--archs 80,86,89,100,120] [-j 2]

BUILD_DIR is a configured CMake build of this tree (any kernel set, e.g. /work/devbuild). The portable sources
are those whose compile command there also emits compute_80 PTX (CMakeLists.txt: WAVETUNE_PORTABLE_SOURCES).
Each is compiled to a cubin (device code only: front end and ptxas, which rejects any instruction the target
lacks) for each architecture with the build's own flags. For each family with Ampere-style variants (groups
with arch sm80: the dense and the grouped GEMM) of which the build compiles none, one of them is generated
(--ampere-variants) and compiled with the flags of the build's other portable sources. Prints a Markdown table of
the results with the nvcc version and the date; exits 1 if any compile failed.
"""

from __future__ import annotations

import argparse
import datetime
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PORTABLE_MARK = "--generate-code=arch=compute_80,code=compute_80"
REPO = Path(__file__).resolve().parents[1]
AMPERE_VARIANTS = "bf16_bcol_sm80_128x128x32_2x2warps_3stage,grouped_bf16_sm80_128x128x32_2x2warps_3stage"


def portable_commands(build: Path) -> dict[str, list[str]]:
    """Each portable source's compile command (the compiler onwards, without its launcher)."""
    lines = subprocess.run(["ninja", "-C", str(build), "-t", "commands", "wavetune_kernels"], check=True,
                           capture_output=True, text=True).stdout.splitlines()
    commands = {}
    for line in lines:
        words = shlex.split(line)
        if PORTABLE_MARK not in words:
            continue
        compiler = next(i for i, w in enumerate(words) if w.endswith("nvcc"))
        commands[words[words.index("-c") + 1]] = words[compiler:]
    return commands


def with_ampere_variants(commands: dict[str, list[str]], names: list[str], scratch: Path) -> dict[str, list[str]]:
    """``commands`` and, for each of ``names`` whose family's Ampere-style variants the build compiles none of, its
    generated source with the command of another portable source of the build (same flags and include paths)."""
    sys.path.insert(0, str(REPO / "python" / "wavetune" / "codegen"))
    import config_space  # standard library only: no package import, no native module

    compiled = {Path(source).stem for source in commands}
    out, found = dict(commands), set()
    for path in sorted((REPO / "cutlass_configs").glob("*.toml")):
        space = config_space.load(path)
        ampere = {v.name: v for v in space.variants if v.arch == "sm80"}
        for name in set(names) & set(ampere):
            found.add(name)
            if compiled & set(ampere):
                continue
            source = scratch / f"{name}.cu"
            source.write_text(config_space.render_variant(ampere[name], path.name))
            template_source, command = next(iter(commands.items()))
            out[str(source)] = [str(source) if word == template_source else word for word in command]
    if set(names) - found:
        sys.exit(f"not an Ampere-style variant of cutlass_configs/: {', '.join(sorted(set(names) - found))}")
    return out


def cubin_command(command: list[str], arch: str, out: Path) -> list[str]:
    """The build's command compiling its source to an sm_<arch> cubin instead of an object (no depfile)."""
    kept, skip_next = [], False
    for word in command:
        if skip_next or word in {"-o", "-MT", "-MF"}:
            skip_next = not skip_next
        elif word not in {"-c", "-MD"} and not word.startswith("--generate-code="):
            kept.append(word)
    return kept + ["-cubin", f"-arch=sm_{arch}", "-o", str(out)]


def nvcc_version(nvcc: str) -> str:
    lines = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.splitlines()
    return next((line for line in lines if "release" in line), "nvcc of unknown version")


def compile_one(command: list[str]) -> tuple[bool, float, str]:
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    errors = [line for line in (done.stdout + done.stderr).splitlines() if "error" in line.lower()]
    return done.returncode == 0, time.monotonic() - start, errors[0] if errors else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build", type=Path, help="a configured CMake build directory of this tree")
    parser.add_argument("--archs", default="80,86,89,100,120", help="comma-separated compute capabilities")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--ampere-variants", default=AMPERE_VARIANTS,
                        help="comma-separated Ampere-style variants, one per family, each generated where the build "
                             "compiles none of its family's")
    parser.add_argument("--only", default="", help="compile only the sources whose path holds this text")
    args = parser.parse_args()
    archs = [a.strip() for a in args.archs.split(",") if a.strip()]
    commands = portable_commands(args.build)
    if not commands:
        sys.exit(f"no source in {args.build} is compiled to compute_80 PTX: is it a CUDA build of this tree?")
    root = args.build.resolve()
    with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(args.jobs) as pool:
        commands = {source: command for source, command in
                    with_ampere_variants(commands, args.ampere_variants.split(","), Path(scratch)).items()
                    if args.only in source}
        jobs = {(source, arch): pool.submit(compile_one, cubin_command(
                    command, arch, Path(scratch) / f"{index}.sm_{arch}.cubin"))
                for index, (source, command) in enumerate(commands.items()) for arch in archs}
        results = {key: job.result() for key, job in jobs.items()}
    print(f"{nvcc_version(next(iter(commands.values()))[0])}; {datetime.date.today().isoformat()}; build {root}\n")
    print("| source | " + " | ".join(f"sm_{a}" for a in archs) + " |")
    print("| --- |" + " --- |" * len(archs))
    for source in commands:
        cells = [f"{'ok' if ok else 'FAILED'} ({seconds:.0f} s)" for ok, seconds, _ in
                 (results[source, arch] for arch in archs)]
        print(f"| {source[source.find('csrc/'):] if 'csrc/' in source else Path(source).name} | "
              + " | ".join(cells) + " |")
    failures = [(key, error) for key, (ok, _, error) in results.items() if not ok]
    for (source, arch), error in failures:
        print(f"\n{source} for sm_{arch}: {error}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

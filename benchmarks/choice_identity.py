"""Whether a change of the lookup leaves every table's choices as they were: the choices of each shipped table
for random problems of its family, written once and compared against later. Needs no GPU; run it with the same
kernel set both times (the tables skip configs a build lacks).

    python benchmarks/choice_identity.py --out before.json                 # on the code before the change
    python benchmarks/choice_identity.py --against before.json             # after it: exit status 1 on a difference

Problems are drawn from --seed per family: dense GEMMs with M 1-16384 and N, K multiples of 8 up to 32768;
grouped GEMMs with 1-256 experts over those rows; attention with batch 1-256, query length 1 (decode) or up
to 16384, key length up to 131072, head dims 64, 128, 256 and grouped-query head counts.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import wavetune
from wavetune import families
from wavetune.runtime import tables as runtime_tables


def problem(family: str, rng: random.Random) -> dict:
    """Keyword arguments of Selector.select for one random problem of the family."""
    if family == "attention":
        kv_heads = rng.choice([1, 2, 4, 8, 16])
        seqlen_k = rng.randint(1, 131072)
        seqlen_q = 1 if rng.random() < 0.5 else rng.randint(1, min(seqlen_k, 16384))
        return dict(m=seqlen_q, n=seqlen_k, k=rng.choice([64, 128, 256]), groups=rng.randint(1, 256),
                    heads_q=kv_heads * rng.choice([1, 2, 4, 8]), heads_kv=kv_heads, causal=rng.random() < 0.5)
    size = {"m": rng.randint(1, 16384), "n": 8 * rng.randint(1, 4096), "k": 8 * rng.randint(1, 4096)}
    return {**size, "groups": rng.randint(1, 256)} if family == "grouped_gemm" else size


def tables() -> list[tuple[str, Path]]:
    """(family, path) of every shipped table; a dense table's name has no family part."""
    found = []
    for path in sorted(runtime_tables.TABLE_DIR.glob("*.wtt")):
        family = next((f.name for f in families.all() if f.name != "gemm" and path.name.endswith(f.table_suffix)), "gemm")
        found.append((family, path))
    return found


def choices(count: int, seed: int) -> dict:
    """Table file name -> the choices (variant name, decomposition, splits, raster, swizzle) of its problems."""
    result = {}
    for family, path in tables():
        selector = runtime_tables.open_table(path, family)
        rng = random.Random(f"{seed}-{family}")
        picks = []
        for _ in range(count):
            kwargs = problem(family, rng)
            try:
                c = selector.select("bf16", "col", **kwargs)
                picks.append([c["name"], c["decomposition"], c["splits"], c["raster"], c["max_swizzle"]])
            except ValueError as exc:  # a problem no compiled config takes is a choice too: the refusal
                picks.append(["refused", str(exc)])
        result[path.name] = picks
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200_000, help="problems per table")
    parser.add_argument("--seed", type=int, default=7)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--out", type=Path, help="write the choices here")
    target.add_argument("--against", type=Path, help="compare with choices written before")
    args = parser.parse_args(argv)
    current = {"count": args.count, "seed": args.seed, "kernel_set": wavetune.build_info()["kernel_set"],
               "choices": choices(args.count, args.seed)}
    if args.out:
        args.out.write_text(json.dumps(current))
        print(f"wrote {sum(map(len, current['choices'].values()))} choices of {len(current['choices'])} tables")
        return 0
    before = json.loads(args.against.read_text())
    if {k: before[k] for k in ("count", "seed", "kernel_set")} != {k: current[k] for k in ("count", "seed", "kernel_set")}:
        print(f"{args.against} was written with other settings: {before['count']} problems, seed {before['seed']}, "
              f"kernel set {before['kernel_set']!r}", file=sys.stderr)
        return 2
    differing = 0
    for name, picks in current["choices"].items():
        old = before["choices"].get(name, [])
        diffs = [i for i, (a, b) in enumerate(zip(picks, old)) if a != b] + list(range(len(old), len(picks)))
        differing += len(diffs)
        print(f"{name}: {len(picks) - len(diffs)} of {len(picks)} choices identical"
              + (f" (first difference: problem {diffs[0]})" if diffs else ""))
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())

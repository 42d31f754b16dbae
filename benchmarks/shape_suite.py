"""Prints LLM-like GEMM shapes that no table was fitted or judged on (wavetune.families.gemm.cases, which says
how they are drawn), or grouped-GEMM cases of mixture-of-experts layers (wavetune.families.grouped_gemm.cases).
The benchmarks take the shapes from here: with the public suite's layers left out.

    python benchmarks/shape_suite.py --split heldout --count 150      # print (M, N, K) rows as JSON
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from wavetune.families.gemm import cases
from wavetune.families.gemm.cases import SPLITS, SUITES  # noqa: F401  (the benchmarks' shape_suite.SPLITS)
from wavetune.families.grouped_gemm.cases import moe_cases

REPO = Path(__file__).resolve().parents[1]
PUBLIC_SUITES = (REPO.parent / "shared" / "benchmarks" / "llm_shapes.json",
                 REPO / "shared" / "benchmarks" / "llm_shapes.json")


def public_pairs() -> set[tuple[int, int]]:
    for path in PUBLIC_SUITES:
        if path.exists():
            models = json.loads(path.read_text())["models"]
            return {tuple(nk) for layers in models.values() for nk in layers.values()}
    raise FileNotFoundError(f"the public suite is needed to leave its shapes out; looked at {PUBLIC_SUITES}")


def shapes(split: str, count: int) -> list[dict]:
    """``count`` shapes of a split (cases.shapes); the generic suite holds no model's layers to leave out."""
    return cases.shapes(split, count, set() if split == "generic" else public_pairs())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--split", choices=SUITES, default="tune")
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--moe", action="store_true", help="grouped-GEMM cases of mixture-of-experts layers instead")
    args = p.parse_args()
    rows = moe_cases(args.split, args.count, ("balanced",)) if args.moe else shapes(args.split, args.count)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

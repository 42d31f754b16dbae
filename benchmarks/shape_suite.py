"""Prints LLM-like GEMM shapes that no table was fitted or judged on (wavetune.families.gemm.cases, which says
how they are drawn), or grouped-GEMM cases of mixture-of-experts layers (wavetune.families.grouped_gemm.cases).

    python benchmarks/shape_suite.py --split heldout --count 150      # print (M, N, K) rows as JSON
"""

from __future__ import annotations

import argparse
import json

from wavetune.families.gemm.cases import SUITES, shapes
from wavetune.families.grouped_gemm.cases import moe_cases


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

"""wavetune.attention's choice replayed on held-out logs that time every candidate: the built-in rule alone,
an attention table over it as shipped, the table with every CUTLASS config a candidate too, and the faster of
cuDNN and the paged kernel per decode case known after the fact (docs/results.md#attention_candidates_replay_h200.md).

    # GPU: every candidate of each held-out case timed in one interleaved run (a build with every bf16 variant)
    python benchmarks/attention.py --suite heldout --count 60 --seed 103 --out runs/seed103
    # anywhere, no GPU and no compiled kernels needed
    python benchmarks/attention_replay.py --table tables/nvidia-h200.attention.wtt runs/seed*/attention_heldout.jsonl

The choice is replayed by wavetune.families.attention.replay (the Python reference of the attention family's choose).
Each policy's chosen candidate is scored by its measured time against SDPA's fastest backend in the same run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from wavetune.families.attention.replay import replay, table_predictor
from wavetune.tuning.report import geomean, read_jsonl

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--table", type=Path, default=REPO / "tables" / "nvidia-h200.attention.wtt")
    p.add_argument("--sm-count", type=int, default=132)
    p.add_argument("logs", type=Path, nargs="+", help="benchmarks/attention.py logs or tuning logs (.jsonl[.gz])")
    args = p.parse_args()
    keys, tile, predict = table_predictor(args.table, args.sm_count)
    print("| log | cases (decode) | built-in rule: all / decode (worst) | table, shipped: all / decode (worst) | "
          "table with every CUTLASS config: all (worst) | perfect cuDNN or paged per decode case |")
    print("| --- | --- | --- | --- | --- | --- |")
    for path in args.logs:
        r = replay(read_jsonl(path)[1], keys, tile, predict)
        cell = lambda a, d: f"{geomean(r[a]):.3f}x / {geomean(r[d]):.3f}x ({min(r[a]):.2f}x)"  # noqa: E731
        print(f"| {path.name} | {len(r['rule'])} ({len(r['perfect'])}) | {cell('rule', 'decode rule')} | "
              f"{cell('table', 'decode table')} | {geomean(r['every config']):.3f}x ({min(r['every config']):.2f}x) "
              f"| {geomean(r['perfect']):.3f}x |")


if __name__ == "__main__":
    main()

"""A deployment-tuned table judged at token counts its tuning never measured (docs/model.md, section 8).

    python -m wavetune tune --shapes examples/llama-3-8b.config.json --log deploy.jsonl --out deployed.wtt
    python benchmarks/deploy_quality.py --table deployed.wtt --shapes examples/llama-3-8b.config.json \\
        --log deploy.jsonl --out $OUT

Per layer of the model (the same file and options as `tune --shapes`), --per-layer token counts drawn
log-uniformly from 1..max_m (seeded; LM heads up to 512) among those the log never measured for that
(N, K). Per shape, one interleaved call of wavetune's C++ profiler, measured as `tune --shapes` measures
(tuning.profile, precise: weights cold, each replay after a launch of its own), times every compiled
config of the table at default micro parameters and the table's choice with its own, twice: the one-pass
ratio is the fastest time over the choice's first, and the two launches of the choice show the
measurement's own noise. The fastest of many configs a few percent apart is also the one whose noise
fell lowest (the winner's curse), so a second call times the choice against the --finalists fastest of
the first again: the final ratio, the one reported first. Writes <out>/deploy_quality.jsonl (every
config's time too, for offline studies of other range rules) and prints geomean and worst per layer and
overall.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
from pathlib import Path

import wavetune
from wavetune.families.gemm import tuning
from wavetune.families.gemm.comparison import judge, read_log, unprofiled_ms
from wavetune.runtime import tables
from wavetune.tuning import deploy, tablefile
from wavetune.tuning.report import geomean

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--table", type=Path, required=True, help="the table tune --shapes wrote")
    p.add_argument("--shapes", type=Path, required=True, help="the model file tune --shapes was given")
    p.add_argument("--log", type=Path, required=True, help="the measurement log of the tuning (what it measured)")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--models", help="comma-separated models of a shape-suite file")
    p.add_argument("--max-m", type=int, default=16384)
    p.add_argument("--per-layer", type=int, default=8, help="token counts per layer (default: 8)")
    p.add_argument("--seed", type=int, default=15)
    p.add_argument("--finalists", type=int, default=3, help="configs timed again against the choice (default: 3)")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or REPO / "benchmarks" / "results"))
    return p.parse_args(argv)


def summary(rows: list[dict], names: list[str], field: str, best_field: str, label: str) -> None:
    """Geomean and worst of ``field`` per layer and overall, the worst's fastest config from ``best_field``."""
    for name in names + ["all"]:
        picked = [r for r in rows if name in ("all", r["layer"])]
        worst = min(picked, key=lambda r: r[field])
        print(f"{name}: {label} {geomean([r[field] for r in picked]):.4f} geomean, {worst[field]:.3f} worst "
              f"(M={worst['m']}: {worst['choice']} against {worst[best_field]})")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    selector = tables.open_table(args.table)
    props = wavetune.device_properties()
    selector.check_device(props["name"], props["sm_count"])
    cands = list(deploy.table_candidates(tablefile.read_table(args.table), "bf16", "col").values())
    _, log = read_log(args.log)
    layers = deploy.model_layers(args.shapes, args.tp, args.models, args.max_m)
    rng = random.Random(args.seed)
    shapes = [(layer, m) for layer in layers
              for m in unprofiled_ms({key[2] for key in log if key[:2] == ("bf16", "col") and key[3:5] ==
                                      (layer.n, layer.k)}, layer.max_m, args.per_layer, rng)]
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with (args.out / "deploy_quality.jsonl").open("w") as f:
        for layer, m in tuning.progress(shapes, "judged"):
            rows.append({"layer": layer.name, **judge(selector, cands, m, layer.n, layer.k, args.finalists)})
            f.write(json.dumps(rows[-1]) + "\n")
    print(f"{props['name']}, {args.table}: {len(rows)} shapes at unprofiled M, {len(cands)} configs each")
    names = [layer.name for layer in layers]
    summary(rows, names, "final_ratio", "final_best", f"choice / best of the {args.finalists} finalists, timed again")
    summary(rows, names, "ratio", "best", "choice / best, one pass")
    print(f"choices from exact ranges: {sum(r['source'] == 'exact' for r in rows)} of {len(rows)}")
    spread = sorted(abs(math.log(r["repeat_us"] / r["choice_us"])) for r in rows)
    print(f"noise: the choice launched twice in each call differs by {math.expm1(spread[len(spread) // 2]):.2%} "
          f"(median), {math.expm1(spread[-1]):.2%} at most")


if __name__ == "__main__":
    main()

"""Paged decode attention (wavetune.paged_attention) on decode cases: the wave model's kernel and KV split count
against every kernel and split count (the exhaustive best), SDPA's fastest backend and wavetune's FMHA decode,
on a dense cache and on 16-token pages in shuffled order (docs/attention.md, "Paged decode").

    python benchmarks/paged_attention.py --split design|heldout --out $OUT
    python benchmarks/paged_attention.py --fit DESIGN.jsonl [MORE.jsonl ...] --check HELDOUT.jsonl   # offline, no GPU

design: the named models' heads (Llama-3-8B and -70B at TP 1-8, attention.py's named suite) at random
batches (1-256) and lengths (512-131,072 keys): what the split model's constants are read from. heldout:
other models' heads and head dims (attention.py's held-out decode cases), fitted on by nothing. Methods:
  choice     wavetune.paged_attention on the dense cache, the wave model's kernel and split count
  <kernel>/s<N>  the same forced to each kernel of the head dim and N splits (every count of SPLITS that
             runs differently): the fastest is the best
  paged      wavetune.paged_attention on 16-token pages in shuffled order, its own choice
  attention  wavetune.attention on the dense cache without out=: the library's decode call (cuDNN where
             it routes there)
  fmha       wavetune.attention forced to the FMHA variant and splits its table or model picks (the path
             decode took before), where a variant of the head dim is compiled
  sdpa_*     torch SDPA pinned to cuDNN, flash or efficient (a backend that refuses is left out)
  invariant, attention_invariant   with --batch-invariant: choice and attention in batch-invariant mode
             (docs/torch.md), against choice and attention and SDPA's fastest backend
Checked and timed as benchmarks/attention.py does (fp32 reference on a slice, poisoned outputs, CUDA graphs
replayed round-robin over operand copies larger than twice the L2, medians). Writes
<out>/paged_<split>.jsonl (a header, then one record per case) and <out>/paged_<split>.md.

--fit replays the wave model of csrc/families/attention/paged_model.h (wavetune.families.attention.paged_replay)
on the logged sweeps for a grid of its constants (the paged_ entries of cutlass_configs/sm90_attention.toml's
[model] table) and prints the constants whose choices come closest to the best (geomean), and what they give on
--check's log.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import random
import sys
import time
from pathlib import Path

from wavetune.families.attention.paged_replay import kernel_facts, paged_problem, replay
from wavetune.tuning.report import geomean, invariant_summary, read_jsonl

REPO = Path(__file__).resolve().parents[1]
SPLITS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--split", choices=("design", "heldout"), default="heldout")
    p.add_argument("--count", type=int, default=40)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--time-budget-s", type=float, default=240)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--min-group", type=int, default=1, help="only cases of at least this many query heads per KV head")
    p.add_argument("--head-dim", type=int, help="only cases of this head dim")
    p.add_argument("--batch-invariant", action="store_true",
                   help="time choice and attention in batch-invariant mode too, in the same rounds")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or REPO / "benchmarks" / "results"))
    p.add_argument("--fit", type=Path, nargs="+", help="design logs to fit the split model's constants to (offline)")
    p.add_argument("--check", type=Path, help="with --fit: a held-out log to evaluate the fitted constants on")
    return p.parse_args()


# ---- the wave model's constants fitted offline (wavetune.families.attention.paged_replay) -----------------

def fit(designs: list[Path], check: Path | None) -> None:
    """Fits constants to the design logs (scored on the geomean of their geomeans), the others as shipped: logs
    with the kernels' cluster facts (builds that merge splits in clusters) fit the cluster merge's two; else logs
    of several queries per sequence (benchmarks/varlen_attention.py) fit the tile-math rates, the L2 speed-up,
    the rows_split kernels' cost per softmax step, the wgmma kernel's tile-math speed-up and its copying warps';
    else decode logs fit the bandwidth share, the warp rate, the wave and the merge."""
    logs = [read_jsonl(path) for path in designs]
    rows = [r for _, log in logs for r in log]
    if any("cluster_ctas" in k for r in rows for k in r["kernels"].values()):
        swept = {"paged_cluster_merge_us": (1.0, 2.0, 3.0, 4.0, 5.0),
                 "paged_cluster_split_us": (0.0, 0.1, 0.2, 0.3, 0.5)}
    elif any(r.get("seqlen_q", 1) > 1 for r in rows):
        swept = {"paged_warp_flops_per_us": (2e5, 3e5, 4e5, 6e5), "paged_sm_flops_per_us": (2.6e6, 4e6, 6e6),
                 "paged_l2_speedup": (1.0, 2.0, 3.0, 5.0), "paged_rows_step_us": (0.2, 0.3, 0.5, 0.8),
                 "paged_wgmma_speedup": (1.0, 1.5, 2.0, 3.0, 4.0, 5.0), "paged_ws_copy_speedup": (1.0, 1.25, 1.5, 2.0)}
    else:
        swept = {"paged_hbm_fraction": (0.9, 0.98, 1.06), "paged_warp_bytes_per_us": (3e3, 3.75e3, 4.5e3),
                 "paged_wave_us": (1.0, 2.0, 3.0, 4.0, 5.0), "paged_merge_us": (2.0, 3.0, 5.0, 7.0)}
    grid = [dict(zip(swept, values)) for values in itertools.product(*swept.values())]

    def score(model):
        return geomean(geomean(replay(log, model, header)) for header, log in logs)

    scored = sorted(((score(model), model) for model in grid), key=lambda s: s[0], reverse=True)
    for score_, model in scored[:5]:
        worst = min(min(replay(log, model, header)) for header, log in logs)
        line = ", ".join(f"{name} {value:.3g}" for name, value in model.items())
        line += f": design {score_:.3f} (worst {worst:.2f})"
        if check:
            held_header, held = read_jsonl(check)
            quality = replay(held, model, held_header)
            line += f", held-out {geomean(quality):.3f} (worst {min(quality):.2f})"
        print(line)


# ---- measuring ------------------------------------------------------------------------------------------

def design_cases(count: int, seed: int) -> list[dict]:
    from wavetune.families.attention.cases import NAMED_MODELS, tp_degrees

    rng = random.Random(seed)
    out = []
    for i in range(count):
        name, (hq, hkv, head_dim) = sorted(NAMED_MODELS.items())[i % len(NAMED_MODELS)]
        tp = rng.choice(tp_degrees(hkv))
        out.append(dict(phase="decode", model=f"{name}/tp{tp}", batch=max(1, int(math.exp(rng.uniform(0, math.log(256))))),
                        seqlen_q=1, seqlen_k=int(math.exp(rng.uniform(math.log(512), math.log(131072)))),
                        heads_q=hq // tp, heads_kv=hkv // tp, head_dim=head_dim))
    return out


def methods_for(case: dict, kernels: list, invariant: bool = False) -> dict:
    import torch

    import attention as bench
    import wavetune
    from wavetune import _C
    from wavetune.families.attention import api as fmha

    def paged(config=None, splits=None, batch_invariant=False):
        return lambda q, k, v, out: wavetune.paged_attention(
            q[:, 0], k, v, out=out[:, 0], config=config, splits=splits, batch_invariant=batch_invariant).unsqueeze(1)

    methods = {"choice": paged()}
    if invariant:
        methods["invariant"] = paged(batch_invariant=True)
        methods["attention_invariant"] = lambda q, k, v, out: wavetune.attention(q, k, v, batch_invariant=True)
    for kernel in kernels:
        steps = max(1, -(-case["seqlen_k"] // kernel.tile[1]))
        runs = {}
        for s in SPLITS:
            runs.setdefault(-(-steps // -(-steps // min(s, steps))), s)  # splits that really run -> first asking
        methods.update({f"{kernel.name}/s{n}": paged(kernel.id, n) for n in runs})
    methods["paged"] = bench.paged_launch()
    methods["attention"] = lambda q, k, v, out: wavetune.attention(q, k, v)  # as callers make it: its own output
    fmha_kernels = [c for c in wavetune.attention_configs() if c.dtype == "bf16" and not c.from_library]
    if any(c.tile[2] == case["head_dim"] for c in fmha_kernels):
        def forced(q, k, v, out):
            args = (tuple(bench.tuning.attention_sizes(case)), *map(fmha.tensor_args, (q, k, v, out)),
                    1 / math.sqrt(case["head_dim"]), False, _C.DTYPES.index("bf16"))
            variant, splits = _C.attention_chosen_launch(*args, torch.cuda.current_device())
            return wavetune.attention(q, k, v, out=out, config=variant, splits=splits)
        methods["fmha"] = forced
    for name, backend in bench.SDPA_BACKENDS.items():
        methods[name] = bench.sdpa(backend, False)
    return methods


def measure(case: dict, args, props: dict) -> dict:
    import torch

    from wavetune import _C
    from wavetune.families.attention.cases import kv_bytes
    from wavetune.families.attention.measure import GRAPH_US, check, operand_sets
    from wavetune.tuning.timing import interleaved_us

    kernels = [c for c in wavetune_configs() if c.dtype == "bf16" and c.tile[2] == case["head_dim"]]
    sets = operand_sets(case, props["l2_bytes"])
    methods = methods_for(case, kernels, args.batch_invariant)
    errors = check(methods, sets[0], False, may_refuse=lambda name: name.startswith("sdpa"))
    estimate_us = max(3.0, kv_bytes(case) / 2.5e6)
    per_graph = len(sets) * math.ceil(min(32, max(1, GRAPH_US / estimate_us)) / len(sets))
    times = interleaved_us(methods, sets, per_graph, args.reps)
    variant, splits = _C.paged_attention_chosen_launch(*paged_problem(case), _C.DTYPES.index("bf16"))
    choice = f"{next(c.name for c in kernels if c.id == variant)}/s{splits}"
    sweep = {name: us for name, us in times.items() if "/s" in name}
    sdpa = {name: us for name, us in times.items() if name.startswith("sdpa")}
    torch.cuda.empty_cache()
    return {**case, "kernels": {c.name: kernel_facts(c) for c in kernels}, "choice": choice, "times": times,
            "best": min(sweep, key=sweep.get), "best_us": min(sweep.values()),
            "sdpa_best": min(sdpa, key=sdpa.get) if sdpa else None,
            "sdpa_best_us": min(sdpa.values()) if sdpa else None, "max_error": max(errors.values())}


def wavetune_configs():
    import wavetune

    return wavetune.paged_attention_configs()


def summary(rows: list[dict], header: dict) -> str:
    lines = [f"{header['gpu']}, {header['date']}, torch {header['torch']}, {len(rows)} {header['split']} decode cases, "
             "bf16; ratios above 1: wavetune faster. `choice`: wavetune.paged_attention on the dense cache with the "
             "wave model's split count; `paged`: on 16-token pages in shuffled order; `best`: the fastest split count "
             "of the sweep; SDPA: its fastest backend per case; `fmha`: wavetune's FMHA decode.", "",
             "| batch | n | choice vs SDPA | worst | paged vs SDPA | worst | choice / best | worst | choice vs fmha | "
             "worst | attention vs SDPA | worst |", "|" + " --- |" * 12]
    for low, high in ((1, 1), (2, 16), (17, 64), (65, 256), (1, 256)):
        rs = [r for r in rows if low <= r["batch"] <= high and r["sdpa_best_us"]]
        if not rs:
            continue
        cells = []
        for num, den in (("sdpa", "choice"), ("sdpa", "paged"), ("best", "choice"), ("fmha", "choice"),
                         ("sdpa", "attention")):
            ratios = [value(r, num) / value(r, den) for r in rs if value(r, num) and value(r, den)]
            cells.append(f"{geomean(ratios):.3f}x | {min(ratios):.2f}x" if ratios else "- | -")
        lines.append(f"| {'all' if (low, high) == (1, 256) else f'{low}-{high}'} | {len(rs)} | " + " | ".join(cells) + " |")
    timed = [r for r in rows if "invariant" in r["times"] and r["sdpa_best_us"]]
    for mode, normal in (("invariant", "choice"), ("attention_invariant", "attention")):
        if timed:
            lines.append(f"\n{mode} against {normal}: " + invariant_summary(
                [r["times"][mode] for r in timed], [r["times"][normal] for r in timed],
                [r["sdpa_best_us"] for r in timed], "SDPA's fastest backend"))
    return "\n".join(lines)


def value(row: dict, name: str) -> float | None:
    return {"sdpa": row["sdpa_best_us"], "best": row["best_us"]}.get(name, row["times"].get(name))


def describe(row: dict) -> str:
    t = row["times"]
    return (f"{row['model']} b{row['batch']} k{row['seqlen_k']} h{row['heads_q']}/{row['heads_kv']} d{row['head_dim']}: "
            f"choice {t['choice']:.1f} us ({row['choice']}), best {row['best_us']:.1f} ({row['best']}), "
            f"paged {t['paged']:.1f}, sdpa {row['sdpa_best_us'] or 0:.1f} ({row['sdpa_best']}), "
            f"fmha {t.get('fmha', 0):.1f}, attention {t.get('attention', 0):.1f}")


def main() -> None:
    args = parse_args()
    if args.fit:
        fit(args.fit, args.check)
        return
    sys.path.insert(0, str(Path(__file__).parent))
    import torch

    import attention as bench
    import wavetune
    from case_log import measure_cases
    from wavetune.families.attention.cases import measurable

    props = wavetune.device_properties()
    todo = design_cases(args.count, args.seed) if args.split == "design" else bench.heldout_cases(
        ["decode"], args.count, args.seed)
    todo = [c for c in measurable(todo, {c.tile[2] for c in wavetune_configs()}, args.seed)
            if c["heads_q"] // c["heads_kv"] >= args.min_group and args.head_dim in (None, c["head_dim"])]
    header = {"gpu": props["name"], "torch": torch.__version__, "build": wavetune.build_info(), "split": args.split,
              "sm_count": props["sm_count"], "memory_bytes_per_s": props["memory_bytes_per_s"], "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "args": {k: str(v) for k, v in vars(args).items()}}
    rows = measure_cases(todo, lambda case: measure(case, args, props), args.out / f"paged_{args.split}.jsonl",
                         header, args.time_budget_s, describe)
    table = summary(rows, header)
    (args.out / f"paged_{args.split}.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()

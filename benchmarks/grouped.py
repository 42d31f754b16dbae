"""wavetune.grouped_gemm against torch._grouped_mm and a per-expert torch.matmul loop on the expert GEMMs of
mixture-of-experts models (docs/grouped.md).

    python benchmarks/grouped.py --out $OUT --time-budget-s 180

bf16. A case is a model, a projection (gate_up: N = 2 x intermediate, K = hidden; down: N = hidden, K =
intermediate), a token count and a routing (balanced: each token picks top-k distinct experts uniformly;
skewed: with Zipf popularity over the experts; hot: three experts are picked 30 times as often as the
others). Its rows are tokens x top-k, sorted by expert. `--suite named` (default) runs the four models
below at fixed token counts; `--suite tune` / `heldout` runs `--count` generated cases of other MoE models'
expert layers (wavetune.families.grouped_gemm.cases: expert and tensor parallel splits, token counts
log-uniform over 1-16384, random routing), the tune split for fitting grouped tables, the held-out split for
reports. Methods:
  choice      wavetune.grouped_gemm with no config (its choice from the sizes alone: the GPU's grouped table's,
              else the built-in heuristic's)
  <variant>   wavetune.grouped_gemm forced to each compiled grouped variant of the dtype: the fastest of
              them is the exhaustive best
  torch       torch._grouped_mm(x, w.transpose(-2, -1), offs=offsets)
  loop        torch.matmul per expert that has rows (their counts known on the host)
(`--no-loop` leaves the loop out; `--batch-invariant` adds `invariant`, wavetune.grouped_gemm in batch-invariant
mode, docs/torch.md.) With `--fp8 row` the experts run in e4m3 with a scale per token and per
expert channel: `choice` and the variants are wavetune.scaled_grouped_gemm's, `torch` is
torch._scaled_grouped_mm(x, w.transpose(-2, -1), scale_x, scale_w, offs=offsets, out_dtype=torch.bfloat16), and
there is no loop. With `--fp8 block` the scales are per 1x128 token group and 128x128 weight block (FP8
checkpoints' layout): `choice` (through wavetune.scaled_grouped_gemm) and the variants are those of block128
scales, `torch` dequantizes x and w with torch ops and runs torch._grouped_mm in bf16 (PyTorch has no
block-scaled grouped GEMM on Hopper). Each is checked against a float32 reference on sampled rows, then timed
as CUDA graphs replayed round-robin (warm-up, interleaved rounds, medians) over fresh uniform(-1, 1)
operands. Where one operand set would fit in the L2, sets with the same counts on other experts rotate, so
weights come from DRAM as in a forward pass: the measurement `python -m wavetune tune --family grouped_gemm`
makes of the variants (wavetune.families.grouped_gemm.measure), with this script's comparisons in the same
rounds. Cases run token counts spread over the range first, so a cut budget still spans it. Writes <out>/grouped_<suite>.jsonl (a header, then one record per case as measured) and
<out>/grouped_<suite>.md (grouped_fp8_<suite>.* with --fp8 row, grouped_fp8_block_<suite>.* with --fp8 block).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

from case_log import measure_cases
import wavetune
from wavetune import _C
from wavetune.families.grouped_gemm import mapping as grouped_mapping
from wavetune.families.grouped_gemm.api import SCALES
from wavetune.families.grouped_gemm.cases import ROUTINGS as GENERATED_ROUTINGS, e4m3_cases, moe_cases
from wavetune.families.grouped_gemm.measure import BLOCK, dequantize_experts, measure_case, operand_sets
from wavetune.runtime.tables import default_table_path
from wavetune.tuning.report import geomean, invariant_summary
from wavetune.tuning.splits import HASHED_SPLITS

REPO = Path(__file__).resolve().parents[1]
MODELS = {
    "mixtral-8x7b": dict(experts=8, hidden=4096, inter=14336, topk=2),
    "qwen3-30b-a3b": dict(experts=128, hidden=2048, inter=768, topk=8),
    "qwen3-235b-a22b": dict(experts=128, hidden=4096, inter=1536, topk=8),
    "deepseek-v3": dict(experts=256, hidden=7168, inter=2048, topk=8),
}
PROJECTIONS = {"gate_up": lambda m: (2 * m["inter"], m["hidden"]), "down": lambda m: (m["hidden"], m["inter"])}
TOKENS = (1, 2048, 128, 16384, 16, 512, 8192, 4, 64, 4096)  # in the order measured
ROUTINGS = ("balanced", "skewed")
TOKEN_BUCKETS = ((1, 16), (17, 512), (513, 4096), (4097, 16384))
# Per --fp8 value: the scales mode timed, its variants' build filter, the precision and the baseline.
MODES = {
    "": ("", "grouped_bf16_*", "bf16", "_grouped_mm"),
    "row": ("row", "e4m3_grouped_bf16_*", "e4m3 with per-token and per-channel scales", "_scaled_grouped_mm"),
    "block": ("block128", "e4m3_block128_grouped_bf16_*", "e4m3 with 1x128 and 128x128 block scales",
              "dequantize + _grouped_mm"),
}


def scales_choice(scales: str):
    """The run-time choice of a scales mode: (dtype code, rows, experts, N, K, device) -> variant id."""
    code = list(SCALES).index(scales)
    return lambda dtype, rows, experts, n, k, device: _C.grouped_chosen_variant(dtype, rows, experts, n, k, device,
                                                                                code)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--suite", choices=("named", *HASHED_SPLITS), default="named")
    p.add_argument("--count", type=int, default=300, help="cases of a generated suite")
    p.add_argument("--no-loop", action="store_true", help="leave the per-expert loop out (it is slow to capture)")
    p.add_argument("--fp8", nargs="?", const="row", default="", choices=("row", "block"),
                   help="e4m3 experts, scales per row (scaled_grouped_gemm against _scaled_grouped_mm; the default) or "
                        "per block (against dequantize + _grouped_mm)")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="comma-separated, measured in this order")
    p.add_argument("--routings", default=",".join(ROUTINGS))
    p.add_argument("--projections", default=",".join(PROJECTIONS))
    p.add_argument("--batch-invariant", action="store_true",
                   help="time wavetune.grouped_gemm(batch_invariant=True) in the same rounds (bf16 only)")
    p.add_argument("--reps", type=int, default=7, help="interleaved rounds; the median is kept")
    p.add_argument("--time-budget-s", type=float, default=240, help="start no case after this many seconds")
    p.add_argument("--seed", type=int, default=17)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or REPO / "benchmarks" / "results"))
    return p.parse_args()


def per_expert_loop(x, w, offsets, out, bounds):
    for e, start, end in bounds:
        torch.matmul(x[start:end], w[e].t(), out=out[start:end])
    return out


def comparisons(loop: bool, fp8: str, invariant: bool = False) -> dict:
    """The methods timed beside the variants: wavetune's own choice, torch._grouped_mm, the loop and batch-invariant
    mode's choice (with ``fp8``: wavetune's choice and PyTorch's way with those scales)."""
    if fp8 == "block":
        def torch_path(x, w, offsets, out, bounds, sx, sw):
            w_bf16 = dequantize_experts(w, sw, BLOCK, torch.bfloat16)
            return torch._grouped_mm(dequantize_experts(x, sx, 1, torch.bfloat16), w_bf16.transpose(-2, -1), offs=offsets)

        return {
            "choice": lambda x, w, offsets, out, bounds, sx, sw: wavetune.scaled_grouped_gemm(x, w, sx, sw, offsets,
                                                                                               out=out),
            "torch": torch_path,
        }
    if fp8:
        return {
            "choice": lambda x, w, offsets, out, bounds, sx, sw: wavetune.scaled_grouped_gemm(x, w, sx, sw, offsets,
                                                                                               out=out),
            "torch": lambda x, w, offsets, out, bounds, sx, sw: torch._scaled_grouped_mm(
                x, w.transpose(-2, -1), sx, sw, offs=offsets, out_dtype=torch.bfloat16),
        }
    methods = {
        "choice": lambda x, w, offsets, out, bounds: wavetune.grouped_gemm(x, w, offsets, out=out),
        "torch": lambda x, w, offsets, out, bounds: torch._grouped_mm(x, w.transpose(-2, -1), offs=offsets),
    }
    if loop:
        methods["loop"] = per_expert_loop
    if invariant:
        methods["invariant"] = lambda x, w, offsets, out, bounds: wavetune.grouped_gemm(x, w, offsets, out=out,
                                                                                         batch_invariant=True)
    return methods


def measure(case: dict, args: argparse.Namespace, l2_bytes: int, generator: torch.Generator) -> dict:
    scales = MODES[args.fp8][0]
    record, times, counts = measure_case(case, l2_bytes, generator, args.reps,
                                         comparisons(not args.no_loop and not args.fp8, args.fp8,
                                                     args.batch_invariant and not args.fp8), scales)
    n, k, rows = case["n"], case["k"], record["rows"]
    chosen = scales_choice(scales)(_C.DTYPES.index("bf16"), rows, case["experts"], n, k, torch.cuda.current_device())
    c = next(c for c in wavetune.grouped_configs(scales) if c.id == chosen)
    sms = wavetune.device_properties()["sm_count"]
    return {**record, "choice": c.name,
            "grid_estimate": grouped_mapping.balanced(c.tile, c.cluster, c.swap_ab, rows, case["experts"], n, k,
                                                      sms).grid,
            "grid_routed": grouped_mapping.routed(c.tile, c.cluster, c.swap_ab, counts, n, k, sms).grid,
            "choice_us": times["choice"], "torch_us": times["torch"], "loop_us": times.get("loop"),
            **({"invariant_us": times["invariant"]} if "invariant" in times else {})}


def host_costs(fp8: str, l2_bytes: int) -> dict:
    """Host microseconds of the run-time choice alone, and of whole eager calls (wavetune's choice and the
    torch baseline) of a decode-sized problem: 8 tokens on 8 of 128 experts, N 1536, K 2048."""
    operands = operand_sets([1] * 8 + [0] * 120, 1536, 2048, l2_bytes, MODES[fp8][0])[0]
    methods = comparisons(False, fp8)
    choice = scales_choice(MODES[fp8][0])

    def per_call_us(call, count=200):
        call()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(count):
            call()
        elapsed = time.perf_counter() - start
        torch.cuda.synchronize()
        return 1e6 * elapsed / count

    device = torch.cuda.current_device()
    call_us = per_call_us(lambda: methods["choice"](*operands))  # first: loads the table
    return {"decision_us": per_call_us(lambda: choice(0, 8, 128, 1536, 2048, device), 10000), "call_us": call_us,
            "torch_call_us": per_call_us(lambda: methods["torch"](*operands))}


def cases(args: argparse.Namespace) -> list[dict]:
    """The suite's cases (with --fp8, those whose K fills 16-byte e4m3 rows)."""
    every = generated_or_named(args)
    return e4m3_cases(every) if args.fp8 else every


def generated_or_named(args: argparse.Namespace) -> list[dict]:
    if args.suite != "named":
        return moe_cases(args.suite, args.count, GENERATED_ROUTINGS)
    out = []
    for tokens in map(int, args.tokens.split(",")):
        for model in args.models.split(","):
            for projection in args.projections.split(","):
                n, k = PROJECTIONS[projection](MODELS[model])
                for routing in args.routings.split(","):
                    out.append({"model": model, "projection": projection, "tokens": tokens, "routing": routing,
                                "experts": MODELS[model]["experts"], "topk": MODELS[model]["topk"], "n": n, "k": k})
    return out


def summary(rows: list[dict], header: dict) -> str:
    host = header["host"]
    *_, precision, baseline = MODES[header["args"].get("fp8", "")]
    lines = [f"{header['gpu']}, {header['date']}, torch {header['torch']}, {len(rows)} cases, {precision}; speed ratios "
             f"(above 1: wavetune faster). Host time: the choice {host['decision_us']:.2f} us, an eager call "
             f"{host['call_us']:.1f} us ({baseline} {host['torch_call_us']:.1f} us).",
             "",
             f"| cases | n | choice vs {baseline}: geomean | worst | best vs {baseline} | choice / best: geomean "
             "| worst | choice vs loop |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    groups = {"all": rows}
    named = header["args"]["suite"] == "named"
    for key in ("model", "projection", "routing") if named else ("projection", "routing"):
        for value in dict.fromkeys(r[key] for r in rows):
            groups[f"{key} {value}"] = [r for r in rows if r[key] == value]
    for low, high in TOKEN_BUCKETS:
        groups[f"tokens {low}-{high}"] = [r for r in rows if low <= r["tokens"] <= high]
    for label, rs in groups.items():
        if not rs:
            continue
        vs_torch = [r["torch_us"] / r["choice_us"] for r in rs]
        best_vs_torch = [r["torch_us"] / r["best_us"] for r in rs]
        quality = [r["best_us"] / r["choice_us"] for r in rs]
        vs_loop = [r["loop_us"] / r["choice_us"] for r in rs if r["loop_us"]]
        lines.append(f"| {label} | {len(rs)} | {geomean(vs_torch):.3f}x | {min(vs_torch):.2f}x | "
                     f"{geomean(best_vs_torch):.3f}x | {geomean(quality):.3f} | {min(quality):.2f} | "
                     + (f"{geomean(vs_loop):.2f}x |" if vs_loop else "- |"))
    invariant = [r for r in rows if "invariant_us" in r]
    if invariant:
        lines.append("\n" + invariant_summary([r["invariant_us"] for r in invariant],
                                               [r["choice_us"] for r in invariant], [r["torch_us"] for r in invariant],
                                               baseline))
    return "\n".join(lines)


def describe(row: dict) -> str:
    return (f"{row['model']} {row['projection']} {row['tokens']} {row['routing']}: choice {row['choice_us']:.1f} "
            f"us ({row['choice']}), best {row['best_us']:.1f}, torch {row['torch_us']:.1f}, "
            f"loop {row['loop_us'] or 0:.1f}")


def main() -> None:
    args = parse_args()
    scales, pattern, *_ = MODES[args.fp8]
    if not any(c.dtype == "bf16" for c in wavetune.grouped_configs(scales)):
        sys.exit(f"no bf16 grouped variants compiled (WAVETUNE_KERNEL_FILTER='{pattern}' builds them)")
    start = time.monotonic()
    props = wavetune.device_properties()
    generator = torch.Generator().manual_seed(args.seed)
    table = default_table_path(props["name"], "grouped_gemm", scales)
    header = {"gpu": props["name"], "torch": torch.__version__, "build": wavetune.build_info(),
              "grouped_table": str(table) if table else None, "sm_count": props["sm_count"],
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "args": {k: str(v) for k, v in vars(args).items()}, "host": host_costs(args.fp8, props["l2_bytes"])}
    name = f"grouped_{dict(row='fp8_', block='fp8_block_').get(args.fp8, '')}{args.suite}"

    def measured(case: dict) -> dict:
        row = measure(case, args, props["l2_bytes"], generator)
        torch.cuda.empty_cache()  # the next case's weights may be gigabytes
        return row

    rows = measure_cases(cases(args), measured, args.out / f"{name}.jsonl", header, args.time_budget_s, describe,
                         start)
    table = summary(rows, header)
    (args.out / f"{name}.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()

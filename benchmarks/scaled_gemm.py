"""FP8 scaled GEMMs (e4m3 weights and activations, fp32 scales) against torch._scaled_mm, in one interleaved run:

    python benchmarks/scaled_gemm.py --out $OUT                             # held-out layers, M 1-16384
    python benchmarks/scaled_gemm.py --split design --max-m 16 --out $OUT   # what the choice is fitted on
    python benchmarks/scaled_gemm.py --scales block --max-m 16 --out $OUT   # 128-block scales

Shapes are the decoder-layer projections (qkv, o, gate_up, down) of the split's models at tensor-parallel
degrees 1-8, each at token counts drawn (seeded) from 1-8, 9-16, 17-64, 65-1024 and 1025-16384, odd ones
included. The held-out models are ones no design decision of the scaled GEMM looked at. Per problem, one
CUDA graph each of:
  torch_rowwise / torch_tensor      torch._scaled_mm, per-token x per-channel scales / per-tensor scales
  wavetune_rowwise / wavetune_tensor  wavetune.scaled_gemm, its wave model's choice
  bucket                            an M-bucket rule over wavetune's catalog (vLLM's kind of dispatch: a fixed
                                    tile per range of M), rowwise, M <= 64
  cutlass_tensor                    the CUTLASS variant chosen for per-row scales, run with per-tensor ones
  bf16                              torch.matmul on bf16 copies of the weights (cuBLAS), for reference
  <variant>/<splits>                every CUTLASS variant (unsplit), and up to M = 64 every decode variant at 1,
                                    2, 4 and 8 K splits, rowwise
With --scales block (1x128 activation groups, 128x128 weight blocks), from bf16 activations each:
  wavetune                          wavetune.quantize_fp8(x, group_size=128), then wavetune.scaled_gemm
  dequant                           the weights dequantized to bf16, then torch.matmul (plain PyTorch)
  transformers                      transformers' finegrained FP8 linear (its Triton kernels), where importable
  deepgemm                          with --deepgemm: wavetune's quantizer, then DeepGEMM's fp8_gemm_nt (its sm90
                                    kernels, compiled on first use of a shape)
  <variant>/<splits>                wavetune's quantizer, then each block-scaled variant (swapped and decode up
                                    to M = 64, unswapped past it)
  block_grouped/1                   wavetune's quantizer, then the block-scaled grouped GEMM with one expert
                                    (its choice; what scaled_gemm runs past the decode variants' tokens where
                                    cuBLASLt is absent)
  cublaslt_e4m3_bf16/1              wavetune's quantizer, then scaled_gemm's cuBLASLt variant where it has a
                                    block-scaled kernel (M >= 2)
replayed round-robin (--reps rounds, medians); weights cold (copies rotated past twice the L2 size), inputs
random. Every method's output is checked against the fp32 reference of the dequantized operands first
(output poisoned). Writes <out>/scaled_gemm.jsonl, prints geomeans per M range and TB/s of the weights.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import time
from pathlib import Path

import torch

import wavetune
from wavetune.families.scaled_gemm.cases import M_RANGES, MODELS, VARIANT_M, problems
from wavetune.families.scaled_gemm.replay import (cutlass_share_quality, device_decode_facts, prefill_quality,
                                                  replay_quality, table_quality)
from wavetune.tuning.report import geomean
from wavetune.tuning.timing import interleaved_us

REPO = Path(__file__).resolve().parents[1]
SPLITS = tuple(wavetune._C.scaled_gemm_model()["decode_split_counts"])  # the decode splits the choice weighs
FP8 = torch.float8_e4m3fn


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--split", choices=tuple(MODELS), default="heldout")
    p.add_argument("--scales", choices=("rowwise", "block"), default="rowwise")
    p.add_argument("--deepgemm", action="store_true", help="with --scales block: also DeepGEMM's fp8_gemm_nt")
    p.add_argument("--max-m", type=int, default=16384, help="leave out M ranges above this")
    p.add_argument("--min-m", type=int, default=1, help="leave out problems below this M (the others draw the same M)")
    p.add_argument("--limit", type=int, help="a seeded random sample of this many problems")
    p.add_argument("--reps", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-budget-s", type=float, default=420.0, help="start no new problem after this")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or REPO / "benchmarks" / "results"))
    p.add_argument("--replay", type=Path, nargs="+", metavar="LOG",
                   help="offline, no GPU: replay the decode variants' choice on logs of this benchmark")
    p.add_argument("--fit-table", type=Path, metavar="DESIGN_LOG",
                   help="with --replay: instead, fit the shared wave model to this log's sweep (a table) and judge "
                        "its choices on the replayed logs beside the shipped choice's")
    return p.parse_args()


# ---- the built-in choice and a fitted table, replayed offline (wavetune.families.scaled_gemm.replay) -------

def replay(logs: list[Path]) -> None:
    """choice / best 8-token decode variant and split, geomean per log and token range; the CUTLASS-or-decode
    rule's quality at 1-16 tokens for each share of the SMs; with block scales past 64 tokens, the CUTLASS
    choice's."""
    for log in logs:
        line = [f"{log.name}:"]
        for (low, high), quality in replay_quality(log).items():
            line.append(f"M {low}-{high}: {geomean(quality):.3f} (worst {min(quality, default=float('nan')):.2f}, "
                        f"{len(quality)})")
        for share in (3, 4, 5, 6):
            quality = cutlass_share_quality(log, share)
            if quality:
                line.append(f"share {share}: {geomean(quality):.3f} (worst {min(quality):.2f}, {len(quality)})")
        if quality := prefill_quality(log):
            line.append(f"block scales past {VARIANT_M} tokens: {geomean(quality):.3f} (worst {min(quality):.2f}, "
                        f"{len(quality)})")
        print(" ".join(line))


def replay_table(design: Path, logs: list[Path]) -> None:
    """choice / best of a table fitted to ``design``, and of the shipped choice, on each log up to 64 tokens."""
    for log in logs:
        table, shipped = table_quality(design, log)
        print(f"{log.name}: table fitted to {design.name}: {geomean(table):.3f} (worst {min(table):.2f}); the shipped "
              f"choice: {geomean(shipped):.3f} (worst {min(shipped):.2f}); {len(table)} problems")


@torch.no_grad()
def operands(m: int, n: int, k: int, l2_bytes: int, block: bool) -> list[dict]:
    """Copies of every operand, together past twice the L2 size: each launch reads its weights from DRAM."""
    from wavetune.nn import FP8Linear

    copies = min(max(math.ceil(2 * l2_bytes / (n * k)), 2), 32)
    out = []
    for _ in range(copies):
        linear = torch.nn.Linear(k, n, bias=False, device="cuda")
        torch.nn.init.uniform_(linear.weight, -0.05, 0.05)
        x = torch.rand(m, k, device="cuda", dtype=torch.bfloat16) * 2 - 1
        layer = FP8Linear.from_linear(linear, block_scales=block)
        xq, sx = wavetune.quantize_fp8(x, group_size=128 if block else None)
        sw = layer.weight_scale if block else layer.weight_scale.view(1, -1)
        out.append(dict(x=xq, w=layer.weight, sx=sx, sw=sw, sx1=sx.amax().reshape(()), sw1=sw.amax().reshape(()),
                        w16=linear.weight.to(torch.bfloat16), x16=x,
                        out=torch.empty(m, n, device="cuda", dtype=torch.bfloat16)))
    return out


def bucket_variant(m: int) -> str:
    """A fixed tile per range of M, as vLLM's sm90 FP8 dispatch picks one (a swapped 16-token tile up to 16
    tokens, a 64-token one up to 64), over wavetune's catalog; M <= VARIANT_M."""
    if m <= 8:
        return "e4m3_bf16_decode_64x8_4x1"
    return "e4m3_bf16_swapab_pingpong_64x16x128_1x1" if m <= 16 else "e4m3_bf16_swapab_pingpong_64x64x128_1x1"


def config_name(variant_id: int) -> str:
    return next(c.name for c in wavetune.scaled_gemm_configs() if c.id == variant_id)


def block_launches(m: int, deepgemm: bool) -> dict:
    """--scales block: every method from bf16 activations (a layer's input); DeepGEMM's with ``deepgemm``."""
    def quantized(o):
        return wavetune.quantize_fp8(o["x16"], group_size=128)

    def wavetune_block(o):
        q, s = quantized(o)
        return wavetune.scaled_gemm(q, o["w"].t(), s, o["sw"], out=o["out"], block_scales=True)

    def dequant(o):
        n, k = o["w"].shape
        w = (o["w"].float() * o["sw"].repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]).bfloat16()
        return torch.matmul(o["x16"], w.t(), out=o["out"])

    def grouped_one_expert(o):
        q, scale = quantized(o)
        offsets = torch.full((1,), q.shape[0], dtype=torch.int32, device="cuda")
        return wavetune.block_scaled_grouped_gemm(q, o["w"].unsqueeze(0), scale, o["sw"].unsqueeze(0), offsets,
                                                  out=o["out"])

    found = dict(wavetune=wavetune_block, dequant=dequant)
    if any(c.dtype == "bf16" for c in wavetune.block_scaled_grouped_configs()):
        found["block_grouped/1"] = grouped_one_expert
    if deepgemm:
        import deep_gemm

        def deepgemm_gemm(o):
            q, scale = quantized(o)
            deep_gemm.fp8_gemm_nt((q, scale), (o["w"], o["sw"]), o["out"])
            return o["out"]

        found["deepgemm"] = deepgemm_gemm
    try:
        from transformers.integrations.finegrained_fp8 import finegrained_fp8_linear

        found["transformers"] = lambda o: finegrained_fp8_linear(o["x16"], o["w"], o["sw"], [128, 128], None, None)
    except ImportError:
        pass
    for c in wavetune.scaled_gemm_configs():
        if c.dtype == "bf16" and c.schedule == "cublas" and m >= 2:  # the second-pass one refuses block scales
            def library(o, v=c.name):
                q, scale = quantized(o)
                return wavetune.scaled_gemm(q, o["w"].t(), scale, o["sw"], out=o["out"], block_scales=True, config=v)
            found[f"{c.name}/1"] = library
    for c in wavetune.scaled_gemm_configs():
        # up to 64 tokens the swapped and decode variants, past them the unswapped ones
        if c.dtype != "bf16" or "_block128_" not in c.name or c.swap_ab != (m <= VARIANT_M):
            continue
        for s in (SPLITS if c.scheduler == "data_parallel" else (1,)):
            def variant(o, v=c.name, s=s):
                q, scale = quantized(o)
                return wavetune.scaled_gemm(q, o["w"].t(), scale, o["sw"], out=o["out"], block_scales=True,
                                            config=v, splits=s)
            found[f"{c.name}/{s}"] = variant
    return found


def launches(m: int, n: int, k: int) -> dict:
    # Each returns its output: torch's allocate theirs (from the graph's pool: no cost at replay).
    def torch_rowwise(o):
        return torch._scaled_mm(o["x"], o["w"].t(), o["sx"], o["sw"], out_dtype=torch.bfloat16)

    def torch_tensor(o):
        return torch._scaled_mm(o["x"], o["w"].t(), o["sx1"], o["sw1"], out_dtype=torch.bfloat16)

    def wavetune_rowwise(o):
        return wavetune.scaled_gemm(o["x"], o["w"].t(), o["sx"], o["sw"], out=o["out"])

    def wavetune_tensor(o):
        return wavetune.scaled_gemm(o["x"], o["w"].t(), o["sx1"], o["sw1"], out=o["out"])

    def bf16(o):
        return torch.matmul(o["x16"], o["w16"].t(), out=o["out"])

    found = dict(torch_rowwise=torch_rowwise, torch_tensor=torch_tensor, wavetune_rowwise=wavetune_rowwise,
                 wavetune_tensor=wavetune_tensor, bf16=bf16)
    if m <= VARIANT_M:
        found["bucket"] = lambda o, v=bucket_variant(m): wavetune.scaled_gemm(o["x"], o["w"].t(), o["sx"], o["sw"],
                                                                             out=o["out"], config=v)
    chosen = wavetune._C.scaled_gemm_chosen_variant(m, n, k, 0, 1, 1)
    if chosen >= 0 and "_decode_" not in config_name(chosen):
        found["cutlass_tensor"] = lambda o, v=config_name(chosen): wavetune.scaled_gemm(
            o["x"], o["w"].t(), o["sx1"], o["sw1"], out=o["out"], config=v)
    for c in wavetune.scaled_gemm_configs():
        decode = c.schedule == "decode"
        if c.dtype != "bf16" or "_block128_" in c.name or (decode and m > VARIANT_M):
            continue
        for s in (SPLITS if c.scheduler == "data_parallel" else (1,)):
            found[f"{c.name}/{s}"] = lambda o, v=c.name, s=s: wavetune.scaled_gemm(
                o["x"], o["w"].t(), o["sx"], o["sw"], out=o["out"], config=v, splits=s)
    return found


def runnable(name: str, launch, o: dict, block: bool) -> bool:
    """Whether ``launch`` runs the problem and matches the fp32 reference (poisoned output first)."""
    o["out"].fill_(float("nan"))
    try:
        out = launch(o)
    except (ValueError, RuntimeError, ImportError) as exc:
        if "/" not in name and name not in ("transformers", "deepgemm"):
            raise
        if name in ("transformers", "deepgemm"):
            print(f"{name} left out: {exc}")
        return False
    torch.cuda.synchronize()
    if block:  # the bf16 layer: FP8 rounding of weights and activations is within the tolerance
        ref, tolerance = o["x16"].float() @ o["w16"].float().t(), 6e-2
    else:
        ref, tolerance = reference(name, o), 1e-2
    error = ((out.float() - ref).norm() / ref.norm()).item()
    if not error < tolerance:
        raise AssertionError(f"{name}: error {error} (NaN: output not written)")
    return True


def reference(name: str, o: dict):
    if name == "bf16":
        ref = o["x16"].float() @ o["w16"].float().t()
    elif name.endswith("_tensor"):
        ref = (o["x"].float() @ o["w"].float().t()) * (o["sx1"] * o["sw1"])
    else:
        ref = (o["x"].float() * o["sx"]) @ (o["w"].float() * o["sw"].t()).t()
    return ref


def measure(problem: dict, reps: int, l2_bytes: int, block: bool, deepgemm: bool = False) -> dict:
    m, n, k = problem["m"], problem["n"], problem["k"]
    ops = operands(m, n, k, l2_bytes, block)
    found = block_launches(m, deepgemm) if block else launches(m, n, k)
    methods = {name: fn for name, fn in found.items()
               if runnable(name, fn, ops[0], block)}
    us = interleaved_us(methods, [(o,) for o in ops], per_graph=max(len(ops), 8), reps=reps)
    variants = {name: t for name, t in us.items() if "/" in name}
    best = min(variants, key=variants.get) if variants else None
    fp8_bytes = n * k
    if block:
        row = {**problem, "us": us, "weight_mb": fp8_bytes / 1e6, "dequant_speedup": us["dequant"] / us["wavetune"],
               "wavetune_tbps": fp8_bytes / us["wavetune"] / 1e6}
        for peer in ("transformers", "deepgemm"):
            if peer in us:
                row[f"{peer}_speedup"] = us[peer] / us["wavetune"]
        if best:
            row.update(best=best, best_us=us[best], choice_vs_best=us[best] / us["wavetune"])
        return row
    limit_us = max(fp8_bytes / 3.35e6, 2 * m * n * k / 989e6 / 2)  # HBM3 or dense FP8 tensor peak (H100 SXM)
    row = {**problem, "us": us, "weight_mb": fp8_bytes / 1e6, "limit_us": limit_us,
           "rowwise_speedup": us["torch_rowwise"] / us["wavetune_rowwise"],
           "tensor_speedup": us["torch_tensor"] / us["wavetune_tensor"],
           "torch_rowwise_of_limit": limit_us / us["torch_rowwise"],
           "wavetune_rowwise_tbps": fp8_bytes / us["wavetune_rowwise"] / 1e6,
           "torch_rowwise_tbps": fp8_bytes / us["torch_rowwise"] / 1e6}
    if "cutlass_tensor" in us:
        row["cutlass_tensor_speedup"] = us["torch_tensor"] / us["cutlass_tensor"]
    if best:
        chosen = wavetune._C.scaled_gemm_chosen_variant(m, n, k, 0, 1, 1)  # per-row scales
        row.update(best=best, best_us=us[best], choice_vs_best=us[best] / us["wavetune_rowwise"],
                   chosen=config_name(chosen) if chosen >= 0 else "torch._scaled_mm",
                   best_tbps=fp8_bytes / us[best] / 1e6)
        if "bucket" in us:
            row["bucket_vs_best"] = us[best] / us["bucket"]
    return row


def block_summary(rows: list[dict]) -> str:
    lines = []
    for label, lo, hi in M_RANGES:
        part = [r for r in rows if lo <= r["m"] <= hi]
        if not part:
            continue
        speedups = [r["dequant_speedup"] for r in part]
        line = (f"M {label}: {len(part)} problems; vs dequantize + bf16 GEMM {geomean(speedups):.3f}x "
                f"(min {min(speedups):.3f})")
        for peer, label in (("transformers", "transformers' Triton"), ("deepgemm", "DeepGEMM")):
            if all(f"{peer}_speedup" in r for r in part):
                speedups = [r[f"{peer}_speedup"] for r in part]
                line += f", vs {label} {geomean(speedups):.3f}x (min {min(speedups):.3f})"
        if all("choice_vs_best" in r for r in part):
            line += f"; choice {geomean([r['choice_vs_best'] for r in part]):.3f} of the best variant"
        lines.append(line)
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    lines = []
    for label, lo, hi in M_RANGES:
        part = [r for r in rows if lo <= r["m"] <= hi]
        if not part:
            continue
        worst = min(part, key=lambda r: r["rowwise_speedup"])
        line = (f"M {label}: {len(part)} problems; rowwise {geomean([r['rowwise_speedup'] for r in part]):.3f}x "
                f"torch._scaled_mm (min {worst['rowwise_speedup']:.3f}: {worst['model']} tp{worst['tp']} "
                f"{worst['layer']} M={worst['m']}), per-tensor {geomean([r['tensor_speedup'] for r in part]):.3f}x; "
                f"torch rowwise at {geomean([r['torch_rowwise_of_limit'] for r in part]):.2f} of the limit")
        if all("bucket_vs_best" in r for r in part):
            line += (f"; choice {geomean([r['choice_vs_best'] for r in part]):.3f} of the best variant (min "
                     f"{min(r['choice_vs_best'] for r in part):.3f}), bucket rule "
                     f"{geomean([r['bucket_vs_best'] for r in part]):.3f}")
        lines.append(line)
    lines.append(f"all: rowwise {geomean([r['rowwise_speedup'] for r in rows]):.3f}x, min "
                 f"{min(r['rowwise_speedup'] for r in rows):.3f}")
    big = [r for r in rows if r["weight_mb"] >= 100 and r["m"] <= 64]
    if big:
        lines.append(f"M <= 64, weights >= 100 MB ({len(big)}): wavetune "
                     f"{statistics.median(r['wavetune_rowwise_tbps'] for r in big):.2f} TB/s median (min "
                     f"{min(r['wavetune_rowwise_tbps'] for r in big):.2f}), torch._scaled_mm "
                     f"{statistics.median(r['torch_rowwise_tbps'] for r in big):.2f}")
    return "\n".join(lines)


def main() -> None:
    args = parse_args()
    if args.replay:
        replay_table(args.fit_table, args.replay) if args.fit_table else replay(args.replay)
        return
    torch.manual_seed(args.seed)
    props = torch.cuda.get_device_properties(0)
    todo = problems(args.split, args.max_m, args.seed)
    todo = [problem for problem in todo if problem["m"] >= args.min_m]
    if args.limit:
        todo = sorted(random.Random(args.seed).sample(todo, min(args.limit, len(todo))), key=todo.index)
    args.out.mkdir(parents=True, exist_ok=True)
    block = args.scales == "block"
    path = args.out / f"scaled_gemm_{args.split}{'_block' if block else ''}.jsonl"
    rows = []
    started = time.monotonic()
    with path.open("w") as f:
        f.write(json.dumps({"device": props.name, "torch": torch.__version__, "wavetune": wavetune.__version__,
                            "pdl": wavetune._C.programmatic_launch(), "split": args.split, "scales": args.scales,
                            "reps": args.reps, "sm_count": props.multi_processor_count,
                            "decode_variants": device_decode_facts()}) + "\n")
        for i, problem in enumerate(todo):
            if time.monotonic() - started > args.time_budget_s:
                print(f"time budget spent: {len(todo) - i} problems left out")
                break
            row = measure(problem, args.reps, props.L2_cache_size, block, args.deepgemm)
            rows.append(row)
            f.write(json.dumps(row) + "\n")
            f.flush()
            if block:
                print(f"[{i + 1}/{len(todo)}] {row['model']} tp{row['tp']} {row['layer']} M={row['m']} N={row['n']} "
                      f"K={row['k']}: " + ", ".join(f"{name} {row['us'][name]:.1f} us" for name in
                                                    ("wavetune", "dequant", "transformers", "deepgemm")
                                                    if name in row["us"]),
                      flush=True)
                continue
            print(f"[{i + 1}/{len(todo)}] {row['model']} tp{row['tp']} {row['layer']} M={row['m']} N={row['n']} "
                  f"K={row['k']}: torch {row['us']['torch_rowwise']:.1f} us ({row['torch_rowwise_tbps']:.2f} TB/s), "
                  f"wavetune {row['us']['wavetune_rowwise']:.1f} ({row['rowwise_speedup']:.2f}x"
                  + (f", {row['chosen']}; best {row['best']} {row['best_us']:.1f}" if "best" in row else "")
                  + f"), per-tensor {row['tensor_speedup']:.2f}x, bf16 {row['us']['bf16']:.1f}", flush=True)
    print(block_summary(rows) if block else summary(rows))


if __name__ == "__main__":
    main()

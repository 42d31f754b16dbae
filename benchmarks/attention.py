"""wavetune.attention against PyTorch SDPA's backends, FlashAttention's split rule on the same kernels, and
the exhaustive best of its own configs (docs/attention.md).

    python benchmarks/attention.py --out $OUT --time-budget-s 240

bf16, layout [batch, seq, heads, head_dim]. `--suite named`: the issue's Llama-3-8B (32 query / 8 KV heads)
and Llama-3-70B (64 / 8) attention, whole and split by tensor parallelism 2-8, head dim 128; prefill
(causal, query length = KV length, 128-16384 tokens, batch 1-16) and decode (one query token, KV length
512-131072, batch 1-256). `--suite heldout`: the same phases for other models' head counts and head dims
(wavetune.families.gemm.cases' dense families), at random lengths and batches, odd ones included. Methods:
  choice       wavetune.attention with no config, as callers make it (its own output): cuDNN's attention,
               the paged decode kernel over the dense cache or an FMHA variant and KV split count, as the
               GPU's attention table (else the built-in choice) picks them
  fmha         decode: the FMHA variant and split count the table or built-in model chooses, forced
  paged        decode: wavetune.paged_attention over a copy of K and V in 16-token pages in shuffled order
               (a block table, vLLM's layout) with each sequence's length in a GPU tensor
  builtin      the built-in wave model's choice (attention_heuristic.h), forced
  fa_rule      the family's default kernel for the head dim with FlashAttention's split rule
               (num_splits_heuristic, attention_heuristic.h) instead of wavetune's
  <variant>/<splits>  every bf16 config of the head dim (wavetune.families.attention.measure): each FMHA
               variant at each split count that applies, and the cuDNN and paged candidates: the fastest is
               the exhaustive best
  sdpa_cudnn, sdpa_flash, sdpa_efficient  torch.nn.functional.scaled_dot_product_attention pinned to a
               backend (on [batch, heads, seq, dim] views, enable_gqa); a backend that refuses is left out
Each method is checked against fp32 attention on a slice (the first sequence, the query heads of the first
KV head, the last 256 queries; outputs poisoned with NaN first), then timed as
CUDA graphs replayed round-robin (warm-up, interleaved rounds, medians) over fresh random operand copies
that together exceed twice the L2, so K and V come from DRAM: the measurement `python -m wavetune tune
--family attention` makes of the configs (wavetune.families.attention.measure, on the named suite's cases,
wavetune.families.attention.cases), with this script's comparisons in the same rounds. Writes
<out>/attention_<suite>.jsonl (a header, then one record per case) and <out>/attention_<suite>.md.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
import warnings
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from case_log import measure_cases
import wavetune
from wavetune import _C
from wavetune.families.attention import api as fmha
from wavetune.families.attention import tuning
from wavetune.families.attention.cases import SPLITS, TP, measurable, named_cases
from wavetune.families.attention.measure import measure_case
from wavetune.families.gemm.cases import DENSE_FAMILIES
from wavetune.families.attention.paged_replay import paged_problem
from wavetune.runtime import tables
from wavetune.tuning.report import geomean

REPO = Path(__file__).resolve().parents[1]
warnings.filterwarnings("ignore", message="For dense input")  # SDPA explaining why a backend refuses GQA
SDPA_BACKENDS = {"sdpa_cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa_flash": SDPBackend.FLASH_ATTENTION,
                 "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--suite", choices=("named", "heldout"), default="named")
    p.add_argument("--count", type=int, default=60, help="cases of the heldout suite")
    p.add_argument("--phases", default="decode,prefill")
    p.add_argument("--reps", type=int, default=5, help="interleaved rounds; the median is kept")
    p.add_argument("--time-budget-s", type=float, default=240, help="start no case after this many seconds")
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or REPO / "benchmarks" / "results"))
    return p.parse_args()


def heldout_cases(phases: list[str], count: int, seed: int) -> list[dict]:
    """Other families' attention at random (odd) lengths: prefill up to 32k tokens, decode up to 128k keys."""
    rng = random.Random(seed)
    families = sorted(DENSE_FAMILIES.items())
    out = []
    for i in range(count):
        name, (_, _, hq, hkv, head_dim, _) = families[i % len(families)]
        tp = rng.choice([t for t in TP if hkv % t == 0])
        phase = phases[i % len(phases)]
        if phase == "prefill":
            tokens = int(math.exp(rng.uniform(math.log(100), math.log(16384))))
            batch = max(1, min(16, int(32768 / tokens * rng.uniform(0.1, 1))))
            seqlen_q = tokens
        else:
            tokens = int(math.exp(rng.uniform(math.log(300), math.log(131072))))
            batch = max(1, int(math.exp(rng.uniform(0, math.log(256)))))
            seqlen_q = 1
        out.append(dict(phase=phase, model=f"{name}/tp{tp}", batch=batch, seqlen_q=seqlen_q, seqlen_k=tokens,
                        heads_q=hq // tp, heads_kv=hkv // tp, head_dim=head_dim))
    return out


def sdpa(backend, causal: bool):
    def launch(q, k, v, out):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(  # SDPA's is_causal is top-left: q len == k len
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal,
                enable_gqa=q.shape[2] != k.shape[2]).transpose(1, 2)
    return launch


def fa_rule_splits(c: dict, variant) -> int:
    """FlashAttention's split count for the kernel `variant` (its tile) on the case."""
    sizes = tuning.attention_sizes(c)
    if c["seqlen_q"] != 1:
        return 1
    ctas, _, _, _ = _C.attention_mapping(sizes, False, variant.tile, 1)
    kv_tiles = math.ceil(c["seqlen_k"] / variant.tile[1])
    limit = max(1, min(max(SPLITS), c["seqlen_k"] // variant.tile[1]))  # wavetune's kernels take up to 128
    return _C.flash_attention_splits(ctas, kv_tiles, wavetune.device_properties()["sm_count"], limit)


def choices(c: dict, operands: tuple) -> dict[str, tuple[int, int]]:
    """(variant id, splits) on the case of wavetune.attention's choice as a call without out= makes it
    (``routed``: the cuDNN and paged candidates among the FMHA variants), of its choice among the FMHA
    variants alone, and of the built-in FMHA model's."""
    args = (tuning.attention_sizes(c), *map(fmha.tensor_args, operands), 1 / math.sqrt(c["head_dim"]),
            c["phase"] == "prefill", _C.DTYPES.index("bf16"))
    device = torch.cuda.current_device()
    return {"routed": _C.attention_chosen_launch(*args, device, (True, True, False)),
            "choice": _C.attention_chosen_launch(*args, device), "builtin": _C.attention_default_launch(*args)}


PAGE_SIZE = 16


def paged_launch():
    """wavetune.paged_attention over each operand set's K and V copied into shuffled pages (made once per set)."""
    made = {}

    def launch(q, k, v, out):
        if k.data_ptr() not in made:
            batch, seqlen, heads, dim = k.shape
            per_seq = -(-seqlen // PAGE_SIZE)
            table = torch.randperm(batch * per_seq, device="cuda").view(batch, per_seq).int()
            caches = []
            for t in (k, v):
                padded = torch.zeros(batch, per_seq * PAGE_SIZE, heads, dim, device="cuda", dtype=t.dtype)
                padded[:, :seqlen] = t
                pool = torch.empty(batch * per_seq, PAGE_SIZE, heads, dim, device="cuda", dtype=t.dtype)
                pool[table.flatten().long()] = padded.view(-1, PAGE_SIZE, heads, dim)
                caches.append(pool)
            made[k.data_ptr()] = (*caches, table, torch.full((batch,), seqlen, dtype=torch.int32, device="cuda"))
        k_cache, v_cache, table, lens = made[k.data_ptr()]
        wavetune.paged_attention(q[:, 0], k_cache, v_cache, table, lens, max_seq_len=k.shape[1], out=out[:, 0])
        return out
    return launch


def comparisons(c: dict, operands: tuple, variants: dict) -> dict:
    """Every method timed on the case, in order: wavetune's choice, the built-in model's, FlashAttention's
    split rule, then the configs (``variants``: the exhaustive best's candidates), then SDPA's backends."""
    causal = c["phase"] == "prefill"
    own = [v for v in wavetune.attention_configs() if v.dtype == "bf16" and v.tile[2] == c["head_dim"]]
    default = next(v for v in own if v.schedule == "cooperative" and v.scheduler == "data_parallel"
                   and v.tile[1] == max(x.tile[1] for x in own))
    # The choice returns its own output, as callers that pass no out= get it (cuDNN's path would copy into one).
    methods = {"choice": lambda q, k, v, out: wavetune.attention(q, k, v, causal=causal)}
    builtin, builtin_splits = choices(c, operands)["builtin"]
    methods["builtin"] = lambda q, k, v, out: wavetune.attention(q, k, v, causal=causal, out=out, config=builtin,
                                                                 splits=builtin_splits)
    if not causal:
        fmha, fmha_splits = choices(c, operands)["choice"]
        methods["fmha"] = lambda q, k, v, out: wavetune.attention(q, k, v, out=out, config=fmha, splits=fmha_splits)
        methods["paged"] = paged_launch()
    fa = fa_rule_splits(c, default)
    methods["fa_rule"] = lambda q, k, v, out: wavetune.attention(q, k, v, causal=causal, out=out, config=default.id,
                                                                 splits=fa)
    methods.update(variants)
    for name, backend in SDPA_BACKENDS.items():
        methods[name] = sdpa(backend, causal)
    return methods


def measure(c: dict, args: argparse.Namespace, l2_bytes: int) -> dict:
    operands = {}

    def compose(first: tuple, variants: dict) -> dict:
        operands["first"] = first
        return comparisons(c, first, variants)

    record, times = measure_case(c, l2_bytes, args.reps, compose, may_refuse=lambda name: name.startswith("sdpa"))
    sdpa_times = {name: us for name, us in times.items() if name.startswith("sdpa")}
    names = {key: f"{fmha.attention_by_id()[v].name}/{s}" for key, (v, s) in choices(c, operands["first"]).items()}
    best_sdpa = min(sdpa_times, key=sdpa_times.get) if sdpa_times else None
    if names["routed"].startswith("attn_paged_"):  # the paged kernel's own choice
        variant, splits = _C.paged_attention_chosen_launch(*paged_problem(c), _C.DTYPES.index("bf16"))
        names["routed"] = f"{next(x.name for x in wavetune.paged_attention_configs() if x.id == variant)}/{splits}"
    return {**record, "choice": names["routed"], "builtin": names["builtin"], "choice_us": times["choice"],
            "builtin_us": times["builtin"], "fa_rule_us": times["fa_rule"], "sdpa_best": best_sdpa,
            "sdpa_best_us": sdpa_times.get(best_sdpa), "sdpa_us": sdpa_times,
            **{f"{name}_us": times[name] for name in ("fmha", "paged") if name in times}}


def host_costs() -> dict:
    """Host microseconds (through Python) of wavetune.attention's choice, cold (new shapes) and cached (the
    same shape again), and of whole eager calls of a decode-sized problem, wavetune's and SDPA's."""
    q = torch.randn(8, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(8, 4096, 8, 128, device="cuda", dtype=torch.bfloat16)
    args = [fmha.tensor_args(t) for t in (q, k, k, q)]
    wavetune.attention(q, k, k)  # loads the GPU's attention table, as a first call does
    bf16 = _C.DTYPES.index("bf16")

    def per_call_us(call, count: int) -> float:
        call(0)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(count):
            call(i + 1)
        elapsed = time.perf_counter() - start
        torch.cuda.synchronize()
        return 1e6 * elapsed / count

    device = torch.cuda.current_device()
    choose = lambda sk: _C.attention_chosen_launch((8, 1, sk, 32, 8, 128), *args, 0.088, False, bf16,  # noqa: E731
                                                   device)
    return {"choice_cold_us": per_call_us(lambda i: choose(128 + 64 * i), 300),  # each a new 64-key step
            "choice_cached_us": per_call_us(lambda i: choose(4096), 10000),
            "attention_call_us": per_call_us(lambda i: wavetune.attention(q, k, k), 300),
            "sdpa_call_us": per_call_us(lambda i: sdpa(SDPBackend.CUDNN_ATTENTION, False)(q, k, k, None), 300)}


def summary(rows: list[dict], header: dict) -> str:
    host = header["host"]
    lines = [f"{header['gpu']}, {header['date']}, torch {header['torch']}, {len(rows)} cases, bf16, attention table "
             f"{header['attention_table']}; speed ratios (above 1: wavetune's choice faster). SDPA: the fastest "
             "backend per case. Host time through Python: "
             f"the choice {host['choice_cold_us']:.2f} us cold, {host['choice_cached_us']:.2f} us cached; an eager "
             f"decode call {host['attention_call_us']:.1f} us (SDPA cuDNN {host['sdpa_call_us']:.1f} us).", "",
             "| cases | n | choice vs SDPA: geomean | worst | choice vs FA split rule | worst | choice / own best "
             "| worst | built-in model / own best | worst |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines += group_lines(rows) + paged_summary([r for r in rows if r["phase"] == "decode"])
    return "\n".join(lines)


def paged_summary(rows: list[dict]) -> list[str]:
    """Decode: the paged kernel on the dense cache (choice) and on shuffled pages, against SDPA's best backend
    and against the FMHA path's choice, per batch range."""
    if not rows:
        return []
    lines = ["", "Decode, by batch: the paged attention kernel on the dense cache (`choice`) and on 16-token pages "
             "in shuffled order (`paged`), against SDPA's fastest backend and wavetune's FMHA decode (`fmha`).", "",
             "| batch | n | choice vs SDPA | worst | paged vs SDPA | worst | choice vs fmha | worst |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for low, high in ((1, 1), (2, 16), (17, 64), (65, 256)):
        rs = [r for r in rows if low <= r["batch"] <= high and r["sdpa_best_us"]]
        if not rs:
            continue
        cells = []
        for num, den in (("sdpa_best_us", "choice_us"), ("sdpa_best_us", "paged_us"), ("fmha_us", "choice_us")):
            ratios = [r[num] / r[den] for r in rs]
            cells.append(f"{geomean(ratios):.3f}x | {min(ratios):.2f}x")
        lines.append(f"| {low}-{high} | {len(rs)} | " + " | ".join(cells) + " |")
    return lines


def group_lines(rows: list[dict]) -> list[str]:
    """One table row per group of cases: all, each phase, each model."""
    lines = []
    groups = {"all": rows}
    for key in ("phase", "model"):
        for value in dict.fromkeys(r[key] for r in rows):
            groups[f"{key} {value}"] = [r for r in rows if r[key] == value]
    for label, rs in groups.items():
        vs_sdpa = [r["sdpa_best_us"] / r["choice_us"] for r in rs if r["sdpa_best_us"]]
        vs_fa = [r["fa_rule_us"] / r["choice_us"] for r in rs]
        quality = [r["best_us"] / r["choice_us"] for r in rs]
        builtin = [r["best_us"] / r["builtin_us"] for r in rs]
        sdpa_cells = f"{geomean(vs_sdpa):.3f}x | {min(vs_sdpa):.2f}x" if vs_sdpa else "- | -"
        lines.append(f"| {label} | {len(rs)} | {sdpa_cells} | {geomean(vs_fa):.3f}x | {min(vs_fa):.2f}x | "
                     f"{geomean(quality):.3f} | {min(quality):.2f} | {geomean(builtin):.3f} | {min(builtin):.2f} |")
    return lines


def describe(row: dict) -> str:
    return (f"{row['phase']} {row['model']} b{row['batch']} q{row['seqlen_q']} k{row['seqlen_k']}: choice "
            f"{row['choice_us']:.1f} us ({row['choice']}), best {row['best_us']:.1f} ({row['best']}), fa "
            f"{row['fa_rule_us']:.1f}, sdpa {row['sdpa_best_us'] or 0:.1f} ({row['sdpa_best']})")


def main() -> None:
    args = parse_args()
    if not any(c.dtype == "bf16" and not c.from_library for c in wavetune.attention_configs()):
        sys.exit("no bf16 attention variants compiled (WAVETUNE_KERNEL_FILTER='attn_bf16_*' builds them)")
    start = time.monotonic()
    props = wavetune.device_properties()
    phases = args.phases.split(",")
    todo = named_cases(phases) if args.suite == "named" else heldout_cases(phases, args.count, args.seed)
    built = {c.tile[2] for c in wavetune.attention_configs() if c.dtype == "bf16" and not c.from_library}
    todo = measurable(todo, built, args.seed)  # shuffled: a cut budget still spans the phases, models and sizes
    table = tables.default_table_path(props["name"], "attention")
    header = {"gpu": props["name"], "torch": torch.__version__, "build": wavetune.build_info(),
              "attention_table": str(table) if table else None,
              "sm_count": props["sm_count"], "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "args": {k: str(v) for k, v in vars(args).items()}, "host": host_costs()}
    def measured(case: dict) -> dict:
        row = measure(case, args, props["l2_bytes"])
        torch.cuda.empty_cache()
        return row

    rows = measure_cases(todo, measured, args.out / f"attention_{args.suite}.jsonl", header, args.time_budget_s,
                         describe, start)
    table = summary(rows, header)
    (args.out / f"attention_{args.suite}.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()

"""Several query tokens per sequence (docs/attention.md, "Paged and variable-length attention"): packed prompts
of different lengths, chunks of a prompt after a paged prefix, and speculative decode steps, against what
PyTorch offers for each, on held-out models' heads.

    python benchmarks/varlen_attention.py --count 30 --out $OUT

Cases (held-out dense models of wavetune.families.gemm.cases at TP 1-8, random odd lengths):
  varlen  a batch of 1-16 prompts of 16-4,096 tokens each, packed (causal prefill)
  chunk   1-16 sequences, each a chunk of 16-1,024 new tokens after a prefix of 256-16,384 cached keys, packed
          (FlashAttention's variable-length layout) or in pages of 16 or 256 tokens in random order (causal,
          bottom-right)
  spec    1-64 sequences, each 2-8 new tokens (a speculative decode step) after 512-32,768 cached keys, packed
          or in pages
  decode  (--kinds ...,decode) 1-256 sequences, one new token each after 512-32,768 cached keys
Methods (each checked against fp32 attention on the first and last sequences, output poisoned first, then
timed as CUDA graphs replayed round-robin, medians; operand copies larger than twice the L2):
  choice        wavetune.varlen_attention (packed keys; prompts may run FlashAttention-2) or
                paged_attention (pages), called as users do, without out=
  own           packed keys: wavetune's kernels at the wave model's kernel and split count
  <kernel>/s<N> forced to each kernel of the head dim at N splits (the fastest is "best")
  fa2           PyTorch's variable-length attention (aten._flash_attention_forward, FlashAttention-2, what
                torch.nn.attention.varlen calls); on pages of 256 it reads the block table itself where the
                torch has that argument (2.13 has, 2.11 not); otherwise the pages are gathered into packed
                keys first, inside its time
  sdpa_loop     varlen only: SDPA, its own choice of backend, called once per prompt
  flashinfer_*  with --flashinfer: FlashInfer's batch prefill wrapper on pages or packed keys, on its fa2 and
                fa3 backends (fa2 on pages with one token per sequence: its decode wrapper with tensor
                cores), planned once per case outside the timing, as engines plan once per step;
                "flashinfer" in the record and the table is the faster of the two that ran correctly
Writes <out>/varlen.jsonl (a header, then one record per case; `benchmarks/paged_attention.py --fit` fits
the wave model's tile-math rates to it) and <out>/varlen.md.
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

from wavetune.families.gemm.cases import DENSE_FAMILIES
from wavetune.tuning.report import geomean

REPO = Path(__file__).resolve().parents[1]
SPLITS = (1, 2, 4, 8, 16, 32)
GRAPH_US = 300


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--count", type=int, default=30)
    p.add_argument("--kinds", default="varlen,chunk,spec")
    p.add_argument("--head-dims", default="64,128,256", help="the cases' head dims kept")
    p.add_argument("--flashinfer", action="store_true",
                   help="add FlashInfer's batch wrappers (its package importable; kernels compiled on first use)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--time-budget-s", type=float, default=240)
    p.add_argument("--seed", type=int, default=23)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or REPO / "benchmarks" / "results"))
    return p.parse_args()


def log_uniform(rng: random.Random, low: int, high: int) -> int:
    return int(math.exp(rng.uniform(math.log(low), math.log(high))))


def cases(kinds: list[str], count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    families = sorted(DENSE_FAMILIES.items())
    out = []
    for i in range(count):
        name, (_, _, hq, hkv, head_dim, _) = families[rng.randrange(len(families))]
        tp = rng.choice([t for t in (1, 2, 4, 8) if hkv % t == 0])
        kind = kinds[i % len(kinds)]
        if kind == "varlen":
            batch = log_uniform(rng, 1, 16)
            new = [log_uniform(rng, 16, 4096) | 1 for _ in range(batch)]
            prefix, page = [0] * batch, 0
        elif kind == "chunk":
            batch = log_uniform(rng, 1, 16)
            new = [log_uniform(rng, 16, 1024) for _ in range(batch)]
            prefix, page = [log_uniform(rng, 256, 16384) for _ in range(batch)], rng.choice((0, 16, 256))
        elif kind == "decode":
            batch = log_uniform(rng, 1, 256)
            new = [1] * batch
            prefix, page = [log_uniform(rng, 512, 32768) for _ in range(batch)], rng.choice((0, 16, 256))
        else:
            batch = log_uniform(rng, 1, 64)
            new = [rng.randint(2, 8) for _ in range(batch)]
            prefix, page = [log_uniform(rng, 512, 32768) for _ in range(batch)], rng.choice((0, 16, 256))
        out.append(dict(kind=kind, model=f"{name}/tp{tp}", heads_q=hq // tp, heads_kv=hkv // tp, head_dim=head_dim,
                        new=new, prefix=prefix, page_size=page))
    return out


def starts(lengths):
    import torch

    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device="cuda")


def operands(case: dict, l2_bytes: int) -> tuple[dict, list[tuple]]:
    """The case's index tensors (shared by every copy) and copies of (q, k, v, out): packed keys for varlen,
    page pools for the others."""
    import torch

    opts = dict(device="cuda", dtype=torch.bfloat16)
    new, totals = case["new"], [p + n for p, n in zip(case["prefix"], case["new"])]
    hq, hkv, d = case["heads_q"], case["heads_kv"], case["head_dim"]
    index = {"cu_q": starts(new), "cu_k": starts(totals), "lens": torch.tensor(totals, dtype=torch.int32, device="cuda"),
             "max_q": max(new), "max_k": max(totals)}
    if case["page_size"]:
        page = case["page_size"]
        per_seq = max(-(-t // page) for t in totals)
        pool = len(totals) * per_seq
        index["table"] = torch.randperm(pool, device="cuda").view(len(totals), per_seq).int()
        kv_shape = (pool, page, hkv, d)
    else:
        kv_shape = (sum(totals), hkv, d)
    touched = 4 * math.prod(kv_shape) + 4 * sum(new) * hq * d
    copies = min(8, max(1, math.ceil(2 * l2_bytes / touched)))
    sets = [(torch.randn(sum(new), hq, d, **opts), torch.randn(kv_shape, **opts), torch.randn(kv_shape, **opts),
             torch.empty(sum(new), hq, d, **opts)) for _ in range(copies)]
    return index, sets


def keys_of(case: dict, index: dict, k, b: int):
    """Sequence b's keys [m, hkv, d] (through the table on a page pool)."""
    total = case["prefix"][b] + case["new"][b]
    if not case["page_size"]:
        start = int(index["cu_k"][b])
        return k[start:start + total]
    return k[index["table"][b].long()].flatten(0, 1)[:total]


def check(case: dict, index: dict, methods: dict, first: tuple) -> dict:
    """Relative error of each method on the first and last sequences against fp32 attention; methods that
    raise (a baseline refusing the case) are dropped."""
    import torch

    q, k, v, out = first
    errors = {}
    seqs = sorted({0, len(case["new"]) - 1})
    for name, launch in list(methods.items()):
        out.fill_(float("nan"))
        try:
            got = launch(q, k, v, out)
        except (RuntimeError, TypeError, ValueError) as exc:
            if name == "choice" or "/s" in name:
                raise
            print(f"  {name} refuses: {str(exc).splitlines()[0][:120]}", file=sys.stderr)
            del methods[name]
            continue
        worst = 0.0
        for b in seqs:
            n, m = case["new"][b], case["prefix"][b] + case["new"][b]
            row = int(index["cu_q"][b])
            group = case["heads_q"] // case["heads_kv"]
            keys = keys_of(case, index, k, b).float().repeat_interleave(group, 1)
            values = keys_of(case, index, v, b).float().repeat_interleave(group, 1)
            scores = torch.einsum("nhd,mhd->hnm", q[row:row + n].float(), keys) / math.sqrt(case["head_dim"])
            visible = torch.arange(m, device="cuda")[None] <= (m - n + torch.arange(n, device="cuda"))[:, None]
            want = torch.einsum("hnm,mhd->nhd", scores.masked_fill(~visible, float("-inf")).softmax(-1), values)
            error = ((got[row:row + n].float() - want).norm() / want.norm()).item()
            worst = max(worst, error if error == error else math.inf)
        if worst > 2e-2 and (name == "choice" or name == "own" or "/s" in name):
            raise AssertionError(f"{name} is wrong on {case}: relative error {worst:.3g}")
        if worst > 2e-2:  # a baseline's wrong output leaves it out of the comparison, said
            print(f"  {name} is wrong here (relative error {worst:.3g}): left out", file=sys.stderr)
            del methods[name]
            continue
        errors[name] = worst
    return errors


def flashinfer_launch(case: dict, index: dict, backend: str):
    """FlashInfer's wrapper for the case on one of its backends ("fa2", or "fa3": its Hopper kernels), planned
    now (host-side lengths, as its API takes them)."""
    import flashinfer
    import torch

    new, totals = case["new"], [p + n for p, n in zip(case["prefix"], case["new"])]
    hq, hkv, d = case["heads_q"], case["heads_kv"], case["head_dim"]
    workspace = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    qo = index["cu_q"].cpu()
    if not case["page_size"]:
        wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace, "NHD", backend=backend)
        wrapper.plan(qo, index["cu_k"].cpu(), hq, hkv, d, causal=True, q_data_type=torch.bfloat16)
        return lambda q, k, v, out: wrapper.run(q, k, v, out=out)
    page = case["page_size"]
    pages = [-(-t // page) for t in totals]
    indptr = torch.tensor([0, *itertools.accumulate(pages)], dtype=torch.int32)
    table = index["table"].cpu()
    indices = torch.cat([table[b, :n] for b, n in enumerate(pages)]).int()
    last = torch.tensor([t - (n - 1) * page for t, n in zip(totals, pages)], dtype=torch.int32)
    if max(new) == 1 and backend == "fa2":  # its decode wrapper (tensor cores) for one token per sequence
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=True)
        wrapper.plan(indptr, indices, last, hq, hkv, d, page, q_data_type=torch.bfloat16)
    else:
        wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", backend=backend)
        wrapper.plan(qo, indptr, indices, last, hq, hkv, d, page, causal=True, q_data_type=torch.bfloat16)
    return lambda q, k, v, out: wrapper.run(q, (k, v), out=out)


def methods_for(case: dict, index: dict, kernels: list, flashinfer: bool) -> dict:
    import torch

    import wavetune

    cu_q, cu_k, lens, max_q, max_k = (index[n] for n in ("cu_q", "cu_k", "lens", "max_q", "max_k"))
    table = index.get("table")
    total_keys = sum(p + n for p, n in zip(case["prefix"], case["new"]))  # what an engine knows on the host

    def ours(config=None, splits=None, into_out=True):
        """``into_out=False``: the call as users make it, without out= (a routed call would copy into it)."""
        if table is None:
            return lambda q, k, v, out: wavetune.varlen_attention(
                q, k, v, cu_q, cu_k, max_q, max_k, causal=True, out=out if into_out else None, config=config,
                splits=splits)
        return lambda q, k, v, out: wavetune.paged_attention(
            q, k, v, table, lens, max_seq_len=max_k, cu_seqlens_q=cu_q, max_seqlen_q=max_q, total_keys=total_keys,
            out=out if into_out else None, config=config, splits=splits)

    methods = {"choice": ours(into_out=False)}
    if table is None:  # the call may route to FlashAttention-2: time these kernels' own choice too
        from wavetune.families.attention.paged import varlen_kernel_choice

        def own(q, k, v, out):
            variant, splits = varlen_kernel_choice(q, k, v, cu_q, cu_k, max_q, max_k, causal=True)
            return ours(variant, splits)(q, k, v, out)
        methods["own"] = own
    for kernel in kernels:
        methods.update({f"{kernel.name}/s{n}": ours(kernel.id, n) for n in SPLITS})

    reads_pages = "block_table" in str(torch.ops.aten._flash_attention_forward.default._schema)

    def fa2(q, k, v, out):
        extra = {}
        if table is not None and case["page_size"] % 256 == 0 and reads_pages:
            extra = dict(seqused_k=lens, block_table=table)
        elif table is not None:  # pages it refuses (or a torch without paged FlashAttention): packed keys first
            rows = [keys_of(case, index, t, b) for t in (k, v) for b in range(len(case["new"]))]
            half = len(rows) // 2
            k, v = torch.cat(rows[:half]), torch.cat(rows[half:])
        return torch.ops.aten._flash_attention_forward(q, k, v, cu_q, cu_k, max_q, max_k, 0.0, True, False,
                                                       **extra)[0]
    methods["fa2"] = fa2
    for backend in ("fa2", "fa3") if flashinfer else ():
        try:
            methods[f"flashinfer_{backend}"] = flashinfer_launch(case, index, backend)
        except Exception as exc:  # noqa: BLE001 - its plan compiles kernels: any failure drops the method
            print(f"  flashinfer_{backend} refuses: {str(exc).splitlines()[0][:200] if str(exc) else exc!r}",
                  file=sys.stderr)
    if case["kind"] == "varlen":
        bounds = [int(x) for x in cu_q.tolist()]

        def sdpa_loop(q, k, v, out):
            for b in range(len(bounds) - 1):
                s = slice(bounds[b], bounds[b + 1])
                # [1, heads, tokens, dim] views: SDPA's fused backends take 4-d inputs only
                out[s] = torch.nn.functional.scaled_dot_product_attention(
                    *(t[s].transpose(0, 1).unsqueeze(0) for t in (q, k, v)), is_causal=True,
                    enable_gqa=case["heads_q"] != case["heads_kv"])[0].transpose(0, 1)
            return out
        methods["sdpa_loop"] = sdpa_loop
    return methods


def measure(case: dict, args, props: dict) -> dict:
    import torch

    import wavetune
    from wavetune.tuning.timing import interleaved_us
    from wavetune.families.attention.paged_replay import kernel_facts

    kernels = [c for c in wavetune.paged_attention_configs() if c.dtype == "bf16" and c.tile[2] == case["head_dim"]]
    index, sets = operands(case, props["l2_bytes"])
    methods = methods_for(case, index, kernels, args.flashinfer)
    errors = check(case, index, methods, sets[0])
    flops = sum(4 * n * (p + (n + 1) / 2) for n, p in zip(case["new"], case["prefix"])) * case["heads_q"] * case["head_dim"]
    estimate_us = max(5.0, flops / 2e8)
    per_graph = len(sets) * math.ceil(min(16, max(1, GRAPH_US / estimate_us)) / len(sets))
    times = interleaved_us(methods, sets, per_graph, args.reps)
    sweep = {name: us for name, us in times.items() if "/s" in name}
    best = min(sweep, key=sweep.get)
    torch.cuda.empty_cache()
    # What benchmarks/paged_attention.py --fit replays: the sizes the wave model reads, the kernels' facts.
    model_view = dict(batch=len(case["new"]), seqlen_q=index["max_q"], seqlen_k=index["max_k"], causal=True,
                      total_keys=sum(p + n for p, n in zip(case["prefix"], case["new"])),
                      kernels={c.name: kernel_facts(c) for c in kernels})
    flash = [us for name, us in times.items() if name.startswith("flashinfer_")]
    if flash:
        times["flashinfer"] = min(flash)  # its faster backend
    return {**case, **model_view, "times": times, "best": best, "best_us": sweep[best],
            "tflops_choice": flops / times["choice"] / 1e6, "max_error": max(errors.values()), "copies": len(sets)}


def model_us(row: dict) -> float:
    """wavetune's kernels at the wave model's choice: `own` where the call could route elsewhere."""
    return row["times"].get("own", row["times"]["choice"])


def summary(rows: list[dict], header: dict) -> str:
    lines = [f"{header['gpu']}, {header['date']}, torch {header['torch']}, {len(rows)} cases, bf16; ratios above 1: "
             "wavetune faster. choice: the call as made (packed prompts may run FlashAttention-2); own: "
             "wavetune's kernels at the wave model's choice; fa2: PyTorch's variable-length FlashAttention-2 "
             "(pages gathered first where it cannot read them); sdpa_loop: SDPA once per prompt; flashinfer: its "
             "batch wrappers; best: the fastest kernel and split count swept.", "",
             "| kind | n | choice vs fa2 | worst | own vs fa2 | worst | choice vs sdpa_loop | worst | choice vs "
             "flashinfer | worst | own / best | worst | TFLOP/s (choice) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for kind in ("varlen", "chunk", "spec", "decode", "all"):
        rs = [r for r in rows if kind in (r["kind"], "all")]
        if not rs:
            continue
        cells = []
        for num, den in (("fa2", "choice"), ("fa2", "own"), ("sdpa_loop", "choice"), ("flashinfer", "choice"),
                         ("best", "own")):
            ratios = [(r["best_us"] if num == "best" else r["times"][num]) /
                      (model_us(r) if den == "own" else r["times"][den])
                      for r in rs if num == "best" or num in r["times"]]
            cells.append(f"{geomean(ratios):.3f}x | {min(ratios):.2f}x" if ratios else "- | -")
        lines.append(f"| {kind} | {len(rs)} | " + " | ".join(cells) +
                     f" | {geomean(r['tflops_choice'] for r in rs):.0f} |")
    return "\n".join(lines)


def describe(row: dict) -> str:
    t = row["times"]
    return (f"{row['kind']} {row['model']} b{len(row['new'])} q{sum(row['new'])} k{sum(row['prefix'])} "
            f"p{row['page_size']} d{row['head_dim']}: choice {t['choice']:.1f} us, own {model_us(row):.1f}, "
            f"best {row['best_us']:.1f} ({row['best']}), flashinfer {t.get('flashinfer', 0):.1f}, "
            f"fa2 {t.get('fa2', 0):.1f}, sdpa_loop {t.get('sdpa_loop', 0):.1f}")


def main() -> None:
    args = parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    import torch

    import wavetune
    from case_log import measure_cases

    props = wavetune.device_properties()
    head_dims = {c.tile[2] for c in wavetune.paged_attention_configs()}
    head_dims &= {int(d) for d in args.head_dims.split(",")}
    todo = [c for c in cases(args.kinds.split(","), args.count, args.seed) if c["head_dim"] in head_dims]
    header = {"gpu": props["name"], "torch": torch.__version__, "build": wavetune.build_info(),
              "sm_count": props["sm_count"], "memory_bytes_per_s": props["memory_bytes_per_s"],
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "args": {k: str(v) for k, v in vars(args).items()}}
    rows = measure_cases(todo, lambda case: measure(case, args, props), args.out / "varlen.jsonl", header,
                         args.time_budget_s, describe)
    table = summary(rows, header)
    (args.out / "varlen.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()

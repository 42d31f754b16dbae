"""Timing every attention config (a compiled bf16 variant of the case's head dim and a KV split count) on a
case (``cases``), as tuning measures the named suite and benchmarks/attention.py compares against SDPA:
each launch checked against fp32 attention on a slice (the first sequence, the query heads of the first
KV head, the last 256 queries; outputs poisoned with NaN first), then timed as CUDA graphs replayed
round-robin (``wavetune.tuning.timing.interleaved_us``: warm-up, interleaved rounds, medians) over fresh
random operand copies that together exceed twice the L2, so K and V come from DRAM. Importing this module
imports torch.
"""

from __future__ import annotations

import math
import sys
from typing import Callable

import torch

from ...tuning.timing import interleaved_us
from .api import attention, attention_configs
from .cases import SPLITS, kv_bytes

MAX_ERROR = 2e-2
GRAPH_US = 300  # launches per graph: at least this long, so event timing is noise-free
REPS = 5  # interleaved rounds; the median is kept (what the shipped tables' measurements used)


def operand_sets(c: dict, l2_bytes: int) -> list[tuple]:
    """(q, k, v, out) copies that together exceed twice the L2."""
    opts = dict(device="cuda", dtype=torch.bfloat16)
    q_shape = (c["batch"], c["seqlen_q"], c["heads_q"], c["head_dim"])
    kv_shape = (c["batch"], c["seqlen_k"], c["heads_kv"], c["head_dim"])
    touched = kv_bytes(c) + 4 * math.prod(q_shape)
    copies = min(8, max(1, math.ceil(2 * l2_bytes / touched)))
    return [(torch.randn(q_shape, **opts), torch.randn(kv_shape, **opts), torch.randn(kv_shape, **opts),
             torch.empty(q_shape, **opts)) for _ in range(copies)]


def variant_launches(c: dict) -> dict[str, Callable]:
    """``<variant>/<splits>``: wavetune.attention forced to every bf16 config of the case's head dim: each FMHA
    variant at each split count that applies (decode only; at least a KV tile per split), cuDNN's attention
    (as a call without ``out`` runs it: its own output) and, on decode, the paged kernel (its own split
    count): the fastest is the exhaustive best, and what an attention table is fitted to."""
    causal = c["phase"] == "prefill"
    variants = [v for v in attention_configs() if v.dtype == "bf16" and v.tile[2] == c["head_dim"]]
    methods = {}
    for variant in variants:
        if variant.schedule == "cudnn":
            methods[f"{variant.name}/1"] = lambda q, k, v, out, i=variant.id: attention(q, k, v, causal=causal,
                                                                                        config=i)
        elif variant.schedule == "paged":
            if c["seqlen_q"] == 1:
                methods[f"{variant.name}/1"] = lambda q, k, v, out, i=variant.id: attention(q, k, v, out=out, config=i)
        else:
            for splits in SPLITS if c["seqlen_q"] == 1 else (1,):
                if splits == 1 or c["seqlen_k"] // splits >= variant.tile[1]:
                    methods[f"{variant.name}/{splits}"] = (
                        lambda q, k, v, out, i=variant.id, s=splits: attention(q, k, v, causal=causal, out=out,
                                                                              config=i, splits=s))
    return methods


def reference(q, k, v, causal: bool):
    """fp32 attention of the first sequence's first KV head and its query heads, last 256 queries (the
    bottom-right mask keeps their positions): small enough for any case."""
    group = q.shape[2] // k.shape[2]
    qs, ks, vs = q[:1, -256:, :group].float(), k[:1, :, :1].float(), v[:1, :, :1].float()
    scores = torch.einsum("bqhd,bkd->bhqk", qs, ks[:, :, 0]) / math.sqrt(q.shape[3])
    if causal:
        sq, sk = qs.shape[1], ks.shape[1]
        mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(diagonal=sk - sq)
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.einsum("bhqk,bkd->bqhd", scores.softmax(-1), vs[:, :, 0])


def check(methods: dict, operands: tuple, causal: bool, may_refuse: Callable[[str], bool] = lambda name: False
          ) -> dict:
    """Each method's relative error against ``reference``; methods that ``may_refuse`` and raise on the case
    (cuDNN's candidate, a benchmark's SDPA backends) are dropped from ``methods``."""
    q, k, v, out = operands
    ref = reference(q, k, v, causal)
    group = q.shape[2] // k.shape[2]
    errors = {}
    for name, launch in list(methods.items()):
        out.fill_(float("nan"))
        try:
            got = launch(*operands)
        except (RuntimeError, ValueError) as exc:
            if not may_refuse(name):
                raise
            print(f"  {name} refused: {str(exc).splitlines()[0][:120]}", file=sys.stderr)
            del methods[name]
            continue
        if got.isnan().any():
            raise RuntimeError(f"{name}: left part of the output unwritten")
        mine = got[:1, -256:, :group].float()
        error = ((mine - ref).norm() / ref.norm()).item()
        if not error <= MAX_ERROR:
            raise RuntimeError(f"{name}: relative error {error} against fp32 attention")
        errors[name] = error
    return errors


def measure_case(c: dict, l2_bytes: int, reps: int = REPS,
                 compose: Callable[[tuple, dict], dict] | None = None,
                 may_refuse: Callable[[str], bool] = lambda name: False) -> tuple[dict, dict[str, float]]:
    """(the case's record, every method's median us): every config of the case timed in interleaved rounds.
    ``compose(operands, variant methods)``: all the methods to time, in order (a benchmark adds its
    comparisons); default: the variants alone. The record is what an attention table is fitted to: the
    case, ``variants_us`` ({"<variant>/<splits>": us}) and the best config."""
    sets = operand_sets(c, l2_bytes)
    variants = variant_launches(c)
    methods = compose(sets[0], variants) if compose else dict(variants)
    refusable = lambda name: name.startswith("attn_cudnn_") or may_refuse(name)  # noqa: E731
    errors = check(methods, sets[0], c["phase"] == "prefill", refusable)
    flops = 4 * c["batch"] * c["seqlen_q"] * c["seqlen_k"] * c["heads_q"] * c["head_dim"]
    estimate_us = max(3.0, flops / 4e8 / (2 if c["phase"] == "prefill" else 1), kv_bytes(c) / 2.5e6)
    per_graph = len(sets) * math.ceil(min(32, max(1, GRAPH_US / estimate_us)) / len(sets))
    times = interleaved_us(methods, sets, per_graph, reps)
    own = {name: us for name, us in times.items() if name in variants}
    best = min(own, key=own.get)
    record = {**c, "copies": len(sets), "best": best, "best_us": own[best], "variants_us": own,
              "max_error": max(errors.values())}
    return record, times

"""The paged attention kernels' built-in choice replayed offline: the kernel and KV split count their wave model
(csrc/families/attention/paged_model.h, through its bindings) picks on logged sweeps of benchmarks/paged_attention.py
and benchmarks/varlen_attention.py, which fit its constants to them (--fit) as overrides of the ``paged_`` entries
of ``_C.attention_model()``. Needs no GPU, except ``kernel_facts``.

A case is a log row's sizes: batch, heads_q, heads_kv, head_dim, seqlen_k (keys per sequence, at most), and for
several queries seqlen_q (queries per sequence, at most) and causal; total_keys: all sequences' keys; new: each
sequence's queries (their sum is q's rows; batch x seqlen_q without it). A kernel is kernel_facts' dict (logs
without its rows ran 16-row kernels; without its cluster facts, every merge as a kernel). A GPU is a log header's
sm_count and memory_bytes_per_s.
"""

from __future__ import annotations

import math
from typing import Callable

from ...runtime.native import _C


def problem(case: dict) -> tuple:
    """The problem as the bound model functions take it."""
    max_q, batch = case.get("seqlen_q", 1), case["batch"]
    tokens = sum(case["new"]) if "new" in case else batch * max_q  # rows of q
    return (batch, case["heads_q"], case["heads_kv"], case["head_dim"], max_q, case["seqlen_k"], tokens,
            case.get("total_keys") or 0, bool(case.get("causal")))


def kernel(facts: dict) -> tuple:
    """A kernel's facts as the bound model functions take them."""
    return (facts.get("rows", 16), facts["step_keys"], bool(facts.get("wgmma")), facts["resident"],
            facts.get("cluster_ctas") or [])


def gpu(header: dict) -> tuple[int, float]:
    """(SMs, peak DRAM bytes per us) of a log header or wavetune.device_properties()."""
    return header["sm_count"], header["memory_bytes_per_s"] / 1e6


def predicted_us(case: dict, splits: int, facts: dict, header: dict, model: dict | None = None) -> float:
    """The wave model's prediction for a kernel at a requested split count; ``model``: overrides of its constants."""
    return _C.paged_attention_predicted_us(problem(case), kernel(facts), splits, *gpu(header), model or {})


def pick(case: dict, kernels: dict, best_of: Callable[[str, dict], tuple[int, float] | None],
         model: dict | None = None):
    """(kernel key, splits) of the choice among ``kernels`` (key -> facts, in the choice's order): each kernel it
    weighs at best_of(key, facts)'s (splits, us) (None: not a candidate), a tie going to more resident CTAs."""
    best, best_us, best_resident = None, 0.0, 0
    for key, facts in kernels.items():
        if not _C.paged_attention_weighs_kernel(problem(case), kernel(facts)):
            continue
        found = best_of(key, facts)
        if found and (best is None or _C.paged_attention_beats(found[1], facts["resident"], best_us, best_resident,
                                                              model or {})):
            best, best_us, best_resident = (key, found[0]), found[1], facts["resident"]
    return best


def choice(case: dict, kernels: dict, header: dict, model: dict | None = None):
    """(kernel key, splits) that the paged kernels' choose (attention.h) takes among ``kernels`` on the GPU of
    ``header``."""
    return pick(case, kernels, lambda _, facts: _C.paged_attention_best_splits(
        problem(case), kernel(facts), *gpu(header), model or {}), model)


def kernel_facts(config) -> dict:
    """What the model reads of a compiled kernel on the current device: its step keys, rows, resident CTAs per SM,
    whether it computes with wgmma (the warp-specialized kernel, schedule "cooperative") and its resident CTAs in
    clusters of n (cluster_ctas[n], 0 where n is no cluster size)."""
    clusters = range(_C.paged_attention_max_cluster_splits() + 1)
    return {"step_keys": config.tile[1], "rows": config.tile[0],
            "resident": _C.paged_attention_resident_ctas(config.id), "wgmma": config.schedule == "cooperative",
            "cluster_ctas": [_C.paged_attention_cluster_ctas(config.id, n) for n in clusters]}


def sweep_of(row: dict) -> dict[tuple[str, int], float]:
    """(kernel, splits) -> us of a row's sweep."""
    out = {}
    for name, us in row["times"].items():
        name, _, splits = name.rpartition("/s")
        if name in row["kernels"] and splits.isdigit():
            out[name, int(splits)] = us
    return out


def replay(rows: list[dict], model: dict, header: dict) -> list[float]:
    """best / time of the kernel and split count the model picks among those each row's sweep timed (each kernel
    at its least predicted split count of them, fewer on a tie), per row; ``model``: overrides of its constants."""
    out = []
    for r in rows:
        sweep = sweep_of(r)

        def least(key: str, facts: dict) -> tuple[int, float] | None:
            timed = sorted(n for name, n in sweep if name == key)
            predicted = [(predicted_us(r, n, facts, header, model), n) for n in timed]
            return (min(predicted)[1], min(predicted)[0]) if predicted else None

        out.append(min(sweep.values()) / sweep[pick(r, r["kernels"], least, model)])
    return out


def paged_problem(c: dict) -> tuple:
    """The arguments of _C.paged_attention_chosen_launch for a decode case on a dense cache (contiguous layouts)."""
    heads_kv, dim = c["heads_kv"], c["head_dim"]
    sizes = (c["batch"], c["heads_q"], heads_kv, dim, c["seqlen_k"], c["seqlen_k"])
    q = (16, c["heads_q"] * dim, dim)  # any aligned non-null pointer: the choice reads sizes only
    caches = (16, 16, c["seqlen_k"] * heads_kv * dim, heads_kv * dim, dim)
    return sizes, q, caches, (0, 0, 0, 0), 0, q, (0, 1, c["batch"], True), 1 / math.sqrt(dim)

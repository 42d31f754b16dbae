"""The paged attention kernels' built-in choice replayed offline (the kernel and KV split count of
csrc/families/attention/paged_launch.cu's wave model, its constants as parameters), on logged sweeps of
benchmarks/paged_attention.py and benchmarks/varlen_attention.py, which fit the constants to them (--fit).
Needs no GPU, except ``kernel_facts``.
"""

from __future__ import annotations

import math

from ...runtime.native import _C

# paged_launch.cu's
WARP_FLOPS_PER_US, SM_FLOPS_PER_US, L2_SPEEDUP, ROWS_STEP_US, WGMMA_SPEEDUP = 4.0e5, 4.0e6, 2.0, 0.2, 2.0
KEYS_SPLIT_ROWS_FACTOR = 1.2  # paged_launch.cu's kKeysSplitRowsFactor
TIE_RELATIVE = 1e-9  # paged_launch.cu's kTieRelative: a tie goes to the kernel of more resident CTAs
WS_COPY_WARPS, WARPGROUP_ROWS = 4, 64  # sm90_paged_attention_ws.cuh's kWsCopyWarps, kWarpgroupRows
WS_COPY_SPEEDUP = 1.5  # paged_launch.cu's kWsCopySpeedup
CLUSTER_MERGE_US, CLUSTER_SPLIT_US = 3.0, 0.2  # paged_launch.cu's kClusterMergeUs, kClusterSplitUs
MAX_CLUSTER_SPLITS = 8  # attention.h's kPagedAttentionMaxClusterSplits


def predicted_us(case: dict, splits: int, kernel: dict, sm_count: int, hbm: float, warp: float, wave: float,
                 merge: float, warp_flops: float = WARP_FLOPS_PER_US, sm_flops: float = SM_FLOPS_PER_US,
                 l2_speedup: float = L2_SPEEDUP, rows_step: float = ROWS_STEP_US,
                 wgmma_speedup: float = WGMMA_SPEEDUP, ws_copy: float = WS_COPY_SPEEDUP,
                 cluster_merge: float = CLUSTER_MERGE_US, cluster_split: float = CLUSTER_SPLIT_US) -> float:
    """paged_launch.cu's predicted_us with its constants as parameters (hbm: the bandwidth it assumes, B/us);
    ``kernel``: its step keys, rows (16 in logs without them), resident CTAs, whether it computes with wgmma and
    its resident CTAs in clusters of each size (cluster_ctas; logs without it ran every merge as a kernel);
    ``case``: decode, or with seqlen_q (queries per sequence, at most) and causal several queries; total_keys:
    all sequences' keys; new: each sequence's queries (their sum is q's rows; batch x seqlen_q without it)."""
    step_keys, rows, slots = kernel["step_keys"], kernel.get("rows", 16), sm_count * kernel["resident"]
    max_q, keys, batch = case.get("seqlen_q", 1), case["seqlen_k"], case["batch"]
    steps = max(1, -(-keys // step_keys))
    per_split = -(-steps // min(max(splits, 1), steps))
    runs = -(-steps // per_split)
    group = case["heads_q"] // case["heads_kv"]
    row_blocks, head_blocks = -(-max_q * group // rows), -(-group // rows)
    fill = min(1.0, max(1.0 / batch, case["total_keys"] / (batch * keys))) if case.get("total_keys") and keys else 1.0
    tokens = sum(case["new"]) if "new" in case else batch * max_q  # rows of q
    all_blocks = batch * row_blocks
    prompts = case.get("causal") and keys <= max_q
    query_blocks = all_blocks if prompts else min(all_blocks, -(-tokens * group // rows) + batch - 1)
    fill = fill * (query_blocks / all_blocks)
    one_sequence = case["heads_kv"] * row_blocks * runs
    ctas = max(one_sequence, math.ceil(batch * one_sequence * fill))
    share = max(1.0, keys - 0.5 * max_q) / keys if case.get("causal") and max_q > 1 and keys else 1.0
    keys_per_cta = per_split * step_keys * share
    warps = WS_COPY_WARPS if kernel.get("wgmma") else step_keys // 16  # warps that copy K and V
    math_speedup = wgmma_speedup if kernel.get("wgmma") else 1.0
    bytes_per_cta = 2.0 * keys_per_cta * case["head_dim"] * 2
    keys_per_warp = keys_per_cta if rows > 16 else keys_per_cta / warps
    warp_us = ((keys_per_cta / step_keys * rows_step if rows > 16 else 0.0)
               + 4.0 * 16 * keys_per_warp * case["head_dim"] / (warp_flops * math_speedup))
    flops_per_cta = 4.0 * rows * keys_per_cta * case["head_dim"]
    sharing = max(1, row_blocks // head_blocks)
    copy_rate = warp * (ws_copy if kernel.get("wgmma") else 1.0)
    cta_rate = copy_rate * warps * (1.0 + (l2_speedup - 1.0) * (1.0 - 1.0 / sharing))

    def wave_us(running: int) -> float:
        return wave + max(bytes_per_cta * running / (sharing * hbm), bytes_per_cta / cta_rate, warp_us,
                          -(-running // sm_count) * flops_per_cta / (sm_flops * math_speedup))

    if fill < 1.0:
        us = wave_us(min(ctas, slots)) * max(1.0, ctas / slots)
    else:
        us = ctas // slots * wave_us(slots) + (wave_us(ctas % slots) if ctas % slots else 0.0)
    if merges_in_clusters(case, kernel, row_blocks, runs):
        us += cluster_merge + cluster_split * runs
    elif runs > 1:
        us += merge + 2.0 * batch * max_q * case["heads_q"] * runs * case["head_dim"] * 4 / hbm
    keys_split = rows == 16 and not kernel.get("wgmma")
    return KEYS_SPLIT_ROWS_FACTOR * us if keys_split and max_q * group > 16 else us


def merges_in_clusters(case: dict, kernel: dict, row_blocks: int, runs: int) -> bool:
    """paged_launch.cu's merges_in_clusters: 2 to MAX_CLUSTER_SPLITS splits whose grid the kernel's clusters of that
    size hold at once (logs of builds that took larger clusters replay as the library runs now)."""
    cluster_ctas = kernel.get("cluster_ctas")
    grid = case["batch"] * case["heads_kv"] * row_blocks * runs
    return (bool(cluster_ctas) and 1 < runs <= min(MAX_CLUSTER_SPLITS, len(cluster_ctas) - 1)
            and grid <= cluster_ctas[runs])


def kernel_facts(config) -> dict:
    """What predicted_us needs of a compiled kernel on the current device: its step keys, rows, resident CTAs
    per SM, whether it computes with wgmma (the warp-specialized kernel, schedule "cooperative") and its
    resident CTAs in clusters of n (cluster_ctas[n], 0 where n is no cluster size)."""
    clusters = range(_C.paged_attention_max_cluster_splits() + 1)
    return {"step_keys": config.tile[1], "rows": config.tile[0],
            "resident": _C.paged_attention_resident_ctas(config.id), "wgmma": config.schedule == "cooperative",
            "cluster_ctas": [_C.paged_attention_cluster_ctas(config.id, n) for n in clusters]}


def sweep_of(row: dict) -> dict[tuple[str, int], float]:
    """(kernel, splits) -> us of a row's sweep."""
    out = {}
    for name, us in row["times"].items():
        kernel, _, splits = name.rpartition("/s")
        if kernel in row["kernels"] and splits.isdigit():
            out[kernel, int(splits)] = us
    return out


def one_row_tile_kernel(kernel: dict) -> bool:
    """paged_launch.cu's: where a KV head's query rows fit one 16-row tile, the keys_split kernels and the
    warp-specialized one of a single computing warpgroup (64 rows) are the candidates."""
    rows = kernel.get("rows", 16)
    return rows <= 16 or (bool(kernel.get("wgmma")) and rows == WARPGROUP_ROWS)


def replay(rows: list[dict], constants: tuple, header: dict) -> list[float]:
    """best / time of the kernel and split count the model picks (a tie going to the kernel of more resident
    CTAs), per row; constants (fraction of the peak bandwidth, warp rate, wave, merge[, warp and SM tile-math
    rates])."""
    fraction, *rest = constants
    device = (header["sm_count"], fraction * header["memory_bytes_per_s"] / 1e6, *rest)
    out = []
    for r in rows:
        sweep = sweep_of(r)
        one_tile = r.get("seqlen_q", 1) * (r["heads_q"] // r["heads_kv"]) <= 16
        candidates = [ks for ks in sweep if not one_tile or one_row_tile_kernel(r["kernels"][ks[0]])]
        predicted = {ks: predicted_us(r, ks[1], r["kernels"][ks[0]], *device) for ks in candidates}
        least = min(predicted.values())
        ties = [ks for ks in candidates if predicted[ks] - least <= TIE_RELATIVE * least]
        pick = min(ties, key=lambda ks: (-r["kernels"][ks[0]]["resident"], predicted[ks], ks[1]))
        out.append(min(sweep.values()) / sweep[pick])
    return out


SHIPPED = (0.98, 3.75e3, 4.0, 5.0, WARP_FLOPS_PER_US, SM_FLOPS_PER_US, L2_SPEEDUP, ROWS_STEP_US,
           WGMMA_SPEEDUP, WS_COPY_SPEEDUP, CLUSTER_MERGE_US, CLUSTER_SPLIT_US)  # paged_launch.cu's


def paged_problem(c: dict) -> tuple:
    """The arguments of _C.paged_attention_choice for a decode case on a dense cache (contiguous layouts)."""
    heads_kv, dim = c["heads_kv"], c["head_dim"]
    sizes = (c["batch"], c["heads_q"], heads_kv, dim, c["seqlen_k"], c["seqlen_k"])
    q = (16, c["heads_q"] * dim, dim)  # any aligned non-null pointer: the choice reads sizes only
    caches = (16, 16, c["seqlen_k"] * heads_kv * dim, heads_kv * dim, dim)
    return sizes, q, caches, (0, 0, 0, 0), 0, q, (0, 1, c["batch"], True), 1 / math.sqrt(dim)

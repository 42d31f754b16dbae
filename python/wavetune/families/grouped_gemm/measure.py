"""Timing every compiled grouped variant on a case (``cases``), as tuning measures the tune split and
benchmarks/grouped.py compares against torch: each launch checked against a float32 reference on sampled
rows, then timed as CUDA graphs replayed round-robin (``wavetune.tuning.timing.interleaved_us``: warm-up,
interleaved rounds, medians) over fresh uniform(-1, 1) operands. Where one operand set would fit in the
L2, sets with the same counts on other experts rotate, so weights come from DRAM as in a forward pass.
bf16, or a scales mode's variants on e4m3 operands (``scales``: a scaled mode, quantized with scales of its
layout; an operand set then ends with scale_x and scale_w). Importing this module imports torch.
"""

from __future__ import annotations

import hashlib
import math
from typing import Callable

import torch

from ...tuning.timing import interleaved_us
from .api import ENTRIES, SCALES, grouped_configs
from .fp8 import BLOCK, dequantize_experts  # noqa: F401 (the tests and benchmarks take them from here)
from .fp8 import dequantize_operands, operand_blocks, scale_dims

HOT_EXPERTS, HOT_WEIGHT = 3, 30.0  # the "hot" routing: three experts picked 30 times as often as the others
MAX_ERROR = 2e-2
SAMPLED_ROWS = 64
GRAPH_US = 300  # launches per graph: at least this long, so event timing is noise-free
REPS = 5  # interleaved rounds; the median is kept (what the shipped tables' measurements used)


def route(tokens: int, experts: int, topk: int, routing: str, generator: torch.Generator) -> list[int]:
    """Rows per expert when each of `tokens` tokens goes to `topk` distinct experts."""
    weights = torch.ones(experts)
    if routing == "skewed":
        weights = (1.0 / torch.arange(1, experts + 1) ** 1.2)[torch.randperm(experts, generator=generator)]
    elif routing == "hot":
        weights[torch.randperm(experts, generator=generator)[:HOT_EXPERTS]] = HOT_WEIGHT
    picks = torch.multinomial(weights.expand(tokens, experts), topk, replacement=False, generator=generator)
    return picks.flatten().bincount(minlength=experts).tolist()


def case_generator(case_key: str, seed: int) -> torch.Generator:
    """A generator of a case's own (its routing and sampled rows do not depend on what else is measured, so
    shards and resumed runs measure the same problem)."""
    digest = hashlib.sha256(f"{seed}:{case_key}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))


E4M3_MAX = 448.0


def quantize_rows(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """e4m3 values and float32 scales per row (the last dimension), with torch ops: t ~= q * scale[..., None].
    (PyTorch's own way, which benchmarks/e2e.py times as its FP8 baseline.)"""
    scale = (t.abs().amax(dim=-1, keepdim=True).float() / E4M3_MAX).clamp(min=1e-12)
    return (t / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), scale.squeeze(-1)


def quantize_blocks(t: torch.Tensor, rows: int, cols: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """e4m3 values and float32 scales [row blocks, column blocks] of a matrix t [R, K] per block of ``rows`` x
    ``cols`` values (0: all of that extent; 1 x 128: an activation's groups, 128 x 128: a weight's blocks), with
    torch ops: t ~= dequantize_experts(q, scale, rows, torch.float32, cols)."""
    r, k = t.shape
    size_r, size_k = rows or max(r, 1), cols or max(k, 1)
    # A block of all of an empty extent is still one block (one scale): pad that extent to one zero row or column.
    pad_r = size_r if r == 0 and not rows else -r % size_r
    pad_k = size_k if k == 0 and not cols else -k % size_k
    padded = torch.nn.functional.pad(t.float(), (0, pad_k, 0, pad_r))
    blocked = padded.view(padded.shape[0] // size_r, size_r, padded.shape[1] // size_k, size_k)
    scale = (blocked.abs().amax(dim=(1, 3), keepdim=True) / E4M3_MAX).clamp(min=1e-12)
    q = (blocked / scale).clamp(-E4M3_MAX, E4M3_MAX).view(padded.shape)[:r, :k]
    return q.to(torch.float8_e4m3fn).contiguous(), scale[:, 0, :, 0].contiguous()


def quantize(t: torch.Tensor, scales: str, operand: str) -> tuple[torch.Tensor, torch.Tensor]:
    """e4m3 values and scales of ``t`` as a scales mode takes them for ``operand``: "x" (a matrix [rows, K]) or
    "w" (experts' matrices [E, N, K], or one of them), in the scale shapes of the mode's layout."""
    block_rows, block_cols = operand_blocks(SCALES[scales], operand)

    def one(matrix):
        q, scale = quantize_blocks(matrix, block_rows, block_cols)
        return q, scale.reshape(scale_dims(*matrix.shape, block_rows, block_cols))

    if t.dim() == 2:
        return one(t)
    q, scale = zip(*(one(m) for m in t))  # one expert at a time: its float32 intermediates fit beside the weights
    return torch.stack(q), torch.stack(scale)


def operand_sets(counts: list[int], n: int, k: int, l2_bytes: int, scales: str = "") -> list[tuple]:
    """(x, w, offsets, out, bounds[, scale_x, scale_w]) per rotated set: the same counts on other experts,
    one w for all; ``scales`` as ``measure_case`` takes them."""
    experts, rows = len(counts), sum(counts)
    opts = dict(device="cuda", dtype=torch.bfloat16)
    size = 1 if scales else 2
    touched = sum(1 for c in counts if c) * n * k * size + rows * (n * 2 + k * size)
    copies = min(4, max(1, math.ceil(2 * l2_bytes / touched)))
    w = torch.empty(experts, n, k, **opts).uniform_(-1, 1)
    w_scales = quantize(w, scales, "w") if scales else (w,)
    sets = []
    for c in range(copies):
        shifted = counts[-c * experts // copies:] + counts[:-c * experts // copies] if c else counts
        ends = torch.tensor(shifted).cumsum(0).tolist()
        bounds = [(e, end - count, end) for e, (count, end) in enumerate(zip(shifted, ends)) if count]
        offsets = torch.tensor(ends, dtype=torch.int32, device="cuda")
        x = torch.empty(rows, k, **opts).uniform_(-1, 1)
        if scales:
            (x, scale_x), (w8, scale_w) = quantize(x, scales, "x"), w_scales
            sets.append((x, w8, offsets, torch.empty(rows, n, **opts), bounds, scale_x, scale_w))
        else:
            sets.append((x, w, offsets, torch.empty(rows, n, **opts), bounds))
    return sets


def variant_launches(scales: str = "") -> dict[str, Callable]:
    """The scales mode's entry point forced to each of its compiled variants writing bf16, by name: the fastest
    of them on a case is the exhaustive best."""
    entry = ENTRIES[scales]
    return {c.name: (lambda x, w, offsets, out, bounds, sx=None, sw=None, c=c:
                     entry(x, w, sx, sw, offsets, out=out, config=c.id))
            for c in grouped_configs(scales) if c.dtype == "bf16"}


def check(launch, operands: tuple, generator: torch.Generator, scales: str = "") -> float:
    """Relative error on sampled rows against float32 (of the operands dequantized as the scales mode says), the
    output poisoned with NaN first."""
    x, w, offsets, out, bounds, *scale_tensors = operands
    out.fill_(float("nan"))
    result = launch(*operands)
    rows = torch.randint(0, x.shape[0], (SAMPLED_ROWS,), generator=generator).unique().tolist()
    layout = SCALES[scales]
    got, ref = [], []
    for e, start, end in bounds:
        mine = [r for r in rows if start <= r < end]
        if mine:
            got.append(result[mine].float())
            if scale_tensors:
                scale_x, scale_w = scale_tensors
                xe, we = dequantize_operands(layout, x[mine], w[e], scale_x[mine] if layout["x_block_m"] else scale_x,
                                             scale_w[e], torch.float32)
            else:
                xe, we = x[mine].float(), w[e].float()
            ref.append(xe @ we.t())
    got, ref = torch.cat(got), torch.cat(ref)
    error = (torch.linalg.vector_norm(got - ref) / torch.linalg.vector_norm(ref)).item()
    if not error <= MAX_ERROR:  # NaN too
        raise RuntimeError(f"relative error {error} against the float32 reference")
    return error


def measure_case(case: dict, l2_bytes: int, generator: torch.Generator, reps: int = REPS,
                 extra: dict[str, Callable] | None = None,
                 scales: str = "") -> tuple[dict, dict[str, float], list[int]]:
    """(the case's record, every method's median us, rows per expert): every compiled variant writing bf16
    timed on the case, with ``extra`` methods (a benchmark's comparisons) first in the same interleaved
    rounds. The record is what a grouped table is fitted to: the case, its rows, ``variants_us``, the best
    variant. ``scales``: "" (bf16), or a scaled mode (e4m3 with its scales)."""
    counts = route(case["tokens"], case["experts"], case["topk"], case["routing"], generator)
    n, k, rows = case["n"], case["k"], sum(counts)
    sets = operand_sets(counts, n, k, l2_bytes, scales)
    variants = variant_launches(scales)
    methods = {**(extra or {}), **variants}
    errors = {name: check(launch, sets[0], generator, scales) for name, launch in methods.items()}
    estimate_us = max(2.0, 2 * rows * n * k / 4e8)  # at 400 TFLOP/s
    per_graph = len(sets) * math.ceil(min(48, max(1, GRAPH_US / estimate_us)) / len(sets))
    times = interleaved_us(methods, sets, per_graph, reps)
    best = min(variants, key=times.get)
    record = {**case, "rows": rows, "busy_experts": sum(1 for x in counts if x), "max_rows_per_expert": max(counts),
              "copies": len(sets), "best": best, "best_us": times[best], "variants_us": {v: times[v] for v in variants},
              "max_error": max(errors.values())}
    return record, times, counts

"""The statistics and tables of the offline reports that judge choices on measured logs (the benchmarks' and
the families' replays): their logs read back, geometric means, summaries per range of M, markdown tables.
Standard library only."""

from __future__ import annotations

import gzip
import json
import math
import statistics
from pathlib import Path
from typing import Iterable

# The M (token count) ranges a report summarises: decode, small batches, prefill chunks, long prefill.
M_RANGES = (("1-16", 1, 16), ("17-256", 17, 256), ("257-2048", 257, 2048), (">2048", 2049, math.inf),
            ("all", 1, math.inf))


def read_jsonl(path: Path) -> tuple[dict, list[dict]]:
    """(header, rows) of a benchmark's JSON-lines log, gzipped where its name ends in .gz."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        header, *rows = [json.loads(line) for line in f]
    return header, rows


def geomean(values: Iterable[float]) -> float:
    """The geometric mean of positive values; NaN of none."""
    logs = [math.log(v) for v in values]
    return math.exp(statistics.fmean(logs)) if logs else math.nan


def summarize(values: list[tuple[int, float]]) -> dict[str, dict]:
    """Per M range (M_RANGES): {"shapes", "geomean", "worst"} of (M, value) pairs, where worst is the
    smallest value (a ratio to the oracle, or a speedup); ranges without a value are left out."""
    out = {}
    for name, lo, hi in M_RANGES:
        group = [v for m, v in values if lo <= m <= hi]
        if group:
            out[name] = {"shapes": len(group), "geomean": geomean(group), "worst": min(group)}
    return out


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def fmt(value: float | None, spec: str) -> str:
    """A number for a table cell; '-' for a missing one."""
    return "-" if value is None else format(value, spec)


def invariant_summary(invariant_us: list[float], normal_us: list[float], torch_us: list[float], baseline: str) -> str:
    """Batch-invariant mode's times against the normal choice's (goal: at most 1.10x) and PyTorch's default's
    speed (goal: at least 0.95x), over cases timed in the same rounds: geomean and worst."""
    cost = [i / n for i, n in zip(invariant_us, normal_us)]
    speed = [t / i for t, i in zip(torch_us, invariant_us)]
    return (f"batch-invariant mode over {len(cost)} cases: time / normal mode's {geomean(cost):.3f}x (worst "
            f"{max(cost):.2f}x; goal <= 1.10x), speed / {baseline}'s {geomean(speed):.3f}x (worst {min(speed):.2f}x; "
            "goal >= 0.95x)")

"""The statistics and tables of the offline reports that judge choices on measured logs (the benchmarks' and
the families' replays): geometric means, summaries per range of M, markdown tables. Standard library only."""

from __future__ import annotations

import math
import statistics
from typing import Iterable

# The M (token count) ranges a report summarises: decode, small batches, prefill chunks, long prefill.
M_RANGES = (("1-16", 1, 16), ("17-256", 17, 256), ("257-2048", 257, 2048), (">2048", 2049, math.inf),
            ("all", 1, math.inf))


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

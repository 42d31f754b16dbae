"""The measuring loop the case benchmarks share: each case measured in turn until a time budget is spent,
each record appended to a JSON-lines log under a header, a line per case on stderr."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Callable


def measure_cases(todo: list[dict], measure: Callable[[dict], dict], log: Path, header: dict, budget_s: float,
                  describe: Callable[[dict], str], start: float | None = None) -> list[dict]:
    """The records of the cases measured before ``budget_s`` ran out, counted from ``start`` (a
    time.monotonic() reading; default now). A case is never cut short."""
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(json.dumps(header) + "\n")
    rows, start = [], time.monotonic() if start is None else start
    for case in todo:
        if time.monotonic() - start > budget_s:
            print(f"time budget spent: {len(rows)} of {len(todo)} cases measured", file=sys.stderr)
            break
        row = measure(case)
        rows.append(row)
        with log.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(describe(row), file=sys.stderr)
    return rows

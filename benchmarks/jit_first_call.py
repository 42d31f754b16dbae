"""What a call runs before and after the GPU's table's variants are compiled (docs/kernels.md, "Variants compiled
when needed"), in one run:

    python benchmarks/jit_first_call.py --out $OUT        # on a build without the table's variants (builtin, ci)

1. Before: the table is bound to the compiled variants, so each shape of the held-out split (--count LLM
   layers no table was fitted on, benchmarks/shape_suite.py; bf16, nn.Linear weights) runs the best compiled
   candidate; its choice is recorded.
2. `python -m wavetune build --table <the GPU's table>`'s work (jit.build of the table's working set), timed;
   the family's table is bound again and swapped in by the next call.
3. After: the table's own choice per shape. For the shapes whose choice changed, torch.matmul, the choice
   before (forced, with its launch parameters) and wavetune.gemm with no config (the choice after) are checked
   against a float32 reference into NaN-poisoned outputs, then timed interleaved as CUDA graphs over operand
   copies larger than twice the L2 (weights cold), medians of --reps rounds.
Writes <out>/jit_first_call.json and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

os.environ.setdefault("WAVETUNE_JIT", "0")  # step 2 compiles; nothing in the background before it

import torch  # noqa: E402

import shape_suite  # noqa: E402
import wavetune  # noqa: E402
from vs_cublas import check, table_launch  # noqa: E402
from wavetune.families.gemm import comparison, tuning  # noqa: E402
from wavetune.runtime import jit, tables  # noqa: E402
from wavetune.tuning.timing import interleaved_us  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--count", type=int, default=150, help="held-out shapes")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--jobs", type=int, help="nvcc processes at once (default: the cores)")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or REPO / "benchmarks" / "results"))
    return p.parse_args()


def choices(selector, shapes: list[tuple[int, int, int]]) -> dict[tuple, dict]:
    return {s: selector.select("bf16", "col", *s) for s in shapes}


def time_shape(m: int, n: int, k: int, before, reps: int, l2_bytes: int) -> dict:
    copies, per_graph = comparison.rotation(m, n, k, l2_bytes, tuning.profile_options(m, n, k))
    opts = dict(device="cuda", dtype=torch.bfloat16)
    operands = [(torch.empty(m, k, **opts).uniform_(-1, 1), torch.empty(n, k, **opts).uniform_(-1, 1),
                 torch.empty(m, n, **opts)) for _ in range(copies)]
    launches = {"torch": lambda x, w, out: torch.matmul(x, w.t(), out=out),
                "before": table_launch(before, m, n, k),
                "after": lambda x, w, out: wavetune.gemm(x, w.t(), out=out)}
    x, w, _ = operands[0]
    reference = x.float() @ w.float().t()
    for launch in launches.values():
        check(launch, operands, reference)
    return interleaved_us(launches, operands, max(per_graph, 4), reps)


def main() -> None:
    args = parse_args()
    props = wavetune.device_properties()
    table = tables.default_table_path(props["name"])
    shapes = [(s["m"], s["n"], s["k"]) for s in shape_suite.shapes("heldout", args.count)]
    tables.ensure_table(torch.cuda.current_device())
    before_selector = tables.open_table(table)
    before = choices(before_selector, shapes)
    missing = jit.working_set(table, "gemm")
    start = time.perf_counter()
    jit.build("gemm", missing, jobs=args.jobs, progress=True)
    compile_s = time.perf_counter() - start
    tables.ensure_table(torch.cuda.current_device())  # swaps in the table bound to the compiled variants
    after = choices(tables.open_table(table), shapes)
    changed = [s for s in shapes if after[s]["name"] != before[s]["name"]]
    rows = []
    for m, n, k in changed:
        times = time_shape(m, n, k, before_selector, args.reps, props["l2_bytes"])
        rows.append({"m": m, "n": n, "k": k, "before": before[(m, n, k)]["name"], "after": after[(m, n, k)]["name"],
                     **{f"{name}_us": round(us, 3) for name, us in times.items()}})
        print(rows[-1], flush=True)
    geo = {key: math.exp(sum(math.log(r["torch_us"] / r[f"{key}_us"]) for r in rows) / len(rows)) if rows else None
           for key in ("before", "after")}
    result = {"device": props["name"], "date": time.strftime("%Y-%m-%d"), "table": table.name,
              "kernel_set": wavetune.build_info()["kernel_set"], "shapes": len(shapes),
              "compiled_variants": len(missing), "compile_s": round(compile_s, 1),
              "cpu_cores": os.cpu_count(), "changed_shapes": len(changed),
              "speedup_over_torch_geomean": geo, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "jit_first_call.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"{props['name']}: {len(missing)} variants compiled in {compile_s:.0f} s on {os.cpu_count()} cores; "
          f"{len(changed)} of {len(shapes)} shapes change choice; over torch.matmul (geomean): "
          f"before {geo['before']}, after {geo['after']}")


if __name__ == "__main__":
    main()

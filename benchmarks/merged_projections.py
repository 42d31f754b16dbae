"""What merging an attention's query, key and value projections into one GEMM brings to a decode step:

    python benchmarks/merged_projections.py --out $OUT

One decoder layer (transformers' classes, random bf16 weights, no LM head) of each model, patched with
wavetune.patch (GEMMs, layer ops and attention: e2e.py's +attention twin), once as patch makes it (the three
projections one GEMM) and once with them apart (each its own GEMM); a decode step over --context cached tokens
at each batch, each twin captured as one CUDA graph and the graphs replayed interleaved (the order rotating),
--reps times; medians. The hidden states of the two are compared first. Writes <out>/merged_projections.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

import e2e
from wavetune import fused
from wavetune.hf_models import MODELS


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="llama3-8b,qwen2.5-7b")
    p.add_argument("--batches", type=e2e.ints, default=[1, 16])
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree: one rank's slice of each model")
    p.add_argument("--reps", type=int, default=40)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "."))
    return p.parse_args()


def twins(spec: dict) -> dict:
    """The +attention twin of one layer of ``spec`` as patch makes it, and with the projections kept apart."""
    model, _ = e2e.build_model(spec, 1, "cuda")
    merged, _ = e2e.patched_twin(model, e2e.WAVETUNE_ATTENTION)
    merge = fused.projections_reason
    fused.projections_reason = lambda module: "kept apart for the comparison"
    try:
        apart, _ = e2e.patched_twin(model, e2e.WAVETUNE_ATTENTION)
    finally:
        fused.projections_reason = merge
    return {"merged": merged, "apart": apart}


def measure(models: dict, spec: dict, batch: int, context: int, reps: int) -> dict:
    inputs = e2e.shape_inputs(spec, 1, "decode", batch, context)
    stream, pool = torch.cuda.Stream(), torch.cuda.graph_pool_handle()
    with torch.inference_mode():
        captured = {k: e2e.capture(e2e.step_function(m, lm_head=False), inputs, stream, pool)
                    for k, m in models.items()}
        error = e2e.relative_error(captured["merged"][1], captured["apart"][1].float())
        ms = e2e.time_interleaved({k: graph for k, (graph, _) in captured.items()}, reps, stream)
    us = {k: v * 1e3 for k, v in ms.items()}
    return {"us": us, "speedup": us["apart"] / us["merged"], "error": error}


def main() -> None:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "merged_projections.jsonl"
    with path.open("w") as log:
        log.write(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "context": args.context, "reps": args.reps}) + "\n")
        for name in args.models.split(","):
            spec = e2e.sliced(MODELS[name], args.tp)
            models = twins(spec)
            for batch in args.batches:
                row = {"model": name, "tp": args.tp, "batch": batch,
                       **measure(models, spec, batch, args.context, args.reps)}
                log.write(json.dumps(row) + "\n")
                us = row["us"]
                print(f"{name} tp {args.tp} batch {batch}: merged {us['merged']:.1f} us, apart {us['apart']:.1f} us "
                      f"({row['speedup']:.3f}x), hidden states {row['error']:.4f} apart", flush=True)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

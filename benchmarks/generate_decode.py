"""transformers' greedy ``generate()`` with a static cache on a patched model: ms per new token with the decode
steps replayed from CUDA graphs (``wavetune.patch(model, decode_graphs=True)``) against the same patched model
stepping eagerly (the graphs removed, ``disable_compile=True``), and whether the tokens agree. Random weights from
a real config (wavetune.hf_models), bf16, on one GPU. The time per token is the difference between a long and a
short generation over the same prompt, divided by the extra tokens: the prefill and each call's capture cancel
out. The two methods alternate within each repetition (the order rotating), and medians are kept. Each time is
also given as the effective bandwidth of a step: the bytes a step must read (``decode_step_bytes``) over its
time.

    python benchmarks/generate_decode.py --model llama3-8b --context 1024 --out results/generate_decode.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import transformers

import wavetune
from wavetune import decode_graphs
from wavetune.hf_models import MODELS, decode_step_bytes


def build(name: str, layers: int | None) -> torch.nn.Module:
    spec = MODELS[name]
    sizes = dict(spec["sizes"], **({"num_hidden_layers": layers} if layers else {}))
    config = getattr(transformers, f"{spec['family']}Config")(**sizes)
    torch.manual_seed(0)
    with torch.device("cuda"):
        return getattr(transformers, f"{spec['family']}ForCausalLM")(config).to(torch.bfloat16).eval()


def seconds(model, prompt, new_tokens: int, **options) -> tuple[float, torch.Tensor]:
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, cache_implementation="static", **options)
    torch.cuda.synchronize()
    return time.perf_counter() - start, out


# Each method: how the patched model is set up for it, and generate's extra options.
METHODS = {"eager": (decode_graphs.remove, {"disable_compile": True}), "graphs": (decode_graphs.install, {})}


def ms_per_token(model, prompt, short: int, long: int, reps: int) -> dict[str, tuple[float, torch.Tensor]]:
    """Per method, ms per new token (medians of ``reps`` interleaved runs) and the long generation's tokens."""
    times = {(method, n): [] for method in METHODS for n in (short, long)}
    tokens = {}
    for rep in range(reps + 1):  # the first round warms up: tables, cuBLAS, the first capture
        order = list(METHODS)[rep % len(METHODS):] + list(METHODS)[:rep % len(METHODS)]
        for method in order:
            set_up, options = METHODS[method]
            set_up(model)
            for n in (short, long):
                elapsed, tokens[method] = seconds(model, prompt, n, **options)
                if rep:
                    times[method, n].append(elapsed)
    median = {key: sorted(t)[len(t) // 2] for key, t in times.items()}
    return {method: (1e3 * (median[method, long] - median[method, short]) / (long - short), tokens[method])
            for method in METHODS}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="llama3-8b", choices=sorted(MODELS))
    p.add_argument("--layers", type=int, default=None, help="decoder layers (default: the config's)")
    p.add_argument("--context", type=int, default=1024, help="prompt tokens (cached before the timed steps)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--tokens", type=int, default=64, help="extra new tokens of the long generation")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    model = build(args.model, args.layers)
    prompt = torch.randint(0, model.config.vocab_size, (args.batch, args.context), device="cuda")
    short, long = 8, 8 + args.tokens
    results = {"device": torch.cuda.get_device_name(), "model": args.model, "context": args.context,
               "batch": args.batch, "transformers": transformers.__version__, "torch": torch.__version__,
               "wavetune": wavetune.__version__}
    results["step_bytes"] = decode_step_bytes(model, args.context + (short + long) / 2, args.batch)  # the timed steps' mean
    report = wavetune.patch(model, decode_graphs=True)
    assert report.decode_graphs, report
    measured = ms_per_token(model, prompt, short, long, args.reps)
    for method in METHODS:
        results[f"{method}_ms"] = measured[method][0]
        results[f"{method}_tb_s"] = results["step_bytes"] / (measured[method][0] * 1e-3) / 1e12
    results["speedup"] = results["eager_ms"] / results["graphs_ms"]
    results["same_tokens"] = bool(torch.equal(measured["eager"][1], measured["graphs"][1]))
    print(json.dumps(results, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()

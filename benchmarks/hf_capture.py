"""A Hugging Face model class patched with wavetune: its accuracy against an fp32 run of the same model,
greedy decoding against the unpatched model, and both captured in CUDA graphs the way PyTorch's docs show
(warm-up on a side stream, then ``torch.cuda.graph(g)``) and replayed interleaved.

    python benchmarks/hf_capture.py --out $OUT          # GPU; writes hf_capture_<device>.json and prints a table

Model: ``Qwen2MoeForCausalLM`` (transformers) from Qwen1.5-MoE-A2.7B's public config
(examples/qwen1.5-moe-a2.7b.config.json): biased q/k/v projections, 60 routed experts (top 4) beside a shared
expert. --layers decoder layers (default 4) with random weights: matrices N(0, 0.02), biases N(0, 1) (the
size of the products, where rounding the product before adding the bias shows), norms 1. Experts run
transformers' ``grouped_mm`` implementation (no host synchronization, so the model can be captured); wavetune
patches the model's nn.Linear layers only (attention projections, shared expert, LM head:
``wavetune.patch(model, attention=False, experts=False)``; benchmarks/e2e.py adds the experts and attention).

Shapes are (batch, tokens) forwards without a KV cache: (B, 1) has the GEMM shapes of a decode step of B
sequences, (1, T) a prompt of T tokens. Each is captured once per method and the graphs are replayed
interleaved, the order rotating, --reps times between CUDA events on fresh token ids; medians are kept.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import statistics
from pathlib import Path

import torch

import wavetune
from wavetune.tuning.timing import capture_documented

CONFIG = Path(__file__).resolve().parents[1] / "examples" / "qwen1.5-moe-a2.7b.config.json"
SHAPES = [(1, 1), (8, 1), (64, 1), (1, 128), (1, 1024), (4, 1024)]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for hf_capture_<device>.json")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens of the accuracy and greedy runs")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-table", action="store_true",
                        help="choose by the built-in heuristic instead of the tuned table (CUTLASS for every GEMM)")
    return parser.parse_args(argv)


def build_model(layers: int, seed: int) -> torch.nn.Module:
    """The fp32 model on the GPU with random weights (see the module's docstring)."""
    import transformers

    spec = json.loads(CONFIG.read_text())
    spec.pop("architectures"), spec.pop("torch_dtype")
    config = transformers.AutoConfig.for_model(spec.pop("model_type"), **spec)
    config.num_hidden_layers = layers
    config._experts_implementation = "grouped_mm"
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
            elif p.dim() == 1:
                p.normal_(0.0, 1.0)
            else:
                p.normal_(0.0, 0.02)
    return model.eval().requires_grad_(False)


def logits(model, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, use_cache=False).logits


def errors(result: torch.Tensor, reference: torch.Tensor) -> dict:
    diff = (result.double() - reference.double())
    return {"relative": (diff.norm() / reference.double().norm()).item(),
            "max_over_max": (diff.abs().max() / reference.double().abs().max()).item()}


def greedy(model, prompt: torch.Tensor, steps: int) -> tuple[list[int], list[torch.Tensor]]:
    """Token ids and last-position logits of ``steps`` greedy steps (full forward each step, no cache)."""
    ids, tokens, last = prompt, [], []
    for _ in range(steps):
        step = logits(model, ids)[0, -1].float()
        tokens.append(int(step.argmax()))
        last.append(step)
        ids = torch.cat([ids, ids.new_tensor([[tokens[-1]]])], dim=1)
    return tokens, last


def compare_greedy(reference: tuple, patched: tuple) -> dict:
    """Where the two token streams first differ, and how close the reference's top two logits were there."""
    (ref_tokens, ref_logits), (our_tokens, our_logits) = reference, patched
    first = next((i for i, (a, b) in enumerate(zip(ref_tokens, our_tokens)) if a != b), None)
    result = {"identical": first is None, "tokens": len(ref_tokens), "first_divergence": first}
    if first is not None:
        top2 = ref_logits[first].topk(2).values
        result["reference_top2_margin"] = (top2[0] - top2[1]).item()
        result["max_logit_difference"] = (ref_logits[first] - our_logits[first]).abs().max().item()
        result["near_tie"] = result["reference_top2_margin"] <= result["max_logit_difference"]
    return result


def time_interleaved(graphs: dict, ids: torch.Tensor, vocab: int, reps: int) -> dict:
    """Median ms per replay of each graph, replays interleaved and the order rotating."""
    names, samples = list(graphs), {name: [] for name in graphs}
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for r in range(reps):
        for name in names[r % len(names):] + names[:r % len(names)]:
            ids.copy_(torch.randint(0, vocab, ids.shape, device="cuda"))
            start.record()
            graphs[name].replay()
            stop.record()
            stop.synchronize()
            samples[name].append(start.elapsed_time(stop))
    return {name: statistics.median(values) for name, values in samples.items()}


def device_slug() -> str:
    return torch.cuda.get_device_name().lower().replace(" ", "-")


def main(argv=None) -> None:
    args = parse_args(argv)
    fp32 = build_model(args.layers, args.seed)
    model = copy.deepcopy(fp32).to(torch.bfloat16)
    vocab = model.config.vocab_size
    prompt = torch.randint(0, vocab, (1, args.prompt), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    record = {"device": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
              "model": "Qwen2MoeForCausalLM (Qwen1.5-MoE-A2.7B config)", "layers": args.layers,
              "torch": torch.__version__, "wavetune": wavetune.__version__,
              "choices": "built-in heuristic" if args.no_table else "tuned table",
              "kernel_set": wavetune.build_info()["kernel_set"]}
    if args.no_table:
        wavetune.tables.ensure_table(torch.cuda.current_device())
        wavetune._C.use_table(torch.cuda.current_device(), None)
    with torch.inference_mode():
        reference32 = logits(fp32, prompt).float()
        unpatched = logits(model, prompt)
        del fp32
        reference_greedy = greedy(model, prompt, args.new_tokens)
        graphs, outputs = {}, {}
        static = {shape: torch.randint(0, vocab, shape, device="cuda") for shape in SHAPES}
        for shape in SHAPES:
            graphs[shape], outputs[shape] = {}, {}
            graphs[shape]["transformers"], outputs[shape]["transformers"] = capture_documented(
                logits, model, static[shape])

        report = wavetune.patch(model, attention=False, experts=False)  # its nn.Linear layers (the docstring)
        record["patched_layers"], record["skipped_layers"] = len(report.patched), report.skipped
        patched = logits(model, prompt)
        record["accuracy"] = {"prompt_tokens": args.prompt,
                              "unpatched_vs_fp32": errors(unpatched, reference32),
                              "patched_vs_fp32": errors(patched, reference32),
                              "patched_vs_unpatched": errors(patched, unpatched)}
        record["greedy"] = compare_greedy(reference_greedy, greedy(model, prompt, args.new_tokens))
        for shape in SHAPES:
            graphs[shape]["wavetune"], outputs[shape]["wavetune"] = capture_documented(logits, model, static[shape])
        record["timing_ms"] = []
        for shape in SHAPES:
            times = time_interleaved(graphs[shape], static[shape], vocab, args.reps)
            for graph in graphs[shape].values():  # the replays agree on the last ids
                graph.replay()
            agreement = errors(outputs[shape]["wavetune"], outputs[shape]["transformers"])["relative"]
            record["timing_ms"].append({"batch": shape[0], "tokens": shape[1], **times,
                                        "speedup": times["transformers"] / times["wavetune"],
                                        "replay_relative_difference": agreement})
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"hf_capture_{device_slug()}{'_heuristic' if args.no_table else ''}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k != "timing_ms"}, indent=1))
    print("batch tokens  transformers_ms  wavetune_ms  speedup")
    for row in record["timing_ms"]:
        print(f"{row['batch']:5d} {row['tokens']:6d}  {row['transformers']:15.3f}  {row['wavetune']:11.3f}  "
              f"{row['speedup']:7.3f}")


if __name__ == "__main__":
    main()

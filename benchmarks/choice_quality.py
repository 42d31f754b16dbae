"""How well a table chooses, judged on measured latencies: every config of the table timed on every shape.

    # GPU, one interleaved profiler run (weights cold): every compiled config on each shape of both splits
    python benchmarks/shape_suite.py --split tune --count 120 > tune.json
    python -m wavetune tune --log h100.jsonl --exact tune.json --out /tmp/tables      # and the same for heldout
    # anywhere, no GPU and no compiled kernels needed
    python benchmarks/choice_quality.py --log h100.jsonl --table tables/nvidia-h100-80gb-hbm3.wtt --split heldout

Per shape of the split, the table's choice is evaluated as docs/tables.md states it (the Python reference:
model.map_problem and model.predict, the memory and traffic floors, calibration, the compute floor,
priors, stream-K only where it is modeled; exact records are not consulted, so the model is what is
judged) and scored as the fastest of the table's configs
measured on the shape over the measured time of the choice, both at default raster and swizzle. Also
prints the prediction error over every (shape, config) pair.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from types import SimpleNamespace

import methods
import shape_suite
from wavetune.codegen import config_space
from wavetune.tuning import model
from wavetune.tuning import tablefile

REPO = Path(__file__).resolve().parents[1]


# The cuBLAS candidates and the nominal tile they are mapped through (csrc/families/gemm/cublas_variant.cu).
LIBRARY_VARIANTS = [f"cublas_{dtype}_b{layout}" for dtype in ("bf16", "fp16") for layout in ("col", "row")]
NOMINAL_LIBRARY_TILE = SimpleNamespace(tile_m=128, tile_n=128, tile_k=64, cluster_m=1, cluster_n=1, swap_ab=False)


def table_predictor(path: Path, sm_count: int):
    """(config keys, predict(key, m, n, k) -> us, choosable(key, m, n, k) -> bool, priors [(max_m, key,
    margin)] by ascending max_m). ``choosable``: whether the lookup may choose the config there
    (model.stream_k_modeled)."""
    table = tablefile.read_table(path)
    variants = {v.name: v for v in config_space.load(REPO / "cutlass_configs" / "sm90_gemm.toml").variants}
    variants.update({name: NOMINAL_LIBRARY_TILE for name in LIBRARY_VARIANTS})
    keys = [f"{c['variant']}/{c['decomposition']}/{c['splits']}" for c in table["configs"]]
    waves = {keys[i]: w for i, w in table["waves"].items()}
    calibration = {keys[i]: c for i, c in table["calibration"].items()}
    memory, traffic = table["memory_bytes_per_us"] or 0.0, table["traffic_bytes_per_us"] or 0.0
    compute = table["compute_flop_per_us"] or 0.0

    def shape(key: str) -> tuple[str, tuple, tuple, bool]:
        name, decomposition, _ = key.split("/")
        v = variants[name]
        return decomposition, (v.tile_m, v.tile_n, v.tile_k), (v.cluster_m, v.cluster_n), v.swap_ab

    def predict(key: str, m: int, n: int, k: int) -> float:
        decomposition, tile, cluster, swap_ab = shape(key)
        G, L, C, w = model.map_problem(tile, cluster, swap_ab, m, n, k, decomposition, int(key.split("/")[2]),
                                       sm_count)
        floors = max(model.memory_floor_us(m, n, k, memory), model.traffic_floor_us(G, L, tile, traffic))
        t = max(model.predict(waves[key], G, L, w, C), floors)
        t = t * model.calibration_factor(calibration[key], m, n, k) if key in calibration else t
        return max(t, floors, model.compute_floor_us(m, n, k, compute))  # no calibration goes below a floor

    def choosable(key: str, m: int, n: int, k: int) -> bool:
        decomposition, tile, cluster, swap_ab = shape(key)
        if decomposition != "stream_k":
            return True
        _, L, C, _ = model.map_problem(tile, cluster, swap_ab, m, n, k, decomposition, 1, sm_count)
        return model.stream_k_modeled(*model.problem_extents(tile, cluster, swap_ab, m, n, k), L, C)

    priors = sorted((p["max_m"] or float("inf"), keys[p["config_id"]], p["margin"]) for p in table["priors"])
    return keys, predict, choosable, priors


def choose(predicted: dict[str, float], m: int, priors: list[tuple]) -> str:
    """The model's pick, or the prior for M when its prediction is within its margin of the pick's."""
    pick = min(predicted, key=predicted.get)
    prior = next(((key, margin) for max_m, key, margin in priors if m <= max_m), None)
    if prior and prior[0] in predicted and predicted[prior[0]] <= predicted[pick] * (1 + prior[1]):
        return prior[0]
    return pick


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--log", type=Path, required=True, help="tuning log with the split's shapes measured (--exact)")
    p.add_argument("--table", type=Path, required=True)
    p.add_argument("--split", choices=shape_suite.SPLITS, default="heldout")
    p.add_argument("--count", type=int, default=120)
    args = p.parse_args()
    header, records = methods.read_log(args.log)
    keys, predict, choosable, priors = table_predictor(args.table, header["sm_count"])
    ratios, errors, missing = [], [], 0
    for s in shape_suite.shapes(args.split, args.count):
        m, n, k = s["m"], s["n"], s["k"]
        measured = {key: us for key in keys
                    if (us := records.get(("bf16", "col", m, n, k, key, "heuristic", 1))) is not None}
        if not measured:
            missing += 1
            continue
        predicted = {key: predict(key, m, n, k) for key in measured}
        candidates = {key: t for key, t in predicted.items() if choosable(key, m, n, k)} or predicted
        ratios.append((m, min(measured.values()) / measured[choose(candidates, m, priors)]))
        errors += [abs(predicted[key] - us) / us for key, us in measured.items()]
    print(f"{header['gpu_name']}, {args.table}, {args.split} split: {len(ratios)} shapes "
          f"({missing} not in the log), {len(keys)} configs")
    rows = [[name, str(r["shapes"]), f"{r['geomean']:.3f}", f"{r['worst']:.2f}"]
            for name, r in methods.summarize(ratios).items()]
    print(methods.markdown_table(["M", "shapes", "choice / best", "worst"], rows))
    deciles = statistics.quantiles(errors, n=10)
    print(f"prediction error over {len(errors)} (shape, config) pairs: median {statistics.median(errors):.1%}, "
          f"p90 {deciles[-1]:.1%}")


if __name__ == "__main__":
    main()

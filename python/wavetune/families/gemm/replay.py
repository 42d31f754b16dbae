"""The dense GEMM table's choice replayed in Python, as docs/tables.md states it (the Python reference of the
lookup: model.map_problem and model.predict, the memory and traffic floors, calibration, the compute floor,
priors, stream-K only where the lookup's own rule, ``_C.stream_k_modeled``, says it is modeled; exact records
are not consulted, so the model is what is judged), and judged on measured logs (``judge``: what
benchmarks/choice_quality.py and benchmarks/sm_counts.py report); needs no GPU and no compiled kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from ...codegen import config_space
from ...runtime.jit import CONFIG_SPACES
from ...runtime.native import _C
from ...tuning import model, tablefile
from . import FAMILY


def library_variants() -> dict[str, SimpleNamespace]:
    """The cuBLAS candidates a table may name, each with the nominal tile it is mapped through."""
    return {name: SimpleNamespace(tile_m=tile[0], tile_n=tile[1], tile_k=tile[2], cluster_m=1, cluster_n=1,
                                  swap_ab=False) for name, tile in _C.cublas_candidates()}


def table_predictor(path: Path, sm_count: int):
    """(config keys, predict(key, m, n, k) -> us, choosable(key, m, n, k) -> bool, priors [(max_m, key,
    margin)] by ascending max_m). ``choosable``: whether the lookup may choose the config there
    (``_C.stream_k_modeled``, mapping.h's rule)."""
    table = tablefile.read_table(path)
    variants = {v.name: v for v in config_space.load(CONFIG_SPACES / FAMILY.config_space).variants}
    variants.update(library_variants())
    keys = [f"{c['variant']}/{c['decomposition']}/{c['splits']}" for c in table["configs"]]
    waves = {keys[i]: w for i, w in table["waves"].items()}
    calibration = {keys[i]: c for i, c in table["calibration"].items()}
    occupancy = {keys[i]: ctas for i, ctas in table["occupancy"].items()}
    memory, traffic = table["memory_bytes_per_us"] or 0.0, table["traffic_bytes_per_us"] or 0.0
    compute = table["compute_flop_per_us"] or 0.0

    def shape(key: str) -> tuple[str, tuple, tuple, bool]:
        name, decomposition, _ = key.split("/")
        v = variants[name]
        return decomposition, (v.tile_m, v.tile_n, v.tile_k), (v.cluster_m, v.cluster_n), v.swap_ab

    def predict(key: str, m: int, n: int, k: int) -> float:
        decomposition, tile, cluster, swap_ab = shape(key)
        G, L, C, w = model.map_problem(tile, cluster, swap_ab, m, n, k, decomposition, int(key.split("/")[2]),
                                       sm_count, occupancy.get(key, 1))
        floors = max(model.memory_floor_us(m, n, k, memory), model.traffic_floor_us(G, L, tile, traffic))
        t = max(model.predict(waves[key], G, L, w, C), floors)
        t = t * model.calibration_factor(calibration[key], m, n, k) if key in calibration else t
        return max(t, floors, model.compute_floor_us(m, n, k, compute))  # no calibration goes below a floor

    def choosable(key: str, m: int, n: int, k: int) -> bool:
        decomposition, tile, cluster, swap_ab = shape(key)
        if decomposition != "stream_k":
            return True
        _, L, C, _ = model.map_problem(tile, cluster, swap_ab, m, n, k, decomposition, 1, sm_count)
        return _C.stream_k_modeled(*model.problem_extents(tile, cluster, swap_ab, m, n, k), L, C)

    priors = sorted((p["max_m"] or float("inf"), keys[p["config_id"]], p["margin"]) for p in table["priors"])
    return keys, predict, choosable, priors


def choose(predicted: dict[str, float], m: int, priors: list[tuple]) -> str:
    """The model's pick, or the prior for M when its prediction is within its margin of the pick's."""
    pick = min(predicted, key=predicted.get)
    prior = next(((key, margin) for max_m, key, margin in priors if m <= max_m), None)
    if prior and prior[0] in predicted and predicted[prior[0]] <= predicted[pick] * (1 + prior[1]):
        return prior[0]
    return pick


def measured_by_shape(records: dict, dtype: str = "bf16", b_layout: str = "col") -> dict[tuple, dict[str, float]]:
    """A tuning log's latencies (``comparison.read_log``'s records) at default raster and swizzle: us by config key,
    by (M, N, K); configs that cannot run a problem are left out."""
    out: dict[tuple, dict[str, float]] = {}
    for (d, b, m, n, k, key, raster, swizzle), us in records.items():
        if (d, b, raster, swizzle) == (dtype, b_layout, "heuristic", 1) and us is not None:
            out.setdefault((m, n, k), {})[key] = us
    return out


@dataclass
class Judged:
    """A table's choices judged on measured latencies: (M, oracle's time over the choice's) per shape, the relative
    prediction error of every (shape, table config) pair, the shapes with none of the table's configs measured,
    and the table's config count."""

    ratios: list[tuple[int, float]]
    errors: list[float]
    missing: int
    configs: int


def judge(measured: dict[tuple, dict[str, float]], table: Path, sm_count: int, shapes: list[tuple[int, int, int]],
          catalog_oracle: bool = False) -> Judged:
    """The table's choice on each shape, its model replayed on a GPU of ``sm_count`` SMs among its configs measured
    there (``measured_by_shape``), scored as the fastest of those configs (with ``catalog_oracle``: of every config
    measured there) over the choice's time."""
    keys, predict, choosable, priors = table_predictor(table, sm_count)
    judged = Judged([], [], 0, len(keys))
    for m, n, k in shapes:
        on_shape = measured.get((m, n, k), {})
        timed = {key: on_shape[key] for key in keys if key in on_shape}
        if not timed:
            judged.missing += 1
            continue
        predicted = {key: predict(key, m, n, k) for key in timed}
        candidates = {key: t for key, t in predicted.items() if choosable(key, m, n, k)} or predicted
        best = min((on_shape if catalog_oracle else timed).values())
        judged.ratios.append((m, best / timed[choose(candidates, m, priors)]))
        judged.errors += [abs(predicted[key] - us) / us for key, us in timed.items()]
    return judged

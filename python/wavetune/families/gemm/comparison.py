"""What the GEMM benchmarks compute without a GPU: the peer comparison's (benchmarks/compare.py) shape files,
measurement log read back and the choices of the methods compared; the finalists vs_cublas.py times again;
how accurate a model has to be (required_accuracy.py); a deployment-tuned table judged at token counts its
tuning never measured (deploy_quality.py); launches with a table's micro rule (launch_context.py); the decode
GEMMs' report (decode_gemm.py). Their reports' statistics and tables are ``wavetune.tuning.report``'s.

Importing this module needs wavetune (its native module, no GPU) and numpy only. scikit-learn and
nvidia-matmul-heuristics are imported by the functions that use them, so tests of the rest run without.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

import numpy as np

from ...runtime.native import _C
from ...tuning import deploy, model
from ...tuning.report import geomean
from . import api, tuning
from .cases import DECODE_M_RANGES
from .tuning import Candidate

# M values crossed with a model's layer list when none are given.
DEFAULT_M = tuple(2**i for i in range(15))  # 1 ... 16384
# The single-config baseline: CUTLASS's usual default tile, run data-parallel on every shape.
DEFAULT_VARIANT = "cooperative_128x128x64_1x1_persistent"


# ------------------------------------------------------------------------------------------------
# Shapes and measurements
# ------------------------------------------------------------------------------------------------


def load_shapes(path: str | Path, models: str | None = None, ms: list[int] | None = None) -> list[tuple[int, int, int]]:
    """(M, N, K) of a shape file, in (N, K) then M order.

    Two forms: a shape suite ({"M": [...], "models": {name: {layer: [N, K]}}}, as
    shared/benchmarks/llm_shapes.json; ``models`` picks some), or one model's layer list
    ({layer: [N, K]}, a "models" entry of a suite; or a list of [N, K]). ``ms`` replaces the suite's M
    values; a layer list without ``ms`` takes DEFAULT_M.
    """
    data = json.loads(Path(path).read_text())
    if isinstance(data, dict) and "models" in data:
        shapes = tuning.suite_shapes(path, models)
        if ms is None:
            return shapes
        nks = sorted({(n, k) for _, n, k in shapes})
    else:
        layers = list(data.values()) if isinstance(data, dict) else data
        if not layers or not all(isinstance(nk, list) and len(nk) == 2 and all(isinstance(x, int) and x > 0 for x in nk)
                                 for nk in layers):
            raise ValueError(f"{path}: neither a shape suite ({{'M': [...], 'models': ...}}) nor a layer list "
                             f"({{layer: [N, K]}} or [[N, K], ...])")
        nks = sorted({tuple(nk) for nk in layers})
    return [(m, n, k) for n, k in nks for m in (ms or DEFAULT_M)]


def read_log(path: str | Path) -> tuple[dict, dict[tuple, float | None]]:
    """A tuning.MeasurementLog file read back without a GPU: its header, and latency (us; None where the
    config cannot run the problem) by (dtype, b_layout, M, N, K, candidate key, raster, max_swizzle)."""
    lines = Path(path).read_text().splitlines()
    records = {}
    for line in lines[1:]:
        r = json.loads(line)
        records[(*r["problem"], r["config"], r["raster"], r["max_swizzle"])] = r["us"]
    return json.loads(lines[0]), records


def candidate_of(key: str) -> Candidate:
    """The Candidate of a key 'variant/decomposition/splits' (a table's config may be one that
    tuning.candidates() no longer scores)."""
    name, decomposition, splits = key.split("/")
    return Candidate(api.configs_by_name()[name], decomposition, int(splits))


def oracle(records: dict, problem: tuple, cands: list[Candidate]) -> tuple[float, str] | None:
    """(us, candidate key) of the fastest candidate on a problem at default micro parameters, or None unless
    every candidate was measured there (configs that cannot run the problem are measured as None)."""
    keys = [(*problem, c.key, "heuristic", 1) for c in cands]
    if not all(k in records for k in keys):
        return None
    return min(((records[k], k[5]) for k in keys if records[k] is not None), default=None)


# The micro part of the oracle: the fastest default-micro candidates of a shape (at most this many, within
# this factor of the best), with more than one wave, are measured again with every swizzled raster option.
# NOTES: all 4 options for all 33 candidates would quintuple the exhaustive measurement. A candidate left
# out would need a swizzled launch more than 1.5x faster than its default one to become the best; the
# largest such gain seen at the tuning anchors was 2x (a 1x2-cluster config), most were under 1.4x, so
# this oracle can rarely miss the best launch (which would make the ratios to it slightly optimistic).
MICRO_ORACLE_TOP = 6
MICRO_ORACLE_WITHIN = 1.5


def micro_oracle_runs(records: dict, problem: tuple, cands: list[Candidate], sm_count: int) -> list[tuple]:
    """(candidate, raster, max_swizzle) runs that extend the default-micro oracle of a problem to micro
    parameters; empty until every candidate is measured there at default parameters."""
    best = oracle(records, problem, cands)
    if best is None:
        return []
    default_us = {c.key: (records[(*problem, c.key, *model.DEFAULT_MICRO)], c) for c in cands}
    timed = sorted((us, key, c) for key, (us, c) in default_us.items() if us is not None)
    return [(c, raster, swizzle)
            for us, _, c in timed[:MICRO_ORACLE_TOP]
            if us <= MICRO_ORACLE_WITHIN * best[0] and c.decomposition != "stream_k"
            and c.coordinates(*problem[2:], sm_count)[3] >= tuning.MICRO_MIN_WAVE
            for raster, swizzle in tuning.MICRO_OPTIONS if (raster, swizzle) != model.DEFAULT_MICRO]


def best_launch(records: dict, problem: tuple, cands: list[Candidate]) -> tuple[float, str, str, int] | None:
    """(us, candidate key, raster, max_swizzle) of the fastest launch of a candidate measured on a problem,
    at any of the micro stage's options (the oracle with its micro part, and the table's picks), or None
    unless every candidate was measured there at default micro parameters."""
    if oracle(records, problem, cands) is None:
        return None
    launches = ((c.key, raster, swizzle) for c in cands for raster, swizzle in tuning.MICRO_OPTIONS)
    return min((us, *launch) for launch in launches if (us := records.get((*problem, *launch))) is not None)


def rotation(m: int, n: int, k: int, l2_bytes: int, options: dict) -> tuple[int, int]:
    """(operand copies, launches per graph) of one measurement, as the C++ profiler sizes them
    (csrc/families/gemm/profiler.cu): copies of A, B and D that together exceed twice the L2 (at most 64), and
    at least ``min_launches`` launches in whole passes over them."""
    copy_bytes = 2 * (m * k + k * n + m * n)
    copies = min(max(math.ceil(2 * l2_bytes / copy_bytes), 1), 64)
    return copies, copies * math.ceil(options["min_launches"] / copies)


def kernel_seconds(m: int, n: int, k: int, us: float, l2_bytes: int) -> float:
    """GPU time one profiler measurement spends in kernels: its latency times its launches (warm-up, the
    graph's first replay and the timed replays)."""
    options = tuning.profile_options(m, n, k)
    per_graph = rotation(m, n, k, l2_bytes, options)[1]
    return us * 1e-6 * (options["warmup"] + per_graph * (options["replays"] + 1))


# ------------------------------------------------------------------------------------------------
# The simple baselines
# ------------------------------------------------------------------------------------------------


def bucket_choice(dtype: str, b_layout: str, m: int, n: int, k: int) -> str:
    """Candidate key of the M-bucket heuristic's variant (``_C.bucket_variant``: the first compiled bucket of
    [fallback] in cutlass_configs/ that holds M, else the first compiled non-library variant), data-parallel with
    default micro parameters; without one, what wavetune.gemm launches without a table (default_variant)."""
    variant = _C.bucket_variant(dtype, b_layout, m, n, k)
    if variant < 0:
        variant = _C.default_variant(dtype, b_layout, m, n, k)
    return Candidate(api.configs_by_id()[variant]).key


def default_choice(dtype: str, b_layout: str) -> str:
    """Candidate key of the single-config baseline."""
    return f"{dtype}_b{b_layout}_{DEFAULT_VARIANT}/data_parallel/1"


# ------------------------------------------------------------------------------------------------
# Learned cost models: trained on the anchor measurements wavetune's model is fitted on
# ------------------------------------------------------------------------------------------------

FEATURES = (
    "M", "N", "K", "log2 M", "log2 N", "log2 K",
    "tile M", "tile N", "tile K", "cluster M", "cluster N", "swap AB", "cooperative",
    "split-K", "stream-K", "splits",
    "G", "L", "C", "waves", "last wave fill", "log2 G*L",
    "log2 operand bytes", "log2 tile bytes loaded", "log2 flops", "flops per operand byte",
)


def features(m: int, n: int, k: int, c: Candidate, coordinates: tuple[int, int, int, int]) -> list[float]:
    """One (problem, config) row for the learned models, in FEATURES order: the problem, the config, its
    mapping (G, L, C, waves: ``c.coordinates``), and the work (bytes, flops) it implies."""
    v = c.variant
    g, l, cap, w = coordinates
    operand_bytes = 2 * (m * k + n * k + m * n)
    tile_bytes = g * l * (v.tile[0] + v.tile[1]) * v.tile[2] * 2  # A and B tiles streamed into shared memory
    flops = 2 * m * n * k
    return [
        m, n, k, math.log2(m), math.log2(n), math.log2(k),
        *v.tile, *v.cluster, float(v.swap_ab), float(v.schedule == "cooperative"),
        float(c.decomposition == "split_k"), float(c.decomposition == "stream_k"), c.splits,
        g, l, cap, w, (g - (w - 1) * cap) / cap, math.log2(g * l),
        math.log2(operand_bytes), math.log2(tile_bytes), math.log2(flops), flops / operand_bytes,
    ]


LEARNED_MODELS = ("HistGradientBoosting", "DecisionTree")


def make_learned_model(name: str):
    """An untrained scikit-learn regressor (library defaults, fixed seed) for log latency."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.tree import DecisionTreeRegressor

    return {"HistGradientBoosting": HistGradientBoostingRegressor, "DecisionTree": DecisionTreeRegressor}[name](
        random_state=0)


# ------------------------------------------------------------------------------------------------
# NVIDIA's analytic heuristic (nvidia-matmul-heuristics), mapped onto wavetune's candidates
# ------------------------------------------------------------------------------------------------

# nvMatmulHeuristics' predefined GPUs by the CUDA device name, most specific first.
NVMMH_GPUS = (("H100 PCIe", "H100_PCIE"), ("H100 NVL", "H100_NVL"), ("H100", "H100_SXM"), ("H200", "H200_SXM"),
              ("H20", "H20_SXM"))


def nvmmh_gpu(device_name: str) -> str | None:
    """The nvMatmulHeuristics GPU enum name for a CUDA device name, or None when it has none."""
    return next((gpu for key, gpu in NVMMH_GPUS if key in device_name), None)


def problem_shape(c: Candidate) -> tuple[int, int, int, int, int]:
    """(tile M, tile N, tile K, cluster M, cluster N) of a candidate along the problem's M and N: a
    swap-AB kernel's tile M runs over the problem's N, and its tile N over the tokens."""
    (tm, tn, tk), (cm, cn) = c.variant.tile, c.variant.cluster
    return (tn, tm, tk, cn, cm) if c.variant.swap_ab else (tm, tn, tk, cm, cn)


def nearest_candidate(tile: tuple[int, int, int], cluster: tuple[int, int], split_k: int,
                      cands: list[Candidate]) -> Candidate:
    """The candidate closest to an nvMatmulHeuristics config (problem-oriented CTA tile and cluster, split-K).

    Distance: the sum over tile M, N, K, cluster M, N and the split count (1 for data-parallel) of
    |log2(ours / theirs)|. Stream-K candidates are never a match (nvMatmulHeuristics returns a split-K
    factor, not a stream-K decomposition). Ties go to the non-swapped kernel (its tiles read literally),
    then to the first in ``cands`` (variant id order).
    """
    theirs = (*tile, *cluster, max(split_k, 1))

    def distance(c: Candidate) -> tuple[float, bool]:
        ours = (*problem_shape(c), c.splits)
        return sum(abs(math.log2(a / b)) for a, b in zip(ours, theirs)), c.variant.swap_ab

    return min((c for c in cands if c.decomposition != "stream_k"), key=distance)


class NvMatmulHeuristics:
    """nvMatmulHeuristics' top choice for a problem, on a predefined GPU (no GPU needed to query it), or
    on the current CUDA device where ``gpu`` is None.

    ``restrict_to``: candidates whose (tile, cluster) shapes bound the search, through the library's
    validity callback (as PyTorch Inductor does with its own kernels); None: any kernel it knows.
    """

    def __init__(self, gpu: str | None, dtype: str, b_layout: str, restrict_to: list[Candidate] | None = None):
        import nvMatmulHeuristics as nvmmh

        self.heuristics = nvmmh.NvMatmulHeuristicsInterfaceEx(
            backend=nvmmh.NvMatmulHeuristicsTarget.CUTLASS3,
            flags=nvmmh.NvMatmulHeuristicsFlags.PERF_MODEL_BASED_AUTO_TUNING,
            gpu=nvmmh.NvMatmulHeuristicsNvidiaGpu[gpu] if gpu else None)
        self.precision = {"bf16": "TST", "fp16": "HSH"}[dtype]  # A/B, accumulator (fp32), D
        # Row-major storage; col-major B is the nn.Linear weight W[N, K] read transposed ("NT").
        self.layout = nvmmh.NvMatmulHeuristicsMatmulLayout[{"col": "NT_ROW_MAJOR", "row": "NN_ROW_MAJOR"}[b_layout]]
        self.backend = None
        if restrict_to is not None:
            allowed = {problem_shape(c) for c in restrict_to}

            def valid(config, _problem) -> int:
                c = config.contents
                return int((c.cta[0], c.cta[1], c.cta[2], c.cluster[0], c.cluster[1]) in allowed)

            self.backend = self.heuristics.createBackend(nvmmh.NvMatmulHeuristicsTarget.CUTLASS3)
            self.heuristics.setBackendCallbackProperty(
                self.backend, nvmmh.NvMatmulHeuristicsBackendPropertyCallbackKind.KERNEL_ADDITIONAL_VALIDITY_CHECK,
                valid)

    def top(self, m: int, n: int, k: int) -> dict | None:
        """{"tile", "cluster", "split_k", "us"} of the first config it returns, or None when it returns none."""
        problem = self.heuristics.makeNvMatmulHeuristicsProblem(m, n, k, self.layout)
        if self.backend is None:
            found = self.heuristics.get(problem, 1, precision=self.precision)
        else:
            found = self.heuristics.getEx(problem, 1, self.backend, precision=self.precision)
        if not found:
            return None
        c = found[0]["kernel"]
        return {"tile": (c.cta_tile_m, c.cta_tile_n, c.cta_tile_k), "cluster": (c.cluster_m, c.cluster_n),
                "split_k": c.split_k, "us": found[0]["runtime"] * 1e6}


# ------------------------------------------------------------------------------------------------
# The finalists a benchmark times again (benchmarks/vs_cublas.py)
# ------------------------------------------------------------------------------------------------


def pick_finalists(screened: dict[str, float], cands: list[Candidate], count: int) -> list[Candidate]:
    """The ``count`` fastest screened candidates, then every library candidate (cuBLAS) not among them."""
    by_key = {c.key: c for c in cands}
    ranked = list(screened)[:count]
    ranked += [key for key in screened if by_key[key].variant.from_library and key not in ranked]
    return [by_key[key] for key in ranked]


# ------------------------------------------------------------------------------------------------
# How accurate a model has to be (benchmarks/required_accuracy.py): the measurements with known noise
# ------------------------------------------------------------------------------------------------


SIGMAS = (0.0, 0.025, 0.05, 0.075, 0.1, 0.125, 0.15)
MARGINS = (0.0, 0.05, 0.1, 0.2)


def noisy_choices(times: np.ndarray, prior: np.ndarray, sigma: float, margin: float,
                  rng: np.random.Generator) -> np.ndarray:
    """Per shape (row of ``times``, us per config), the config a model with log-normal error ``sigma``
    chooses: the fastest prediction, unless the shape's prior is predicted within ``margin`` of it."""
    predicted = times * np.exp(rng.normal(0.0, sigma, times.shape))
    rows = np.arange(len(times))
    fastest = predicted.argmin(axis=1)
    keep_prior = predicted[rows, prior] <= (1 + margin) * predicted[rows, fastest]
    return np.where(keep_prior, prior, fastest)


def simulate(times: np.ndarray, prior: np.ndarray, sigmas=SIGMAS, margins=MARGINS, draws: int = 20,
             seed: int = 0) -> list[dict]:
    """For each (sigma, margin): the geomean and worst choice / oracle ratio over the shapes, each the mean
    over ``draws`` noise draws, and the relative error |predicted - measured| / measured the noise means
    (median, p90). ``times`` may hold inf where a config cannot run a shape."""
    rng = np.random.default_rng(seed)
    oracle = times.min(axis=1)
    rows = np.arange(len(times))
    z = rng.normal(0.0, 1.0, 100_000)
    results = []
    for sigma in sigmas:
        implied = np.abs(np.expm1(sigma * z))
        for margin in margins:
            geomeans, worsts = [], []
            for _ in range(draws if sigma > 0 else 1):
                ratio = oracle / times[rows, noisy_choices(times, prior, sigma, margin, rng)]
                geomeans.append(float(np.exp(np.log(ratio).mean())))
                worsts.append(float(ratio.min()))
            results.append({"sigma": sigma, "margin": margin, "geomean": float(np.mean(geomeans)),
                            "worst": float(np.mean(worsts)), "error_median": float(np.median(implied)),
                            "error_p90": float(np.percentile(implied, 90))})
    return results


def measured_times(records: dict, shapes: list[tuple], dtype: str, b_layout: str
                   ) -> tuple[list[tuple], list[str], np.ndarray]:
    """(shapes, config keys, us[shape, config]): each config's fastest measured launch (any raster and
    swizzle) on the shapes where every config of the log was measured at default micro parameters;
    inf where a config cannot run the shape."""
    wanted = set(shapes)
    by_shape: dict[tuple, dict[str, float]] = {}
    for (dt, layout, m, n, k, config, raster, swizzle), us in records.items():
        if (dt, layout) != (dtype, b_layout) or (m, n, k) not in wanted:
            continue
        launches = by_shape.setdefault((m, n, k), {})
        if (raster, swizzle) == ("heuristic", 1):
            launches.setdefault(config, math.inf)
        if us is not None:
            launches[config] = min(launches.get(config, math.inf), us)
    configs = sorted({c for launches in by_shape.values() for c in launches})
    judged = [s for s in shapes if s in by_shape and len(by_shape[s]) == len(configs)]
    return judged, configs, np.array([[by_shape[s][c] for c in configs] for s in judged])


# ------------------------------------------------------------------------------------------------
# A deployment-tuned table judged at token counts its tuning never measured (benchmarks/deploy_quality.py)
# ------------------------------------------------------------------------------------------------


def unprofiled_ms(measured: set[int], max_m: int, count: int, rng: random.Random) -> list[int]:
    """``count`` distinct M in 1..max_m, log-uniform, none of them in ``measured`` (fewer if too few are left)."""
    left = max_m - len({m for m in measured if m <= max_m})
    out: set[int] = set()
    while len(out) < min(count, left):
        m = max(1, min(max_m, round(math.exp(rng.uniform(0.0, math.log(max_m))))))
        if m not in measured:
            out.add(m)
    return sorted(out)


def judge(selector, cands: list[Candidate], m: int, n: int, k: int, finalists: int) -> dict:
    """The table's choice against every config, interleaved in one profiler call, then against the
    fastest ``finalists`` of those in a second call."""
    choice = selector.select("bf16", "col", m, n, k)
    launch = (choice["variant"], _C.DECOMPOSITIONS.index(choice["decomposition"]), choice["splits"],
              _C.RASTERS.index(choice["raster"]), choice["max_swizzle"])
    problem = ("bf16", "col", m, n, k)
    times = tuning.profile(problem, [launch, launch] + [c.launch() for c in cands], seed=m * 31 + n, precise=True)
    timed = sorted((us, i) for i, us in enumerate(times[2:]) if not math.isnan(us))
    best_us, best = min([(us, cands[i].key) for us, i in timed] + [(times[0], "the choice")])
    finals = [cands[i] for _, i in timed if cands[i].launch() != launch][:finalists]
    final = tuning.profile(problem, [launch] + [c.launch() for c in finals], seed=m * 37 + n, precise=True)
    final_best_us, final_best = min([(us, c.key) for us, c in zip(final[1:], finals)] + [(final[0], "the choice")])
    key = f"{choice['name']}/{choice['decomposition']}/{choice['splits']}"
    return {"m": m, "n": n, "k": k, "source": choice["source"], "choice": key, "choice_us": times[0],
            "best": best, "best_us": best_us, "ratio": best_us / times[0], "repeat_us": times[1],
            "final_choice_us": final[0], "final_best": final_best, "final_ratio": final_best_us / final[0],
            "configs_us": {cands[i].key: round(us, 3) for us, i in timed}}


# ------------------------------------------------------------------------------------------------
# A table's configs launched as the profiler runs them (benchmarks/launch_context.py)
# ------------------------------------------------------------------------------------------------


def table_launches(table: dict, names: list[str], m: int, n: int, k: int) -> dict[str, tuple]:
    """Config key (':rule' kept) -> its profiler launch; ':rule' takes the table's micro rule at this M."""
    by_key = {c.key: (cid, c) for cid, c in deploy.table_candidates(table, "bf16", "col").items()}
    out = {}
    for name in names:
        key, rule = name.removesuffix(":rule"), name.endswith(":rule")
        cid, c = by_key[key]
        waves = c.coordinates(m, n, k, int(table["meta"]["sm_count"]))[3]
        out[name] = c.launch(*deploy.table_launch(table, cid, waves)[1:]) if rule else c.launch()
    return out


# ------------------------------------------------------------------------------------------------
# The decode GEMMs against cuBLAS (benchmarks/decode_gemm.py)
# ------------------------------------------------------------------------------------------------


def decode_summary(rows: list[dict]) -> str:
    """benchmarks/decode_gemm.py's report: wavetune and the best decode candidate against cuBLAS per M range,
    and the weights' read rate of the largest layers."""
    lines = []
    for label, lo, hi in DECODE_M_RANGES:
        part = [r for r in rows if lo <= r["m"] <= hi]
        if not part:
            continue
        worst = min(part, key=lambda r: r["speedup"])
        lines.append(f"M {label}: {len(part)} problems; wavetune {geomean([r['speedup'] for r in part]):.3f}x cuBLAS "
                     f"(min {worst['speedup']:.3f}: {worst['model']} tp{worst['tp']} {worst['layer']} M={worst['m']}), "
                     f"best decode candidate {geomean([r['best_speedup'] for r in part]):.3f}x")
    big = [r for r in rows if r["weight_mb"] >= 256]
    if big:
        median = statistics.median
        lines.append(f"weights >= 256 MB ({len(big)}): wavetune {median(r['wavetune_tbps'] for r in big):.2f} "
                     f"TB/s median (min {min(r['wavetune_tbps'] for r in big):.2f}), cuBLAS "
                     f"{median(r['cublas_tbps'] for r in big):.2f}, best decode "
                     f"{median(r['best_tbps'] for r in big):.2f}")
    return "\n".join(lines)

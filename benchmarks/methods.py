"""The parts of the peer comparison (benchmarks/compare.py) that need no GPU: shape suites, the measurement
log read back, the choices of the methods compared, and the report's statistics and tables.

Importing this module needs wavetune (its native module, no GPU) and numpy only. scikit-learn and
nvidia-matmul-heuristics are imported by the functions that use them, so tests of the rest run without.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from wavetune import _C
from wavetune.families.gemm import api
from wavetune.tuning import model
from wavetune.families.gemm import tuning
from wavetune.families.gemm.tuning import Candidate

# The M (token count) ranges the report summarises: decode, small batches, prefill chunks, long prefill.
M_RANGES = (("1-16", 1, 16), ("17-256", 17, 256), ("257-2048", 257, 2048), (">2048", 2049, math.inf),
            ("all", 1, math.inf))
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
    return Candidate(api._configs_by_name()[name], decomposition, int(splits))


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
    """Candidate key of the built-in M-bucket heuristic's variant ([fallback] in cutlass_configs/), as
    wavetune.gemm launches it without a table: data-parallel, default micro parameters."""
    return Candidate(api._configs_by_id()[_C.default_variant(dtype, b_layout, m, n, k)]).key


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
# Statistics and tables
# ------------------------------------------------------------------------------------------------


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(map(math.log, values)))


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

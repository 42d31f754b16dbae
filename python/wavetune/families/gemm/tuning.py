"""The dense GEMM's tuning: profile a sparse, wave-aware anchor plan per config, fit the latency model,
write the table.

    python -m wavetune tune --out tables/            # on the GPU the table is for
    python -m wavetune tune --out tables/ --devices 0,1,2,3   # the measurements spread over 4 GPUs of a host

Every measurement goes through the C++ profiler (``_C.profile``: CUDA-graph replays over operand copies
rotated so weights are read from DRAM) and is appended to a JSON-lines file stamped with the device, so
an interrupted run resumes where it stopped (``GemmLog``; ``wavetune.tuning.runner`` measures the plan,
here or over several GPUs). docs/model.md describes the method.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Iterable

import numpy as np

from ...runtime.configs import KernelConfig, resident_ctas
from ...runtime.device import build_info, package_version
from ...runtime.native import _C
from ...runtime import tables
from ...runtime.tables import open_table
from ...tuning import model, tablefile
from ...tuning.log import MeasurementLog
from ...tuning.runner import Measurer
from .api import configs

# Raster/swizzle options the second stage compares; ("heuristic", 1) is the default launch. The multistage
# variants take a swizzle only (CUTLASS 2.x's tile order has no raster option).
MICRO_OPTIONS = (("heuristic", 1), ("along_m", 2), ("along_n", 2), ("along_m", 8), ("along_n", 8))
SWIZZLE_OPTIONS = (("heuristic", 1), ("heuristic", 2), ("heuristic", 8))
MICRO_MIN_WAVE = 2  # one wave has no tile order to improve
# NOTES: the table keeps the built-in M-bucket default ([fallback] in cutlass_configs/) for a problem
# unless the model predicts another config more than this much faster: a smaller predicted gain is as
# often the model's error as a real one. With calibrated predictions 0.1 chose best on the tune split of
# benchmarks/shape_suite.py (0.2: 0.5% worse, none: 0.2% worse; docs/tuning.md); 0 turns the priors off.
PRIOR_MARGIN = 0.1
# NOTES: with cuBLAS among the configs it is the prior for every M, kept unless the model predicts a
# CUTLASS config more than 50% faster. On the H100's tune split (benchmarks/shape_suite.py, the library
# candidate, then launched through cuBLASLt, timed beside every config) the exhaustive best beat it by
# 2.2%, but the model's own picks ran at 0.972x it: its error (11% median, 31% p90) exceeds the gains it
# looks for. Margins 0, 0.1, 0.3, 0.5 and 1 gave choice/best 0.953, 0.958, 0.976, 0.977, 0.976 there
# (docs/model.md, section 7). Deployment
# tuning's exact entries, measured, take the catalog's gains where they exist.
LIBRARY_PRIOR_MARGIN = 0.5
# The decode GEMM's split counts the tables score beside its unsplit launch (its cluster holds up to 8),
# and the tokens it is for: its anchors and calibration shapes stay within them.
DECODE_SPLITS = (2, 4, 8)
DECODE_MAX_M = 64
DECODE_PLAN = dict(token_range=(1, DECODE_MAX_M))
STREAM_K_PLAN = dict(waves=(1,), fills=(1.0,), k_steps=(2, 4, 8, 16, 32, 64, 128, 256), interior=7)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A config the model scores: a compiled variant plus the decomposition that sets its G and L."""

    variant: KernelConfig
    decomposition: str = "data_parallel"
    splits: int = 1

    @property
    def key(self) -> str:
        return f"{self.variant.name}/{self.decomposition}/{self.splits}"

    def coordinates(self, m: int, n: int, k: int, sm_count: int) -> tuple[int, int, int, int]:
        """(G, L, C, waves) from the C++ mapping, the one definition."""
        return _C.map_problem(self.variant.id, m, n, k, _C.DECOMPOSITIONS.index(self.decomposition),
                              self.splits, sm_count, ctas_per_sm(self.variant))

    @property
    def micro_options(self) -> tuple[tuple[str, int], ...]:
        """The (raster, max_swizzle) launches the second stage compares for it."""
        return SWIZZLE_OPTIONS if self.variant.schedule == "multistage" else MICRO_OPTIONS

    def launch(self, raster: str = "heuristic", max_swizzle: int = 1) -> tuple[int, int, int, int, int]:
        return (self.variant.id, _C.DECOMPOSITIONS.index(self.decomposition), self.splits,
                _C.RASTERS.index(raster), max_swizzle)


def ctas_per_sm(variant: KernelConfig) -> int:
    """CTAs of a variant resident per SM of the GPU being tuned: the log's record, else the current GPU's
    (``runtime.configs.resident_ctas``)."""
    return resident_ctas(variant, _C.gemm_ctas_per_sm)


def occupancy_records(cands: list[Candidate]) -> dict[int, int]:
    """A table's ``occupancy`` records for configs ``cands`` (config id = position): their CTAs per SM here."""
    return {i: ctas_per_sm(c.variant) for i, c in enumerate(cands)}


def candidates(dtype: str = "bf16", b_layout: str = "col") -> list[Candidate]:
    """Every config the tables score for one dtype and B layout.

    Persistent variants run data-parallel; stream-K variants run stream-K, and data-parallel too where
    the build has no persistent twin of theirs (with one, that mode would duplicate it).

    NOTES: split-K is left out of the tables. On the H100 and the H200 the best split-K launch of a
    suite shape was never more than 0.05% (geomean) ahead of the best launch without it, stream-K
    covers the same shapes (few tiles, long K), and the model mispredicts split-K's partial-sum
    traffic: with it, choices were worse (docs/tuning.md). It stays available to explicit launches.
    The decode GEMM is the exception: its splits are one cluster summed on chip, and each split count
    is a config of its own (DECODE_SPLITS).
    """
    variants = [v for v in configs() if v.dtype == dtype and v.b_layout == b_layout]
    persistent = {v.name for v in variants if v.scheduler == "persistent"}
    out = []
    for v in variants:
        twin = v.name.removesuffix("_stream_k") + "_persistent"
        if v.scheduler != "stream_k" or twin not in persistent:
            out.append(Candidate(v))
        if v.scheduler == "stream_k":
            out.append(Candidate(v, "stream_k"))
        if v.schedule == "decode" and v.scheduler == "data_parallel":
            out += [Candidate(v, "split_k", s) for s in DECODE_SPLITS]
    return out


PRECISE_REPLAYS = 7


def profile_options(m: int, n: int, k: int, precise: bool = False) -> dict:
    """Fewer launches for long kernels: the tuning budget is GPU time. ``precise``: PRECISE_REPLAYS
    replays for every kernel, each right after an untimed launch of its own, for measurements that decide
    a choice alone (deployment tuning, its judge).

    NOTES: two launches of one cuBLAS kernel in one interleaved call, each the median of 3 replays, differed
    by up to 6% (M = 14350, N = 6144, K = 4096; docs/results.md#deploy_quality_llama3-8b_h100_3replays.jsonl,
    NVIDIA H100, 2026-11-24): too noisy to rank configs a few percent apart, which an exact range does.
    The profiler interleaves a call's launches round by round, so each replay starts from the power and
    clock state its predecessor left: at M = 8324, N = 4096, K = 14336 on an H100 the same 52 launches
    timed the stream-K 128x192 tile at 0.88-0.92x cuBLAS's time in one order and at 1.06-1.07x reversed
    (docs/results.md#launch_order_h100.jsonl, 2026-11-24), enough to reverse a choice. Each preceded by a
    launch of its own, the two orders gave 1.04-1.07x and 1.08-1.10x.
    """
    long_kernel = 2.0 * m * n * k > 2e11  # above ~0.3 ms on an H100
    replays = PRECISE_REPLAYS if precise else 3 if long_kernel else 5
    return dict(warmup=1 if long_kernel else 3, replays=replays, min_launches=2 if long_kernel else 8,
                lead_in=1 if precise else 0)


def profile(problem: tuple, launches: list[tuple], seed: int, precise: bool = False) -> list[float]:
    """``_C.profile`` of ``launches`` on ``problem`` (dtype, b_layout, m, n, k), weights cold: median us of
    each, NaN where one cannot run; ``precise``: as ``profile_options`` says."""
    dtype, b_layout, m, n, k = problem
    return _C.profile(m, n, k, _C.DTYPES.index(dtype), _C.B_LAYOUTS.index(b_layout), launches, cold_bytes=0,
                      seed=seed, **profile_options(m, n, k, precise))


class GemmLog(MeasurementLog):
    """Profiled latencies of dense problems (``wavetune.tuning.log``): one record per (problem, config,
    raster, max_swizzle), its median us or null where the config cannot run the problem.

    Opening an existing log on another GPU or build is refused; records already there are not measured
    again, which makes tuning resumable. ``offline``: the device is the log's own and nothing is measured
    (refitting a table from its log, on any machine with the same build). ``precise``: every measurement
    by ``profile``, precise. ``device``: the GPU's properties, probed elsewhere (a multi-GPU run).
    """

    def __init__(self, path: Path, offline: bool = False, precise: bool = False, device: dict | None = None):
        self.precise = precise  # profile's
        precise_timing = f"; {PRECISE_REPLAYS} replays, each right after an untimed launch of its own"
        super().__init__(path, "gemm", offline, device, TIMING + (precise_timing if precise else ""))

    @staticmethod
    def key_of(record: dict) -> tuple:
        return GemmLog._key(record["problem"], record["config"], record["raster"], record["max_swizzle"])

    @staticmethod
    def value_of(record: dict) -> float | None:
        return record["us"]

    @staticmethod
    def _key(problem, config: str, raster: str, max_swizzle: int) -> tuple:
        return (*problem, config, raster, max_swizzle)

    def get(self, problem, c: Candidate, raster="heuristic", max_swizzle=1) -> float | None:
        return self.records.get(self._key(problem, c.key, raster, max_swizzle))

    def fastest_compute(self, dtype: str, b_layout: str) -> float | None:
        """The largest 2*M*N*K per us of any problem the log holds for ``dtype`` and ``b_layout`` (every
        config, default launch; the large calibration shapes included): the table's ``compute`` record."""
        rates = [2.0 * m * n * k / us for (d, layout, m, n, k, _, raster, swizzle), us in self.records.items()
                 if us and (d, layout, raster, swizzle) == (dtype, b_layout, "heuristic", 1)]
        return max(rates, default=None)

    def has(self, problem, c: Candidate, raster="heuristic", max_swizzle=1) -> bool:
        """Whether the run is logged, with a time or as unable to run the problem."""
        return self._key(problem, c.key, raster, max_swizzle) in self.records

    def measure(self, problem: tuple, runs: list[tuple[Candidate, str, int]]) -> None:
        """Profile the (candidate, raster, max_swizzle) runs on one problem that are not logged yet (a run
        logged as unable to run the problem is not tried again)."""
        missing = [run for run in runs if not self.has(problem, *run)]
        if not missing:
            return
        if self.offline:
            raise ValueError(f"{self.path} lacks {len(missing)} planned measurements of {problem}, e.g. "
                             f"{missing[0][0].key}: refit offline only from a log of the same plan")
        start = time.perf_counter()
        times = profile(problem, [c.launch(raster, swizzle) for c, raster, swizzle in missing],
                        seed=len(self.records) + 1, precise=self.precise)
        self.gpu_seconds += time.perf_counter() - start
        self.measured += len(missing)
        self.add({"problem": list(problem), "config": c.key, "raster": raster, "max_swizzle": swizzle,
                  "us": None if math.isnan(us) else us} for (c, raster, swizzle), us in zip(missing, times))


TIMING = ("median of CUDA-graph replays (C++ profiler), warm-up first, the configs of a problem interleaved "
          "round by round, operand copies rotated to exceed twice the L2 so weights are read cold; fresh "
          "uniform [-1, 1) operands")


def suite_shapes(path: str | Path, models: str | None = None) -> list[tuple[int, int, int]]:
    """(M, N, K) of a shape-suite JSON ({"M": [...], "models": {name: {layer: [N, K]}}}), optionally
    only the comma-separated ``models``; or of a list of {"m", "n", "k"} rows (benchmarks/shape_suite.py)."""
    suite = json.loads(Path(path).read_text())
    if isinstance(suite, list):
        return [(int(s["m"]), int(s["n"]), int(s["k"])) for s in suite]
    names = models.split(",") if models else list(suite["models"])
    nks = sorted({tuple(nk) for name in names for nk in suite["models"][name].values()})
    return [(m, n, k) for n, k in nks for m in suite["M"]]


# NOTES: the anchors say how a config's time grows with G and L; the calibration shapes say how far that
# (G, L) law is from the truth on problems shaped like LLM layers, where operand aspect, L2 reuse and
# partial tiles move the time at the same (G, L) (docs/model.md, section 9). They are generic, not any
# model's: N and K log-uniform over LLM layer sizes in multiples of 128, tensor-parallel slices included
# (N 256-131072, K 128-32768), M log-uniform over 1-16384 with odd values, each problem at most
# CALIBRATION_MAX_FLOP so the stage stays a few GPU-seconds per config.
CALIBRATION_SHAPES = 192
CALIBRATION_SEED = 20261123
CALIBRATION_MAX_FLOP = 2e12


def calibration_shapes(count: int = CALIBRATION_SHAPES, seed: int = CALIBRATION_SEED) -> list[tuple[int, int, int]]:
    """``count`` generic LLM-like problems (m, n, k), the same for the same arguments."""
    rng = np.random.default_rng(seed)

    def log_uniform(lo: float, hi: float) -> float:
        return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))

    shapes = []
    while len(shapes) < count:
        n = 128 * max(1, round(log_uniform(256, 131072) / 128))
        k = 128 * max(1, round(log_uniform(128, 32768) / 128))
        m = max(1, round(log_uniform(1, 16384)))
        if 2.0 * m * n * k <= CALIBRATION_MAX_FLOP:
            shapes.append((m, n, k))
    return shapes


@functools.cache
def config_anchors(c: Candidate, sm_count: int) -> tuple[tuple[int, int, int, int], ...]:
    """(m, n, k, wave) of one candidate's anchors: ``model.plan_anchors_detailed`` through its mapping."""
    # Stream-K always runs one wave (G = C): sample that wave densely in L instead. The decode GEMM is
    # sampled within the tokens it serves.
    options = {}
    if c.decomposition == "stream_k":
        options = STREAM_K_PLAN
    elif c.variant.schedule == "decode":
        options = DECODE_PLAN
    detailed = model.plan_anchors_detailed(lambda m, n, k: c.coordinates(m, n, k, sm_count), **options)
    return tuple((a["m"], a["n"], a["k"], a["w"]) for a in detailed)


def anchor_plan(cands: list[Candidate], sm_count: int, waves: Iterable[int] = model.PLAN_WAVES
                ) -> dict[tuple[int, int, int], list[Candidate]]:
    """Shape -> the candidates anchored there: the sparse, wave-aware sampling plan (docs/model.md),
    restricted to the anchors of ``waves``. The targets of one wave do not depend on which other waves
    are planned, so a plan of fewer waves is a subset of the full one (and resumes from its log)."""
    waves = set(waves)
    plan: dict[tuple[int, int, int], list[Candidate]] = defaultdict(list)
    for c in cands:
        for m, n, k, w in config_anchors(c, sm_count):
            if w in waves:
                plan[(m, n, k)].append(c)
    return plan


def planned_measurements(plan: dict, sm_count: int, micro: bool = True) -> int:
    """How many (shape, config, raster, swizzle) runs ``tune`` makes for ``plan`` on an empty log."""
    anchors = sum(map(len, plan.values()))
    if not micro:
        return anchors
    return anchors + sum(1 for runs in micro_runs(plan, sm_count).values() for _, raster, swizzle in runs
                         if (raster, swizzle) != MICRO_OPTIONS[0])  # the default run is the anchor itself


def budget_plan(cands: list[Candidate], sm_count: int, budget: int | None, micro: bool = True
                ) -> tuple[dict, tuple[int, ...]]:
    """The plan of at most ``budget`` measurements, and its waves: the full plan if it fits (or
    ``budget`` is None), else whole wave regimes are dropped (``model.thin_waves``) until it fits. The
    model bridges the dropped regimes as it does any unprofiled wave (docs/model.md, section 4)."""
    waves = model.PLAN_WAVES
    while True:
        plan = anchor_plan(cands, sm_count, waves)
        needed = planned_measurements(plan, sm_count, micro)
        if budget is None or needed <= budget:
            return plan, waves
        thinner = model.thin_waves(waves)
        if thinner == waves:
            raise ValueError(f"a budget of {budget} measurements is below the smallest plan: {needed} for "
                             f"{len(cands)} configs at waves {waves}")
        waves = thinner


def fit_candidates(log: GemmLog, cands: list[Candidate], plan: dict, dtype: str, b_layout: str,
                   sm_count: int) -> dict[str, dict[int, list[float]]]:
    """Per candidate and wave, the bilinear coefficients fitted to its anchors."""
    points: dict[str, list[tuple[int, int, int, float]]] = defaultdict(list)
    for (m, n, k), cs in plan.items():
        for c in cs:
            us = log.get((dtype, b_layout, m, n, k), c)
            if us is not None:
                g, l, _, w = c.coordinates(m, n, k, sm_count)
                points[c.key].append((g, l, w, us))
    fits = {}
    for c in cands:
        if len(points[c.key]) >= 2:
            g, l, w, t = (list(col) for col in zip(*points[c.key]))
            fits[c.key] = model.fit_config(g, l, w, t)
    return fits


def fastest_rate(log: GemmLog, plan: dict, dtype: str, b_layout: str, traffic) -> float | None:
    """The largest ``traffic(c, m, n, k)`` bytes per us among the anchors: the table's ``memory`` record
    with operand bytes, its ``traffic`` record with tile traffic."""
    rates = [traffic(c, m, n, k) / us for (m, n, k), cs in plan.items() for c in cs
             if (us := log.get((dtype, b_layout, m, n, k), c)) is not None]  # fmt: skip
    return max(rates, default=None)


def operand_traffic(c: Candidate, m: int, n: int, k: int) -> float:
    return model.operand_bytes(m, n, k)


def tile_traffic(sm_count: int):
    """``fastest_rate``'s traffic function for tile traffic on a GPU of ``sm_count`` SMs."""
    def traffic(c: Candidate, m: int, n: int, k: int) -> float:
        if c.variant.from_library:
            return 0.0  # its tile is nominal: the traffic of the tiles cuBLAS runs is unknown
        G, L, _, _ = c.coordinates(m, n, k, sm_count)
        return model.tile_traffic_bytes(G, L, c.variant.tile)
    return traffic


def tune(out: Path, log_path: Path, dtype: str = "bf16", b_layout: str = "col",
         exact_shapes: list[tuple[int, int, int]] = (), micro: bool = True, budget: int | None = None,
         offline: bool = False, measure: Measurer | None = None) -> Path:
    """Profile the plan (and the exact shapes), fit, keep the working set, calibrate it on
    ``calibration_shapes``, and write ``out/<gpu-slug>.wtt``. ``budget`` caps the plan's measurements
    (``budget_plan``) and the calibration takes what it leaves; the exact shapes come on top of it. ``offline``: measure
    nothing, refit from the log (``GemmLog``). ``measure``: how the plan is measured (default: here, on the
    current GPU; ``wavetune.tuning.runner``)."""
    measure = measure or Measurer("gemm")
    log = GemmLog(log_path, offline, device=measure.device)
    logged = len(log.records)
    sm_count = log.device["sm_count"]
    cands = candidates(dtype, b_layout)
    if all(c.variant.from_library for c in cands):  # a table of the library alone has nothing to choose
        raise ValueError(f"no compiled CUTLASS {dtype} variant with {b_layout}-major B to tune")
    plan, waves = budget_plan(cands, sm_count, budget, micro)
    print(f"{log.device['name']}: {len(cands)} configs, {sum(map(len, plan.values()))} anchor measurements "
          f"on {len(plan)} shapes at waves {', '.join(map(str, waves))}; "
          f"{planned_measurements(plan, sm_count, micro)} measurements with the raster/swizzle stage")
    measure(log, [make_job((dtype, b_layout, *shape), [(c, "heuristic", 1) for c in plan[shape]]) for shape in sorted(plan)],
            "anchors")
    fits = fit_candidates(log, cands, plan, dtype, b_layout, sm_count)

    micro_rules = {}
    if micro:
        micro_rules = second_stage(log, plan, dtype, b_layout, sm_count, measure)

    exact = []
    # NOTES: as in the calibration, the decode GEMM only within the tokens it serves: past them it reads the weights
    # once per token tile of 8-64 (256-2048 times at 16384 tokens), so its configs' timings would outlast the rest.
    measure(log, [make_job((dtype, b_layout, *shape), [(c, "heuristic", 1) for c in cands if serves(c, shape[0])])
                  for shape in exact_shapes], "exact shapes")
    for shape in exact_shapes:
        problem = (dtype, b_layout, *shape)
        timed = [(log.get(problem, c), i) for i, c in enumerate(cands) if log.get(problem, c) is not None]
        if timed:
            us, best = min(timed)
            exact.append((shape, best, us))

    kept = [c for c in cands if c.key in fits]
    meta = {
        "gpu_name": log.device["name"], "sm_count": sm_count, "l2_bytes": log.device["l2_bytes"],
        "config_space_hash": build_info()["config_space_hash"],
        "wavetune_version": package_version(), "cuda_version": build_info()["cuda_version"],
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "timing": TIMING, "source": f"{dtype} {b_layout}: {len(plan)} anchor shapes",
        "plan_waves": ",".join(map(str, waves)),
    }
    exact_records = [(shape, cands[best], us) for shape, best, us in exact]
    path = Path(out) / f"{tables.table_slug(log.device['name'])}.wtt"
    table = dict(meta=meta, fits=fits, micro_rules=micro_rules, exact=exact_records, dtype=dtype, b_layout=b_layout,
                 memory=fastest_rate(log, plan, dtype, b_layout, operand_traffic),
                 traffic=fastest_rate(log, plan, dtype, b_layout, tile_traffic(sm_count)))
    write_tuned_table(path, kept, **table)
    working = working_set(path, dtype, b_layout) | {c.key for _, c, _ in exact_records}
    kept = [c for c in kept if c.key in working]
    shapes = calibration_shapes()
    if budget is not None:  # what the plan leaves of the budget
        shapes = shapes[:max(0, budget - planned_measurements(plan, sm_count, micro)) // max(1, len(kept))]
    measure(log, [make_job((dtype, b_layout, *shape), [(c, "heuristic", 1) for c in kept if serves(c, shape[0])])
                  for shape in shapes], "calibration")
    write_tuned_table(path, kept, **table)
    # The compute floor bounds calibrated predictions, so the calibration is fitted without it.
    write_tuned_table(path, kept, **table, calibration=calibration(log, path, shapes, dtype, b_layout),
                      compute=log.fastest_compute(dtype, b_layout))
    seconds = f" in {log.gpu_seconds:.1f} GPU-seconds" if log.measured else ""
    print(f"wrote {path}: {len(kept)} configs (the working set), {len(exact)} exact shapes; this run measured "
          f"{len(log.records) - logged} configs{seconds} (log: {log.path})")
    return path


def serves(c: Candidate, m: int) -> bool:
    """Whether ``c`` is meant for ``m`` tokens: the decode GEMM is for up to DECODE_MAX_M."""
    return c.variant.schedule != "decode" or m <= DECODE_MAX_M


def calibration(log: GemmLog, path: Path, shapes: list[tuple[int, int, int]], dtype: str, b_layout: str
                ) -> dict[str, list[float]]:
    """Config key -> its calibration coefficients (``model.fit_calibration``): the measured latencies on the
    calibration ``shapes`` over the written table's predictions there (floors included, no calibration)."""
    selector = open_table(path)
    by_key = {c.key: c for c in candidates(dtype, b_layout)}
    points: dict[str, list] = defaultdict(list)
    for shape in shapes:
        for p in selector.explain(dtype, b_layout, *shape):
            us = log.get((dtype, b_layout, *shape), by_key[p["name"]])
            if us is not None:
                points[p["name"]].append((shape, us / p["predicted_us"]))
    return {key: model.fit_calibration(*zip(*pts)) for key, pts in points.items()}


def write_tuned_table(path: Path, kept: list[Candidate], *, meta: dict, fits: dict, micro_rules: dict,
                      exact: list, dtype: str, b_layout: str, memory: float | None, traffic: float | None,
                      calibration: dict | None = None, compute: float | None = None) -> None:
    """A table of the ``kept`` configs (ids are positions in it); exact shapes of other configs are dropped."""
    index = {c.key: i for i, c in enumerate(kept)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tablefile.write_table(
        path, meta=meta,
        configs=[{"variant": c.variant.name, "decomposition": c.decomposition, "splits": c.splits} for c in kept],
        waves={index[c.key]: fits[c.key] for c in kept},
        micro={index[key]: rules for key, rules in micro_rules.items() if key in index},
        exact=[{"dtype": dtype, "b_layout": b_layout, "m_first": m, "m_last": m, "n": n, "k": k,
                "config_id": index[c.key], "raster": "heuristic", "max_swizzle": 1, "us": us}
               for (m, n, k), c, us in exact if c.key in index],  # a profiled shape: a range of one M
        priors=prior_records(kept, dtype, b_layout),
        memory_bytes_per_us=memory,
        traffic_bytes_per_us=traffic,
        calibration={index[key]: coef for key, coef in (calibration or {}).items() if key in index},
        compute_flop_per_us=compute,
        occupancy=occupancy_records(kept),
    )


# NOTES: the working set is chosen on a generic grid: N and K from 256 to 64K, every M up to 64 and then
# about 6% apart up to 16384, odd values included. It is not a shape suite, so no suite decides what the
# `tables` kernel set compiles. Variants are dropped one at a time, the one whose loss of predicted speed over
# the grid is least, while the grid's geomean loss stays within WORKING_SET_GEOMEAN_LOSS of the whole
# catalog and no point loses more than WORKING_SET_WORST_LOSS: many tiles differ by a step of 16 tokens
# and win by a percent or two, less than the model's error, and each costs a compile in every install.
WORKING_SET_NK = (256, 512, 1024, 1536, 2048, 3072, 4096, 5120, 6144, 8192, 10240, 12288, 14336, 16384,
                  20480, 24576, 28672, 32768, 49152, 65536)


def geometric_ms(first: int, ratio: float, last: int) -> list[int]:
    """first, first * ratio, first * ratio^2, ... rounded, up to about ``last`` (>= first)."""
    steps = math.floor(math.log(last / first) / math.log(ratio)) + 1
    return [round(first * ratio**i) for i in range(steps)]


def token_counts(max_m: int) -> list[int]:
    """Every M up to 64, then about 6% apart, and ``max_m``: token counts as a batcher produces them, odd
    values included (the working-set grid, deployment tuning's probes)."""
    return sorted({m for m in (*range(1, 65), *geometric_ms(64, 1.06, max(max_m, 64))) if m < max_m} | {max_m})


WORKING_SET_M = tuple(token_counts(16384))
WORKING_SET_GEOMEAN_LOSS = 0.005
WORKING_SET_WORST_LOSS = 0.05


def grid_predictions(path: Path, dtype: str, b_layout: str, nk: Iterable[int] = WORKING_SET_NK,
                     ms: Iterable[int] = WORKING_SET_M) -> tuple[list[str], np.ndarray]:
    """Config keys of a written table and their predicted us (columns) at every (n, k, m) of the grid (rows)."""
    selector = open_table(path)
    keys = [p["name"] for p in selector.explain(dtype, b_layout, 1, 8, 8)]
    column = {key: i for i, key in enumerate(keys)}
    problems = [(m, n, k) for n in nk for k in nk for m in ms]
    times = np.full((len(problems), len(keys)), np.inf)
    for row, problem in enumerate(problems):
        for p in selector.explain(dtype, b_layout, *problem):
            times[row, column[p["name"]]] = p["predicted_us"]
    return keys, times


def prune_variants(keys: list[str], times: np.ndarray, required: set[str]) -> set[str]:
    """Variant names left after dropping, one at a time, the variant (not in ``required``) whose loss is
    least, while the loss against all of them stays within the working-set bounds."""
    names = sorted({key.split("/")[0] for key in keys})
    if len(names) < 2:
        return set(names)  # nothing to drop: a variant is only dropped for another
    variant_of = np.array([key.split("/")[0] for key in keys])
    best = np.stack([times[:, variant_of == v].min(axis=1) for v in names], axis=1)  # per variant
    best = best[np.isfinite(best.min(axis=1))]
    floor = np.log(best.min(axis=1))
    alive = np.ones(len(names), bool)
    while True:
        live = np.where(alive, best, np.inf)
        first = live.argmin(axis=1)
        top_two = np.log(np.partition(live, 1, axis=1)[:, :2]) - floor[:, None]
        losses = {v: np.where(first == v, top_two[:, 1], top_two[:, 0]) for v in np.flatnonzero(alive)
                  if names[v] not in required}
        bearable = {v: loss.mean() for v, loss in losses.items()
                    if loss.mean() <= WORKING_SET_GEOMEAN_LOSS and loss.max() <= WORKING_SET_WORST_LOSS}
        if not bearable:
            return {names[v] for v in np.flatnonzero(alive)}
        alive[min(bearable, key=bearable.get)] = False


def working_set(path: Path, dtype: str, b_layout: str, **grid) -> set[str]:
    """Keys of a written table's configs whose variants survive ``prune_variants`` on the grid (``grid``:
    ``grid_predictions``'s); the built-in default's variants, the decode GEMM's (compiled in every build)
    and cuBLAS (no compile at all) always survive."""
    keys, times = grid_predictions(path, dtype, b_layout, **grid)
    free = {v.name for v in configs() if v.built_in or any(v.id == b[3] for b in _C.fallback_buckets())}
    survivors = prune_variants(keys, times, free)
    return {key for key in keys if key.split("/")[0] in survivors}


def prior_records(configs: list[Candidate], dtype: str, b_layout: str) -> list[dict]:
    """The table's ``prior`` records (ids are positions in ``configs``): cuBLAS for every M, with
    LIBRARY_PRIOR_MARGIN, where it is among ``configs``; else the built-in M-bucket default
    (cutlass_configs/ [fallback]), each bucket of this dtype and layout naming the data-parallel config
    of its variant (buckets whose variant has no such config are left out)."""
    library = [i for i, c in enumerate(configs) if c.variant.from_library and c.variant.dtype == dtype
               and c.variant.b_layout == b_layout]
    if library:
        return [{"config_id": library[0], "max_m": 0, "margin": LIBRARY_PRIOR_MARGIN}]
    index = {c.variant.id: i for i, c in enumerate(configs) if c.decomposition == "data_parallel"}
    return [{"config_id": index[variant], "max_m": max_m, "margin": PRIOR_MARGIN}
            for bucket_dtype, bucket_layout, max_m, variant in _C.fallback_buckets()
            if (bucket_dtype, bucket_layout) == (dtype, b_layout) and variant in index]


def micro_runs(plan: dict, sm_count: int) -> dict[tuple[int, int, int], list[tuple[Candidate, str, int]]]:
    """Shape -> the raster/swizzle runs of the second stage there: every option at each candidate's two
    largest-wave anchors (docs/model.md)."""
    multi_wave: dict[Candidate, list[tuple[int, tuple]]] = defaultdict(list)
    for shape, cs in plan.items():
        for c in cs:
            if c.decomposition == "stream_k" or c.variant.fixed_tile_order:
                continue  # stream-K runs a single wave; cuBLAS and the decode GEMM order their tiles themselves
            w = c.coordinates(*shape, sm_count)[3]
            if w >= MICRO_MIN_WAVE:
                multi_wave[c].append((w, shape))
    runs_by_shape: dict[tuple, list] = defaultdict(list)
    for c, anchors in multi_wave.items():
        for _, shape in sorted(anchors)[-2:]:
            runs_by_shape[shape] += [(c, raster, swizzle) for raster, swizzle in c.micro_options]
    return runs_by_shape


def second_stage(log: GemmLog, plan: dict, dtype: str, b_layout: str, sm_count: int,
                 measure: Measurer | None = None) -> dict[str, list]:
    """Raster order and swizzle per candidate, measured at its two largest-wave anchors (docs/model.md)."""
    runs_by_shape = micro_runs(plan, sm_count)
    (measure or Measurer("gemm"))(
        log, [make_job((dtype, b_layout, *shape), runs_by_shape[shape]) for shape in sorted(runs_by_shape)], "micro")

    samples: dict[str, list] = defaultdict(list)
    for shape, runs in runs_by_shape.items():
        for c, raster, swizzle in runs:
            us = log.get((dtype, b_layout, *shape), c, raster, swizzle)
            if us is not None:
                samples[c.key].append((c.coordinates(*shape, sm_count)[3], raster, swizzle, us))
    return {key: model.choose_micro(s) for key, s in samples.items()}


# ----------------------------------------------------------------------------------------------------
# The driver's side of wavetune.tuning.runner: jobs are a problem and the runs to profile on it.


def make_job(problem: tuple, runs: list[tuple[Candidate, str, int]]) -> dict:
    """A measurement job of the plan as JSON: ``problem`` (dtype, b_layout, m, n, k) and its runs."""
    return {"problem": list(problem), "runs": [[c.key, raster, swizzle] for c, raster, swizzle in runs]}


@functools.cache
def candidates_by_key(dtype: str, b_layout: str) -> dict[str, Candidate]:
    return {c.key: c for c in candidates(dtype, b_layout)}


def open_log(path: Path, device: dict | None = None, precise: bool = False, **options) -> GemmLog:
    return GemmLog(path, precise=precise, device=device)


def job_done(log: GemmLog, job: dict) -> bool:
    problem = tuple(job["problem"])
    return all(GemmLog._key(problem, key, raster, swizzle) in log.records for key, raster, swizzle in job["runs"])


def measure_job(log: GemmLog, job: dict, **options) -> None:
    problem = tuple(job["problem"])
    by_key = candidates_by_key(*problem[:2])
    log.measure(problem, [(by_key[key], raster, swizzle) for key, raster, swizzle in job["runs"]])


def run(args, measure: Measurer) -> Path:
    """``python -m wavetune tune`` (``--family gemm``, the default): tune and write the table."""
    exact = suite_shapes(args.exact, args.models) if args.exact else []
    return tune(Path(args.out or "tables"), Path(args.log), args.dtype, args.b_layout, exact, micro=not args.no_micro,
                budget=args.budget, offline=args.offline, measure=measure)

"""Tuning: profile a sparse, wave-aware anchor plan per config, fit the latency model, write the tables.

    python -m wavetune tune --out tables/            # on the GPU the table is for

Every measurement goes through the C++ profiler (``_C.profile``: CUDA-graph replays over operand copies
rotated so weights are read from DRAM) and is appended to a JSON-lines file stamped with the device, so
an interrupted run resumes where it stopped. docs/model.md describes the method.
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

from . import _C, api, fmha, grouped, grouped_mapping, model, tablefile
from .api import KernelConfig, configs

# Raster/swizzle options the second stage compares; ("heuristic", 1) is the default launch.
MICRO_OPTIONS = (("heuristic", 1), ("along_m", 2), ("along_n", 2), ("along_m", 8), ("along_n", 8))
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
                              self.splits, sm_count)

    def launch(self, raster: str = "heuristic", max_swizzle: int = 1) -> tuple[int, int, int, int, int]:
        return (self.variant.id, _C.DECOMPOSITIONS.index(self.decomposition), self.splits,
                _C.RASTERS.index(raster), max_swizzle)


def candidates(dtype: str = "bf16", b_layout: str = "col") -> list[Candidate]:
    """Every config the tables score for one dtype and B layout.

    Persistent variants run data-parallel; stream-K variants run stream-K, and data-parallel too where
    the build has no persistent twin of theirs (with one, that mode would duplicate it).

    NOTES: split-K is left out of the tables. On the H100 and the H200 the best split-K launch of a
    suite shape was never more than 0.05% (geomean) ahead of the best launch without it, stream-K
    covers the same shapes (few tiles, long K), and the model mispredicts split-K's partial-sum
    traffic: with it, choices were worse (docs/tuning.md). It stays available to explicit launches.
    """
    variants = [v for v in configs() if v.dtype == dtype and v.b_layout == b_layout]
    persistent = {v.name for v in variants if v.scheduler == "persistent"}
    out = []
    for v in variants:
        twin = v.name.removesuffix("_stream_k") + "_persistent"
        if v.scheduler == "persistent" or twin not in persistent:
            out.append(Candidate(v))
        if v.scheduler == "stream_k":
            out.append(Candidate(v, "stream_k"))
    return out


PRECISE_REPLAYS = 7


def profile_options(m: int, n: int, k: int, precise: bool = False) -> dict:
    """Fewer launches for long kernels: the tuning budget is GPU time. ``precise``: PRECISE_REPLAYS
    replays for every kernel, each right after an untimed launch of its own, for measurements that decide
    a choice alone (deployment tuning, its judge).

    NOTES: two launches of one cuBLAS kernel in one interleaved call, each the median of 3 replays, differed
    by up to 6% (M = 14350, N = 6144, K = 4096; docs/results/deploy_quality_llama3-8b_h100_3replays.jsonl,
    NVIDIA H100, 2026-11-24): too noisy to rank configs a few percent apart, which an exact range does.
    The profiler interleaves a call's launches round by round, so each replay starts from the power and
    clock state its predecessor left: at M = 8324, N = 4096, K = 14336 on an H100 the same 52 launches
    timed the stream-K 128x192 tile at 0.88-0.92x cuBLAS's time in one order and at 1.06-1.07x reversed
    (docs/results/launch_order_h100.jsonl, 2026-11-24), enough to reverse a choice. Each preceded by a
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


class MeasurementLog:
    """Profiled latencies, persisted as JSON lines: a header with the device, then one record each.

    Opening an existing log on another GPU or build is refused; records already there are not measured
    again, which makes tuning resumable. ``offline``: the device is the log's own and nothing is measured
    (refitting a table from its log, on any machine with the same build). ``precise``: every measurement
    by ``profile``, precise.
    """

    def __init__(self, path: Path, offline: bool = False, precise: bool = False):
        self.path = Path(path)
        self.offline = offline
        self.precise = precise  # profile's
        self.device = self._logged_device() if offline else api.device_properties()
        self.header = {
            "gpu_name": self.device["name"], "sm_count": self.device["sm_count"],
            "l2_bytes": self.device["l2_bytes"], "config_space_hash": _C.build_info()["config_space_hash"],
        }
        self.records: dict[tuple, float] = {}
        self.gpu_seconds = 0.0
        self.measured = 0
        if self.path.exists():
            lines = self.path.read_text().splitlines()
            header = json.loads(lines[0]) if lines else {}
            if {k: header.get(k) for k in self.header} != self.header:
                raise ValueError(f"{self.path} was recorded on {header}, not {self.header}; use another file")
            for line in lines[1:]:
                r = json.loads(line)
                self.records[self._key(r["problem"], r["config"], r["raster"], r["max_swizzle"])] = r["us"]
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            precise_timing = f"; {PRECISE_REPLAYS} replays, each right after an untimed launch of its own"
            timing = TIMING + (precise_timing if precise else "")
            self.path.write_text(json.dumps({**self.header, "timing": timing}) + "\n")

    def _logged_device(self) -> dict:
        if not self.path.exists():
            raise ValueError(f"{self.path}: no such measurement log to refit from (--offline refits the table "
                             "from the log its tuning wrote: pass it with --log FILE)")
        with self.path.open() as f:
            header = json.loads(f.readline())
        return {"name": header["gpu_name"], "sm_count": header["sm_count"], "l2_bytes": header["l2_bytes"]}

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
        with self.path.open("a") as f:
            for (c, raster, swizzle), us in zip(missing, times):
                us = None if math.isnan(us) else us
                self.records[self._key(problem, c.key, raster, swizzle)] = us
                f.write(json.dumps({"problem": list(problem), "config": c.key, "raster": raster,
                                    "max_swizzle": swizzle, "us": us}) + "\n")


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


def progress(items: list, desc: str) -> Iterable:
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=desc, unit="shape")


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
    # Stream-K always runs one wave (G = C): sample that wave densely in L instead.
    options = STREAM_K_PLAN if c.decomposition == "stream_k" else {}
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


def fit_candidates(log: MeasurementLog, cands: list[Candidate], plan: dict, dtype: str, b_layout: str,
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


def fastest_rate(log: MeasurementLog, plan: dict, dtype: str, b_layout: str, traffic) -> float | None:
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
         offline: bool = False) -> Path:
    """Profile the plan (and the exact shapes), fit, keep the working set, calibrate it on
    ``calibration_shapes``, and write ``out/<gpu-slug>.wtt``. ``budget`` caps the plan's measurements
    (``budget_plan``) and the calibration takes what it leaves; the exact shapes come on top of it. ``offline``: measure
    nothing, refit from the log (``MeasurementLog``)."""
    log = MeasurementLog(log_path, offline)
    sm_count = log.device["sm_count"]
    cands = candidates(dtype, b_layout)
    if all(c.variant.from_library for c in cands):  # a table of the library alone has nothing to choose
        raise ValueError(f"no compiled CUTLASS {dtype} variant with {b_layout}-major B to tune")
    plan, waves = budget_plan(cands, sm_count, budget, micro)
    print(f"{log.device['name']}: {len(cands)} configs, {sum(map(len, plan.values()))} anchor measurements "
          f"on {len(plan)} shapes at waves {', '.join(map(str, waves))}; "
          f"{planned_measurements(plan, sm_count, micro)} measurements with the raster/swizzle stage")
    for shape in progress(sorted(plan), "anchors"):
        log.measure((dtype, b_layout, *shape), [(c, "heuristic", 1) for c in plan[shape]])
    fits = fit_candidates(log, cands, plan, dtype, b_layout, sm_count)

    micro_rules = {}
    if micro:
        micro_rules = second_stage(log, plan, dtype, b_layout, sm_count)

    exact = []
    for shape in progress(list(exact_shapes), "exact shapes"):
        problem = (dtype, b_layout, *shape)
        log.measure(problem, [(c, "heuristic", 1) for c in cands])
        timed = [(log.get(problem, c), i) for i, c in enumerate(cands) if log.get(problem, c) is not None]
        if timed:
            us, best = min(timed)
            exact.append((shape, best, us))

    kept = [c for c in cands if c.key in fits]
    meta = {
        "gpu_name": log.device["name"], "sm_count": sm_count, "l2_bytes": log.device["l2_bytes"],
        "config_space_hash": _C.build_info()["config_space_hash"],
        "wavetune_version": api.package_version(), "cuda_version": _C.build_info()["cuda_version"],
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "timing": TIMING, "source": f"{dtype} {b_layout}: {len(plan)} anchor shapes",
        "plan_waves": ",".join(map(str, waves)),
    }
    exact_records = [(shape, cands[best], us) for shape, best, us in exact]
    path = Path(out) / f"{tablefile.table_slug(log.device['name'])}.wtt"
    table = dict(meta=meta, fits=fits, micro_rules=micro_rules, exact=exact_records, dtype=dtype, b_layout=b_layout,
                 memory=fastest_rate(log, plan, dtype, b_layout, operand_traffic),
                 traffic=fastest_rate(log, plan, dtype, b_layout, tile_traffic(sm_count)))
    write_tuned_table(path, kept, **table)
    working = working_set(path, dtype, b_layout) | {c.key for _, c, _ in exact_records}
    kept = [c for c in kept if c.key in working]
    shapes = calibration_shapes()
    if budget is not None:  # what the plan leaves of the budget
        shapes = shapes[:max(0, budget - planned_measurements(plan, sm_count, micro)) // max(1, len(kept))]
    for shape in progress(shapes, "calibration"):
        log.measure((dtype, b_layout, *shape), [(c, "heuristic", 1) for c in kept])
    write_tuned_table(path, kept, **table)
    # The compute floor bounds calibrated predictions, so the calibration is fitted without it.
    write_tuned_table(path, kept, **table, calibration=calibration(log, path, shapes, dtype, b_layout),
                      compute=log.fastest_compute(dtype, b_layout))
    print(f"wrote {path}: {len(kept)} configs (the working set), {len(exact)} exact shapes; this run measured "
          f"{log.measured} configs in {log.gpu_seconds:.1f} GPU-seconds (log: {log.path})")
    return path


def calibration(log: MeasurementLog, path: Path, shapes: list[tuple[int, int, int]], dtype: str, b_layout: str
                ) -> dict[str, list[float]]:
    """Config key -> its calibration coefficients (``model.fit_calibration``): the measured latencies on the
    calibration ``shapes`` over the written table's predictions there (floors included, no calibration)."""
    selector = api.open_table(path)
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
    selector = api.open_table(path)
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
    ``grid_predictions``'s); the built-in default's variants (compiled in every build) and cuBLAS (no
    compile at all) always survive."""
    keys, times = grid_predictions(path, dtype, b_layout, **grid)
    free = {v.name for v in configs() if v.from_library or any(v.id == b[3] for b in _C.fallback_buckets())}
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
            if c.decomposition == "stream_k" or c.variant.from_library:
                continue  # stream-K runs a single wave; cuBLAS orders its tiles itself
            w = c.coordinates(*shape, sm_count)[3]
            if w >= MICRO_MIN_WAVE:
                multi_wave[c].append((w, shape))
    runs_by_shape: dict[tuple, list] = defaultdict(list)
    for c, anchors in multi_wave.items():
        for _, shape in sorted(anchors)[-2:]:
            runs_by_shape[shape] += [(c, raster, swizzle) for raster, swizzle in MICRO_OPTIONS]
    return runs_by_shape


def second_stage(log: MeasurementLog, plan: dict, dtype: str, b_layout: str, sm_count: int) -> dict[str, list]:
    """Raster order and swizzle per candidate, measured at its two largest-wave anchors (docs/model.md)."""
    runs_by_shape = micro_runs(plan, sm_count)
    for shape in progress(sorted(runs_by_shape), "micro"):
        log.measure((dtype, b_layout, *shape), runs_by_shape[shape])

    samples: dict[str, list] = defaultdict(list)
    for shape, runs in runs_by_shape.items():
        for c, raster, swizzle in runs:
            us = log.get((dtype, b_layout, *shape), c, raster, swizzle)
            if us is not None:
                samples[c.key].append((c.coordinates(*shape, sm_count)[3], raster, swizzle, us))
    return {key: model.choose_micro(s) for key, s in samples.items()}


# ----------------------------------------------------------------------------------------------------
# The grouped-GEMM family (docs/grouped.md)
# ----------------------------------------------------------------------------------------------------

# NOTES: a grouped table is fitted from benchmarks/grouped.py logs of the tune split of generated MoE cases
# (every compiled bf16 grouped variant timed on each case, weights cold, interleaved). A case's coordinates
# are those the run-time choice sees, map_grouped_balanced of (rows, experts, N, K), whatever its routing:
# each fit averages over the routings measured, as the choice must, not knowing the routing.
GROUPED_FAMILY = "grouped_gemm"
# NOTES: the (G, L) wave model mispredicts grouped kernels: its choices ran at 0.90 of the exhaustive best
# in a cross-validation by layer over the H100's tune split (docs/grouped.md), where the fastest variant
# of each regime of rows per busy expert (the tile fill along the tokens) ran at 0.973. So a grouped
# table's priors are those per-regime winners, on the edges of the tile sides the space offers along the
# tokens (16, 64, 256), and the model never overrides them: margins 0.1 to 8 all chose worse in that
# cross-validation (0.94 to 0.971).
GROUPED_PRIOR_EDGES = (16, 64, 256)
GROUPED_PRIOR_MARGIN = 1e6
GROUPED_TIMING = ("median of interleaved CUDA-graph replays (benchmarks/grouped.py), weights cold; "
                  "balanced, Zipf-skewed and hot-expert routings")


def benchmark_log(paths: Iterable[Path]) -> tuple[dict, list[dict]]:
    """(the first log's header, every case of all logs) of benchmarks/grouped.py or benchmarks/attention.py
    logs of one GPU."""
    header, cases = None, []
    for path in paths:
        lines = Path(path).read_text().splitlines()
        if not lines:
            raise ValueError(f"{path}: an empty log")
        head = json.loads(lines[0])
        if header is not None and head["gpu"] != header["gpu"]:
            raise ValueError(f"{path}: measured on a {head['gpu']}, the first log on a {header['gpu']}")
        header = header or head
        cases += [json.loads(line) for line in lines[1:] if line.strip()]
    if header is None or not cases:
        raise ValueError("no measurements in the logs")
    return header, cases


def grouped_coordinates(v: KernelConfig, case: dict, sm_count: int) -> tuple[int, int, int, int]:
    """(G, L, C, waves) of a case as the run-time choice maps it."""
    return tuple(grouped_mapping.balanced(v.tile, v.cluster, v.swap_ab, case["rows"], case["experts"], case["n"],
                                          case["k"], sm_count))


def grouped_bytes(case: dict) -> float:
    """Operand bytes of a case as the memory floor counts them: x, out and the busy experts' weights."""
    return float(model.operand_bytes(case["rows"], case["n"], case["k"], case["experts"]))


def grouped_prediction(fit: dict, v: KernelConfig, case: dict, sm_count: int, memory: float, traffic: float
                       ) -> float:
    """A config's floored prediction (docs/tables.md), without calibration."""
    G, L, C, w = grouped_coordinates(v, case, sm_count)
    return max(model.predict(fit, G, L, w, C), grouped_bytes(case) / memory,
               model.traffic_floor_us(G, L, v.tile, traffic))


def group_rows(case: dict) -> int:
    """Rows per busy expert, as a grouped table's priors read them."""
    return grouped_mapping.balanced_groups(case["rows"], case["experts"])[1]


def grouped_priors(cases: list[dict], edges: Iterable[int] = GROUPED_PRIOR_EDGES) -> list[tuple[str, int]]:
    """(variant name, max rows per busy expert; 0: any) per regime: the variant with the best geomean of
    exhaustive best / its time over the regime's cases, adjacent regimes of one winner merged."""
    bounds, out, low = [*edges, 0], [], 0
    rows = [group_rows(c) for c in cases]
    for high in bounds:
        inside = [c for c, r in zip(cases, rows) if low < r and (high == 0 or r <= high)]
        low = high
        if not inside:
            continue
        names = set.intersection(*(set(c["variants_us"]) for c in inside))
        score = {n: sum(math.log(min(c["variants_us"].values()) / c["variants_us"][n]) for c in inside)
                 for n in sorted(names)}
        winner = max(score, key=score.get)
        if out and out[-1][0] == winner:
            out.pop()
        out.append((winner, high))
    if out:
        out[-1] = (out[-1][0], 0)  # the last regime takes every larger count
    return out


def fit_grouped(cases: list[dict], variants: list[KernelConfig], sm_count: int, calibrate: bool = True) -> dict:
    """``write_table``'s keyword arguments of a grouped table fitted to ``cases`` (without meta): the
    per-regime priors' variants (``grouped_priors``), their wave models, floors and calibration."""
    priors = grouped_priors(cases)
    variants = [v for v in variants if v.name in {name for name, _ in priors}]
    timed = [(v, c, c["variants_us"][v.name]) for v in variants for c in cases if v.name in c["variants_us"]]
    memory = max(grouped_bytes(c) / us for _, c, us in timed)
    traffic = max(model.tile_traffic_bytes(*grouped_coordinates(v, c, sm_count)[:2], v.tile) / us
                  for v, c, us in timed)
    fits, calibration = {}, {}
    for v in variants:
        points = [(c, us) for w, c, us in timed if w is v]
        if len(points) < 2:
            continue
        G, L, _, W = zip(*(grouped_coordinates(v, c, sm_count) for c, _ in points))
        fits[v.name] = model.fit_config(G, L, W, [us for _, us in points])
        if calibrate:
            ratios = [us / grouped_prediction(fits[v.name], v, c, sm_count, memory, traffic) for c, us in points]
            calibration[v.name] = model.fit_calibration([(c["rows"], c["n"], c["k"]) for c, _ in points], ratios)
    kept = [v for v in variants if v.name in fits]
    index = {v.name: i for i, v in enumerate(kept)}
    return dict(configs=[{"variant": v.name, "decomposition": "data_parallel", "splits": 1} for v in kept],
                micro=None, exact=None,
                priors=[{"config_id": index[name], "max_m": high, "margin": GROUPED_PRIOR_MARGIN}
                        for name, high in priors if name in index],
                waves={i: fits[v.name] for i, v in enumerate(kept)},
                calibration={i: calibration[v.name] for i, v in enumerate(kept) if v.name in calibration},
                memory_bytes_per_us=memory, traffic_bytes_per_us=traffic)


def tune_grouped(logs: list[Path], out: Path) -> Path:
    """Fit a grouped table to benchmarks/grouped.py logs and write ``out/<gpu-slug>.grouped_gemm.wtt``."""
    header, cases = benchmark_log(logs)
    variants = [v for v in grouped.grouped_configs() if v.dtype == "bf16"]
    if not variants:
        raise ValueError("no bf16 grouped variant compiled: build with WAVETUNE_KERNEL_SET=full")
    table = fit_grouped(cases, variants, header["sm_count"])
    return write_family_table(out, header, GROUPED_FAMILY, _C.grouped_config_space_hash(), GROUPED_TIMING,
                              f"bf16: {len(cases)} cases of benchmarks/grouped.py", table)


def write_family_table(out: Path, header: dict, family: str, config_space_hash: str, timing: str, source: str,
                       table: dict) -> Path:
    """Write a table of another family than gemm, fitted to a benchmark log with ``header``, as
    ``out/<gpu-slug>.<family>.wtt``."""
    meta = {
        "gpu_name": header["gpu"], "sm_count": header["sm_count"], "family": family,
        "config_space_hash": config_space_hash,
        "wavetune_version": api.package_version(), "cuda_version": _C.build_info()["cuda_version"],
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "timing": timing, "source": source,
    }
    path = Path(out) / f"{tablefile.table_slug(header['gpu'])}.{family}.wtt"
    path.parent.mkdir(parents=True, exist_ok=True)
    tablefile.write_table(path, meta=meta, **table)
    print(f"wrote {path}: {len(table['configs'])} configs fitted to {source}")
    return path


# ----------------------------------------------------------------------------------------------------
# Attention tables (docs/attention.md): per config, the variant and a KV split count (split_k), wave
# models fitted to benchmarks/attention.py's measurements of every config on each case.

ATTENTION_FAMILY = "attention"
ATTENTION_TIMING = ("median of interleaved CUDA-graph replays (benchmarks/attention.py), K and V cold over "
                    "operand copies larger than twice the L2")


def attention_sizes(case: dict) -> tuple[int, int, int, int, int, int]:
    """(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim) of a benchmarks/attention.py case."""
    return tuple(case[key] for key in ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim"))


def attention_coordinates(v: KernelConfig, splits: int, case: dict, sm_count: int) -> tuple[int, int, int, int]:
    """(G, L, waves, launches) of a case under a config as the C++ selector maps it: G the CTAs of one
    launch, L the KV tiles a CTA walks (the average, rounded), one CTA per SM."""
    ctas, tiles, _, launches = _C.attention_mapping(attention_sizes(case), case["phase"] == "prefill", v.tile, splits)
    G = ctas // launches
    return G, max(1, round(tiles)), -(-G // sm_count), launches


# NOTES: no calibration records: fitted to the named cases (a power law in seqlen_q, seqlen_k and head dim
# per config, as GEMM tables have), they lowered the held-out choice from 0.979 to 0.976 of the best (H100,
# 2026-11-24): the per-wave fits already follow the named cases to 2% (median) and the power law
# extrapolates to other models' lengths worse than the fits do.
def fit_attention(cases: list[dict], variants: list[KernelConfig], sm_count: int) -> dict:
    """``write_table``'s keyword arguments of an attention table fitted to ``cases`` (without meta): every
    (variant, splits) measured on at least three cases, with its per-wave bilinear models of one launch's
    time."""
    by_name = {v.name: v for v in variants}
    points = defaultdict(list)
    for case in cases:
        for key, us in case["variants_us"].items():
            name, splits = key.rsplit("/", 1)
            if name in by_name:
                points[(name, int(splits))].append((case, us))
    configs, waves = [], {}
    for (name, splits), measured in sorted(points.items()):
        if len(measured) < 3:
            continue
        G, L, W, launches = zip(*(attention_coordinates(by_name[name], splits, c, sm_count) for c, _ in measured))
        waves[len(configs)] = model.fit_config(G, L, W, [us / n for (_, us), n in zip(measured, launches)])
        configs.append({"variant": name, "decomposition": "split_k" if splits > 1 else "data_parallel", "splits": splits})
    if not configs:
        raise ValueError("no attention config was measured on three cases or more")
    return dict(configs=configs, waves=waves, micro=None, exact=None)


def tune_attention(logs: list[Path], out: Path) -> Path:
    """Fit an attention table to benchmarks/attention.py logs and write ``out/<gpu-slug>.attention.wtt``."""
    header, cases = benchmark_log(logs)
    variants = [v for v in fmha.attention_configs() if v.dtype == "bf16"]
    if not variants:
        raise ValueError("no bf16 attention variant compiled: build with WAVETUNE_KERNEL_SET=full")
    table = fit_attention(cases, variants, header["sm_count"])
    return write_family_table(out, header, ATTENTION_FAMILY, _C.attention_config_space_hash(), ATTENTION_TIMING,
                              f"bf16: {len(cases)} cases of benchmarks/attention.py", table)

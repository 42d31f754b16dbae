"""The grouped-GEMM family's tuning (docs/grouped.md), one table per scales mode: measure every compiled
variant of the mode writing bf16 on the cases of the tune split (``cases``, timed by ``measure``), fit the
per-regime priors and wave models, and write ``<gpu-slug>.grouped_gemm[.<scales>].wtt``. A scaled mode's
variants run on e4m3 operands, over the cases whose K fills 16-byte e4m3 rows.

    python -m wavetune tune --family grouped_gemm [--scales row|block128] --out tables/ [--cases 600] [--devices 0,1]
    python -m wavetune tune --family grouped_gemm [--scales ...] --offline --log a.jsonl,b.jsonl --out tables/

The measurements append to a ``CaseLog`` (one record per case), so a rerun resumes; ``--offline`` refits
from logs only, this tuning's or benchmarks/grouped.py's (``--suite tune``), measured on one GPU model.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable

from ...runtime.configs import KernelConfig, resident_ctas
from ...runtime.native import _C
from ...tuning import model
from ...tuning.fitting import benchmark_log, case_done, fit_case_table, logs_source, measure_cases_and_fit
from ...tuning.log import CaseLog
from ...tuning.runner import Measurer
from . import FAMILY, cases as plan_cases, mapping
from .api import SCALES, grouped_configs, scales_code

# NOTES: a grouped table is fitted to measurements of the tune split of generated MoE cases
# (every compiled bf16 grouped variant timed on each case, weights cold, interleaved). A case's coordinates
# are those the run-time choice sees, map_grouped_balanced of (rows, experts, N, K), whatever its routing:
# each fit averages over the routings measured, as the choice must, not knowing the routing.
# NOTES: the (G, L) wave model mispredicts grouped kernels: its choices ran at 0.90 of the exhaustive best
# in a cross-validation by layer over the H100's tune split (docs/grouped.md), where the fastest variant
# of each regime of rows per busy expert (the tile fill along the tokens) ran at 0.973. So a grouped
# table's priors are those per-regime winners, and the model never overrides them: margins 0.1 to 8 all
# chose worse in that cross-validation (0.94 to 0.971). The regimes' edges are every power of two from 4
# to 512 rows: the tile sides along the tokens (16 to 256) and the fills between them, where the winner
# also turns on how whole the waves are. On the tune splits these priors ran at 0.984 (H100, bf16), 0.981
# (H200, bf16) and 0.978 (H100, e4m3) of the exhaustive best, against 0.975, 0.973 and 0.972 with edges at
# the tile sides alone (16, 64, 256).
GROUPED_PRIOR_EDGES = (4, 8, 16, 32, 64, 128, 256, 512)
GROUPED_PRIOR_MARGIN = 1e6
GROUPED_TIMING = ("median of interleaved CUDA-graph replays (wavetune.families.grouped_gemm.measure, as "
                  "benchmarks/grouped.py times), weights cold; balanced, Zipf-skewed and hot-expert routings")


def ctas_per_sm(variant: KernelConfig) -> int:
    """CTAs of a variant resident per SM of the GPU being tuned: the log's record, else the current GPU's
    (``runtime.configs.resident_ctas``)."""
    return resident_ctas(variant, _C.grouped_ctas_per_sm)


def grouped_coordinates(v: KernelConfig, case: dict, sm_count: int) -> tuple[int, int, int, int]:
    """(G, L, C, waves) of a case as the run-time choice maps it."""
    return tuple(mapping.balanced(v.tile, v.cluster, v.swap_ab, case["rows"], case["experts"], case["n"],
                                  case["k"], sm_count, ctas_per_sm(v)))


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
    return mapping.balanced_groups(case["rows"], case["experts"])[1]


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
                memory_bytes_per_us=memory, traffic_bytes_per_us=traffic,
                occupancy={i: ctas_per_sm(v) for i, v in enumerate(kept)})


SEED = 17  # of the cases' routings and sampled rows (benchmarks/grouped.py's default seed)


class GroupedTuning:
    """The tuning driver of a scales mode's table (wavetune.tuning.runner's side of it: a job is a case of the
    plan, ``cases.tune_plan``) and its offline fit."""

    def __init__(self, scales: str = ""):
        self.scales = scales  # as measure.measure_case's
        self.what = f"{FAMILY.name}" + (f" ({scales} scales)" if scales else "")

    def configs(self) -> list[KernelConfig]:
        return grouped_configs(self.scales)

    def tune(self, logs: list[Path], out: Path) -> Path:
        """Fit a table to case logs (this tuning's, or benchmarks/grouped.py's) and write
        ``out/<gpu-slug>.grouped_gemm[.<scales>].wtt``."""
        header, measured = benchmark_log(logs, FAMILY.name, self.scales)
        return self.fit_and_write(header, measured, out, logs_source(logs, measured))

    def fit_and_write(self, header: dict, measured: list[dict], out: Path, source: str) -> Path:
        return fit_case_table(FAMILY.name, header, measured, out, source, fit_grouped, GROUPED_TIMING, self.scales)

    def open_log(self, path: Path, device: dict | None = None) -> CaseLog:
        return CaseLog(path, FAMILY.name, device=device, timing=GROUPED_TIMING, scales=self.scales)

    def measure_job(self, log: CaseLog, job: dict, reps: int | None = None) -> None:
        from . import measure  # torch

        generator = measure.case_generator(job["case_key"], SEED)
        record, _, _ = measure.measure_case(job, log.device["l2_bytes"], generator, reps or measure.REPS,
                                            scales=self.scales)
        log.add([record])
        measure.torch.cuda.empty_cache()  # the next case's weights may be gigabytes

    def run(self, args, measure: Measurer) -> Path:
        """``python -m wavetune tune --family grouped_gemm [--scales S]``: measure the plan (resuming ``--log``),
        fit, write."""
        out = Path(args.out or "tables")
        if args.offline:
            return self.tune([Path(p) for p in args.log.split(",")], out)
        if not any(v.dtype == "bf16" for v in self.configs()):
            raise ValueError(f"no {self.what} variant writing bf16 is compiled: compile them first "
                             f"(python -m wavetune build --family {FAMILY.name})")
        log = self.open_log(args.log, measure.device)
        plan = plan_cases.tune_plan(args.cases or plan_cases.TUNE_CASES)
        if SCALES[self.scales]["e4m3"]:
            plan = plan_cases.e4m3_cases(plan)
        header = {**log.header, "sm_count": log.device["sm_count"]}
        what = f"the tune split, {len(self.configs())} {self.what} variants each"
        return measure_cases_and_fit(log, plan, measure, what,
                                     lambda measured, source: self.fit_and_write(header, measured, out, source))


DRIVERS = {scales: GroupedTuning(scales) for scales in SCALES}


def driver(scales: str = "") -> GroupedTuning:
    """The tuning driver of a scales mode's table; a ValueError naming the modes otherwise."""
    scales_code(scales)
    return DRIVERS[scales]


# The runner's entry points (runner.Measurer, tuning.worker); its measurement options carry the scales mode.
def open_log(path: Path, device: dict | None = None, scales: str = "", **options) -> CaseLog:
    return driver(scales).open_log(path, device)


def measure_job(log: CaseLog, job: dict, reps: int | None = None, scales: str = "", **options) -> None:
    driver(scales).measure_job(log, job, reps)


def run(args, measure: Measurer) -> Path:
    return driver(args.scales or "").run(args, measure)


job_done = case_done

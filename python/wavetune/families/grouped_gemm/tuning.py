"""The grouped-GEMM family's tuning (docs/grouped.md): measure every compiled grouped variant writing bf16 on
the cases of the tune split (``cases``, timed by ``measure``), fit the per-regime priors and wave models, and
write ``<gpu-slug>.grouped_gemm.wtt``. The FP8 grouped families tune the same way (``GroupedTuning`` with
``scales``: their variants on e4m3 operands, the cases whose K fills 16-byte e4m3 rows).

    python -m wavetune tune --family grouped_gemm --out tables/ [--cases 600] [--devices 0,1]
    python -m wavetune tune --family grouped_gemm --offline --log a.jsonl,b.jsonl --out tables/

The measurements append to a ``CaseLog`` (one record per case), so a rerun resumes; ``--offline`` refits
from logs only, this tuning's or benchmarks/grouped.py's (``--suite tune``), measured on one GPU model.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable

from ...runtime.configs import KernelConfig
from ...tuning import model
from ...tuning.fitting import benchmark_log, case_done, fit_case_table, logs_source, measure_cases_and_fit
from ...tuning.log import CaseLog
from ...tuning.runner import Measurer
from . import FAMILY, cases as plan_cases, mapping
from .api import grouped_configs

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


def grouped_coordinates(v: KernelConfig, case: dict, sm_count: int) -> tuple[int, int, int, int]:
    """(G, L, C, waves) of a case as the run-time choice maps it."""
    return tuple(mapping.balanced(v.tile, v.cluster, v.swap_ab, case["rows"], case["experts"], case["n"],
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
                memory_bytes_per_us=memory, traffic_bytes_per_us=traffic)


SEED = 17  # of the cases' routings and sampled rows (benchmarks/grouped.py's default seed)


class GroupedTuning:
    """A grouped family's tuning driver (wavetune.tuning.runner's side of it: a job is a case of the plan,
    ``cases.tune_plan``) and its offline fit, for the family ``name`` whose variants ``configs`` lists."""

    def __init__(self, name: str, configs, scales: str = ""):
        self.name, self.configs, self.scales = name, configs, scales  # scales: as measure.measure_case's

    def tune(self, logs: list[Path], out: Path) -> Path:
        """Fit a table to case logs (this tuning's, or benchmarks/grouped.py's) and write
        ``out/<gpu-slug>.<family>.wtt``."""
        header, measured = benchmark_log(logs, self.name)
        return self.fit_and_write(header, measured, out, logs_source(logs, measured))

    def fit_and_write(self, header: dict, measured: list[dict], out: Path, source: str) -> Path:
        return fit_case_table(self.name, header, measured, out, source, fit_grouped, GROUPED_TIMING)

    def open_log(self, path: Path, device: dict | None = None, **options) -> CaseLog:
        return CaseLog(path, self.name, device=device, timing=GROUPED_TIMING)

    def measure_job(self, log: CaseLog, job: dict, reps: int | None = None, **options) -> None:
        from . import measure  # torch

        generator = measure.case_generator(job["case_key"], SEED)
        record, _, _ = measure.measure_case(job, log.device["l2_bytes"], generator, reps or measure.REPS,
                                            scales=self.scales)
        log.add([record])
        measure.torch.cuda.empty_cache()  # the next case's weights may be gigabytes

    def run(self, args, measure: Measurer) -> Path:
        """``python -m wavetune tune --family NAME``: measure the plan (resuming ``--log``), fit, write."""
        out = Path(args.out or "tables")
        if args.offline:
            return self.tune([Path(p) for p in args.log.split(",")], out)
        if not any(v.dtype == "bf16" for v in self.configs()):
            raise ValueError(f"no {self.name} variant writing bf16 is compiled: compile them first "
                             f"(python -m wavetune build --family {self.name})")
        log = CaseLog(args.log, self.name, device=measure.device, timing=GROUPED_TIMING)
        plan = plan_cases.tune_plan(args.cases or plan_cases.TUNE_CASES)
        if self.scales:
            plan = plan_cases.e4m3_cases(plan)
        header = {**log.header, "sm_count": log.device["sm_count"]}
        return measure_cases_and_fit(log, plan, measure, f"the tune split, {len(self.configs())} {self.name} variants each",
                                     lambda measured, source: self.fit_and_write(header, measured, out, source))


DRIVER = GroupedTuning(FAMILY.name, grouped_configs)
tune_grouped, open_log, measure_job, run = DRIVER.tune, DRIVER.open_log, DRIVER.measure_job, DRIVER.run
job_done = case_done

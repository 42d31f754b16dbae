"""The attention family's tuning (docs/attention.md): measure every attention config (variant and KV split
count) on the named suite's cases (``cases``, timed by ``measure``), fit per-config wave models, and
write ``<gpu-slug>.attention.wtt``.

    python -m wavetune tune --family attention --out tables/ [--cases N] [--devices 0,1]
    python -m wavetune tune --family attention --offline --log attention_named.jsonl --out tables/

The measurements append to a ``CaseLog`` (one record per case), so a rerun resumes; ``--offline`` refits
from logs only, this tuning's or benchmarks/attention.py's (``--suite named``), measured on one GPU model.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from ...runtime.configs import KernelConfig
from ...runtime.native import _C
from ...tuning import model
from ...tuning.fitting import benchmark_log, case_done, fit_case_table, logs_source, measure_cases_and_fit
from ...tuning.log import CaseLog
from ...tuning.runner import Measurer
from . import FAMILY, cases as plan_cases
from .api import attention_configs

ATTENTION_TIMING = ("median of interleaved CUDA-graph replays (wavetune.families.attention.measure, as "
                    "benchmarks/attention.py times), K and V cold over operand copies larger than twice the L2")


def attention_sizes(case: dict) -> tuple[int, int, int, int, int, int]:
    """(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim) of a case (``cases``, benchmarks/attention.py)."""
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
    """Fit an attention table to case logs (this tuning's, or benchmarks/attention.py's) and write
    ``out/<gpu-slug>.attention.wtt``."""
    header, measured = benchmark_log(logs, FAMILY.name)
    return fit_and_write(header, measured, out, logs_source(logs, measured))


def fit_and_write(header: dict, measured: list[dict], out: Path, source: str) -> Path:
    return fit_case_table(FAMILY.name, header, measured, out, source, fit_attention, ATTENTION_TIMING)


# ----------------------------------------------------------------------------------------------------
# The driver's side of wavetune.tuning.runner: a job is a case of the plan (``cases.tune_plan``).


def open_log(path: Path, device: dict | None = None, **options) -> CaseLog:
    return CaseLog(path, FAMILY.name, device=device, timing=ATTENTION_TIMING)


job_done = case_done


def measure_job(log: CaseLog, job: dict, reps: int | None = None, **options) -> None:
    from . import measure  # torch

    record, _ = measure.measure_case(job, log.device["l2_bytes"], reps or measure.REPS)
    log.add([record])
    measure.torch.cuda.empty_cache()


def run(args, measure: Measurer) -> Path:
    """``python -m wavetune tune --family attention``: measure the plan (resuming ``--log``), fit, write."""
    out = Path(args.out or "tables")
    if args.offline:
        return tune_attention([Path(p) for p in args.log.split(",")], out)
    head_dims = {v.tile[2] for v in attention_configs() if v.dtype == "bf16" and not v.from_library}
    if not head_dims:
        raise ValueError("no bf16 FMHA variant is compiled: compile them first (python -m wavetune build --family "
                         "attention)")
    log = CaseLog(args.log, FAMILY.name, device=measure.device, timing=ATTENTION_TIMING)
    plan = plan_cases.tune_plan(head_dims, args.cases)
    what = f"the named suite (head dims {', '.join(map(str, sorted(head_dims)))})"
    return measure_cases_and_fit(log, plan, measure, what,
                                 lambda measured, source: fit_and_write(log.header, measured, out, source))

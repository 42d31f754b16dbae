"""What the fits of case-measured families (grouped GEMM, attention) share: reading their case logs (the
tuning's own, ``log.CaseLog``, or the benchmarks' of benchmarks/grouped.py and benchmarks/attention.py),
and writing a family's table."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Callable, Iterable

from .. import families
from ..runtime.configs import record_ctas
from ..runtime.device import build_info, package_version
from ..runtime import tables
from . import tablefile


def log_gpu(header: dict) -> str:
    """The GPU model a case log was measured on: ``gpu_name`` in tuning's logs, ``gpu`` in the benchmarks'."""
    return header["gpu_name"] if "gpu_name" in header else header["gpu"]


def benchmark_log(paths: Iterable[Path], family: str | None = None, scales: str = "") -> tuple[dict, list[dict]]:
    """(the first log's header, every case of all logs) of case logs of one GPU. ``family``: refuse a
    tuning log (one with a ``config_space_hash``) of another family, scales mode or build's config space."""
    header, cases = None, []
    for path in paths:
        lines = Path(path).read_text().splitlines()
        if not lines:
            raise ValueError(f"{path}: an empty log")
        head = json.loads(lines[0])
        if header is not None and log_gpu(head) != log_gpu(header):
            raise ValueError(f"{path}: measured on a {log_gpu(head)}, the first log on a {log_gpu(header)}")
        if family is not None and "config_space_hash" in head:
            expected = {"family": family, "config_space_hash": families.get(family).table_hash(scales),
                        "scales": scales or None}
            if {key: head.get(key) for key in expected} != expected:
                raise ValueError(f"{path}: a log of family {head.get('family')!r}, scales {head.get('scales', '')!r} "
                                 f"and config space {head.get('config_space_hash')}, not of this build's {family} "
                                 f"({expected['config_space_hash']}) of scales {scales!r}")
        header = header or head
        cases += [json.loads(line) for line in lines[1:] if line.strip()]
    if header is None or not cases:
        raise ValueError("no measurements in the logs")
    return header, cases


def write_family_table(out: Path, header: dict, family: str, config_space_hash: str, timing: str, source: str,
                       table: dict, scales: str = "") -> Path:
    """Write a table of another family than gemm (of a scales mode), fitted to a case log with ``header``, as
    ``out/<gpu-slug>.<family>[.<scales>].wtt``."""
    gpu = log_gpu(header)
    meta = {
        "gpu_name": gpu, "sm_count": header["sm_count"], "family": family, **({"scales": scales} if scales else {}),
        "config_space_hash": config_space_hash,
        "wavetune_version": package_version(), "cuda_version": build_info()["cuda_version"],
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "timing": timing, "source": source,
    }
    path = Path(out) / families.get(family).table_file_name(tables.table_slug(gpu), scales)
    path.parent.mkdir(parents=True, exist_ok=True)
    tablefile.write_table(path, meta=meta, **table)
    print(f"wrote {path}: {len(table['configs'])} configs fitted to {source}")
    return path


def case_done(log, job: dict) -> bool:
    """Whether a case-measured family's job (a case of its plan) is in its log already."""
    return job["case_key"] in log


def measure_cases_and_fit(log, plan: list[dict], measure, what: str,
                          fit_and_write: Callable[[list[dict], str], Path]) -> Path:
    """Measure the cases of ``plan`` (``what`` says which) that ``log`` lacks, resuming it, then fit the table to
    the plan's measured cases: ``fit_and_write(cases, source)``."""
    print(f"{log.device['name']}: {len(plan)} cases of {what}; {sum(1 for c in plan if c['case_key'] in log)} in "
          f"{log.path} already")
    left = measure(log, plan, "cases")
    wanted = {c["case_key"] for c in plan}
    measured = [r for r in log.cases() if r["case_key"] in wanted]
    if not measured:
        raise ValueError(f"no case measured in {log.path}: nothing to fit")
    note = f" ({left} left unmeasured: a rerun resumes them)" if left else ""
    return fit_and_write(measured, f"bf16: {len(measured)} cases of {what}{note}")


def fit_case_table(family: str, header: dict, measured: list[dict], out: Path, source: str, fit, timing: str,
                   scales: str = "") -> Path:
    """Fit a case-measured family's table (of a scales mode, whose variants the cases timed) over its compiled
    bf16 variants (``fit(cases, variants, sm_count)`` gives the table's records, mapping multistage variants with
    the CTAs per SM the log's ``header`` recorded, if any) and write it as
    ``out/<gpu-slug>.<family>[.<scales>].wtt``."""
    record_ctas(header.get("ctas_per_sm", {}))
    kind = families.get(family)
    variants = [v for v in kind.list_configs() if v.dtype == "bf16"]
    if not variants:
        raise ValueError(f"no bf16 {family} variant is compiled: compile them first "
                         f"(python -m wavetune build --family {family})")
    table = fit(measured, variants, header["sm_count"])
    return write_family_table(out, header, family, kind.table_hash(scales), timing, source, table, scales)


def logs_source(logs: list[Path], measured: list[dict]) -> str:
    """How a table fitted to case logs names what it was fitted to."""
    return f"bf16: {len(measured)} cases of {', '.join(Path(p).name for p in logs)}"

"""Measuring a family's tuning plan: here, or spread over the GPUs of one host.

A family's tuning driver (``wavetune.families.<name>.tuning``) cuts its plan into jobs (JSON values: a
problem and the configs to time on it, or a case) and hands them to a ``Measurer`` with its log. The
measurer skips the jobs the log holds (a rerun resumes), shows a progress bar, and either measures here
or, with several devices, starts one worker process per GPU (``python -m wavetune.tuning.worker``): each
measures a shard of the jobs into a log of its own beside the main one, which is then merged into it.
The fit reads the main log only, so it does not depend on how the plan was measured.

The driver's side of the contract, for a family's tuning module:

    open_log(path, device=None, **options) -> MeasurementLog    the log jobs are measured into
    job_done(log, job) -> bool                                   whether the log holds the job
    measure_job(log, job, **options) -> None                     measure it (on this process's GPU)
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
import time
from types import ModuleType

from tqdm import tqdm

from .. import families
from .log import MeasurementLog


def parse_devices(text: str | None) -> list[int] | None:
    """``--devices 0,1,...`` as distinct device indices; None for none given."""
    if text is None:
        return None
    try:
        devices = [int(d) for d in text.split(",")]
    except ValueError:
        raise ValueError(f"--devices {text!r}: comma-separated CUDA device indices, e.g. 0,1") from None
    if not devices or any(d < 0 for d in devices) or len(set(devices)) != len(devices):
        raise ValueError(f"--devices {text!r}: distinct non-negative CUDA device indices, e.g. 0,1")
    return devices


def visible_device(index: int) -> str:
    """What CUDA_VISIBLE_DEVICES must say for a process to see device ``index`` of this one alone."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return str(index)
    listed = [d.strip() for d in visible.split(",") if d.strip()]
    if index >= len(listed):
        raise ValueError(f"device {index} is not visible here (CUDA_VISIBLE_DEVICES={visible})")
    return listed[index]


def shard(jobs: list, count: int) -> list[list]:
    """``jobs`` dealt round-robin into ``count`` shards: each job in exactly one, neighbours (problems of
    similar size, in plan order) spread over the shards."""
    return [jobs[i::count] for i in range(count)]


def probe_devices(devices: list[int], family: str) -> dict:
    """The properties of each device, with the family's multistage variants' CTAs per SM there (a short process
    per device, so this one does not touch CUDA); a ValueError unless all are one GPU model: a table is for one
    model."""
    found = {}
    for device in devices:
        done = subprocess.run([sys.executable, "-m", "wavetune.tuning.worker", "--properties", family],
                              capture_output=True, text=True,
                              env={**os.environ, "CUDA_VISIBLE_DEVICES": visible_device(device)})
        if done.returncode != 0:
            raise RuntimeError(f"device {device}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
        found[device] = json.loads(done.stdout.strip().splitlines()[-1])
    models = {(p["name"], p["sm_count"]) for p in found.values()}
    if len(models) > 1:
        listed = ", ".join(f"{d}: {p['name']} ({p['sm_count']} SMs)" for d, p in found.items())
        raise ValueError(f"--devices {','.join(map(str, devices))} are GPUs of different models ({listed}); a table "
                         "is for one GPU model: tune each model with devices of that model only")
    return found


@dataclasses.dataclass
class Measurer:
    """Measures jobs of one family into a log (``__call__``): here, or sharded over ``devices``.

    ``time_budget_s``: no job is started after that many seconds from the measurer's creation (what is
    left stays unmeasured; a rerun resumes it). ``options``: the driver's measurement options, passed to
    ``measure_job`` here and in the workers.
    """

    family: str
    devices: list[int] | None = None
    time_budget_s: float | None = None
    options: dict = dataclasses.field(default_factory=dict)
    device: dict | None = None  # the GPU's properties where they were probed (several devices)
    started: float = dataclasses.field(default_factory=time.monotonic)
    driver_module: str | None = None  # the driver (default: the family's tuning module)

    @property
    def driver(self) -> ModuleType:
        return importlib.import_module(self.driver_name)

    @property
    def driver_name(self) -> str:
        family = families.get(self.family)
        return self.driver_module or f"{family.package}.{family.tuning}"

    @property
    def sharded(self) -> bool:
        return self.devices is not None and len(self.devices) > 1

    def out_of_time(self) -> bool:
        return self.time_budget_s is not None and time.monotonic() - self.started > self.time_budget_s

    def __call__(self, log: MeasurementLog, jobs: list, desc: str) -> int:
        """Measure the jobs the log lacks; returns how many are left unmeasured (the time budget ran out)."""
        pending = [job for job in jobs if not self.driver.job_done(log, job)]
        if not pending:
            return 0
        if self.sharded:
            return self._sharded(log, pending, len(jobs), desc)
        bar = tqdm(total=len(jobs), initial=len(jobs) - len(pending), desc=desc, unit="job", dynamic_ncols=True)
        with bar:
            for done, job in enumerate(pending):
                if self.out_of_time():
                    tqdm.write(f"time budget spent: {len(pending) - done} {desc} jobs left unmeasured (a rerun "
                               "resumes them)", file=sys.stderr)
                    return len(pending) - done
                self.driver.measure_job(log, job, **self.options)
                bar.update()
        return 0

    def _sharded(self, log: MeasurementLog, pending: list, total: int, desc: str) -> int:
        """Start a worker per device on its shard of ``pending``, wait, merge their logs into ``log``."""
        workers = []
        budget = None if self.time_budget_s is None else max(0.0, self.time_budget_s - (time.monotonic() - self.started))
        print(f"{desc}: {len(pending)} of {total} jobs to measure, over GPUs {','.join(map(str, self.devices))}",
              file=sys.stderr)
        for position, (device, jobs) in enumerate(zip(self.devices, shard(pending, len(self.devices)))):
            if not jobs:
                continue
            shard_log = log.path.with_name(f"{log.path.name}.gpu{device}")
            spec = log.path.with_name(f"{log.path.name}.gpu{device}.jobs.json")
            spec.write_text(json.dumps({"driver": self.driver_name, "jobs": jobs, "options": self.options, "desc": desc,
                                        "device": device, "position": position, "time_budget_s": budget,
                                        "properties": log.device}))
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": visible_device(device)}
            command = [sys.executable, "-m", "wavetune.tuning.worker", str(spec), str(shard_log)]
            workers.append((device, shard_log, spec, subprocess.Popen(command, env=env)))
        failed = []
        for device, shard_log, spec, process in workers:
            if process.wait() != 0:
                failed.append(f"GPU {device} (exit status {process.returncode})")
            if shard_log.exists():
                log.merge(shard_log)  # what a failed worker measured is kept too
                shard_log.unlink()
            spec.unlink(missing_ok=True)
        if failed:
            raise RuntimeError(f"{desc}: the workers of {', '.join(failed)} failed; what they measured is in "
                               f"{log.path}, and a rerun resumes the rest")
        return sum(1 for job in pending if not self.driver.job_done(log, job))


def pin_device(devices: list[int] | None) -> None:
    """With one device named, make it this process's only visible GPU; call before anything starts CUDA."""
    if devices is not None and len(devices) == 1:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_device(devices[0])


# The SM count `tune --sms` confines measuring processes to; workers inherit it with the environment.
SMS_ENV = "WAVETUNE_TUNE_SMS"
_green_context = None  # kept alive: the process measures inside it


def confine_sms() -> None:
    """Where SMS_ENV names an SM count, run this process's CUDA work in a green context of that many SMs of its
    GPU (torch.cuda.green_contexts): the library then maps, measures and names the GPU as one of that many SMs
    (device_properties), so its tables are a smaller GPU's. Call before anything else starts CUDA."""
    global _green_context
    count = os.environ.get(SMS_ENV)
    if not count or _green_context is not None:
        return
    import torch

    green = getattr(torch.cuda, "green_contexts", None)
    if green is None or not getattr(green, "SUPPORTED", True) or not torch.cuda.is_available():
        raise RuntimeError(f"--sms {count} needs a CUDA GPU and a torch with CUDA green contexts "
                           "(torch.cuda.green_contexts)")
    _green_context = green.GreenContext.create(int(count), torch.cuda.current_device())
    (getattr(_green_context, "set_context", None) or _green_context.make_current)()


def measurer_for(family: str, devices: list[int] | None, time_budget_s: float | None = None,
                 options: dict | None = None) -> Measurer:
    """The measurer of a tuning run on ``devices`` (None, or one pinned with ``pin_device``: this process's
    GPU, measured here); several are probed to be one GPU model, then the jobs are sharded over them."""
    measurer = Measurer(family, devices, time_budget_s, dict(options or {}))
    if devices is not None and len(devices) > 1:
        measurer.device = probe_devices(devices, family)[devices[0]]
    return measurer

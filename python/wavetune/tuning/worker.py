"""A worker of a multi-GPU tuning run (``wavetune.tuning.runner``), started with CUDA_VISIBLE_DEVICES set to
its one GPU:

    python -m wavetune.tuning.worker JOBS.json SHARD_LOG    measure the jobs into the shard log
    python -m wavetune.tuning.worker --properties FAMILY     print the GPU's properties as JSON, with the
                                                             family's multistage variants' CTAs per SM
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path

from tqdm import tqdm

from ..runtime.device import device_properties
from .log import family_ctas
from .runner import confine_sms


def main(argv: list[str]) -> int:
    confine_sms()
    if argv[:1] == ["--properties"]:
        print(json.dumps({**device_properties(), "ctas_per_sm": family_ctas(argv[1])}))
        return 0
    spec_path, log_path = map(Path, argv)
    spec = json.loads(spec_path.read_text())
    driver = importlib.import_module(spec["driver"])
    # The GPU's properties as the main process probed them (all devices of a run are one model).
    log = driver.open_log(log_path, device=spec["properties"], **spec["options"])
    started, budget = time.monotonic(), spec["time_budget_s"]
    jobs = [job for job in spec["jobs"] if not driver.job_done(log, job)]
    with tqdm(total=len(spec["jobs"]), initial=len(spec["jobs"]) - len(jobs), desc=f"{spec['desc']} [GPU {spec['device']}]",
              unit="job", position=spec["position"], dynamic_ncols=True) as bar:
        for job in jobs:
            if budget is not None and time.monotonic() - started > budget:
                break
            driver.measure_job(log, job, **spec["options"])
            bar.update()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

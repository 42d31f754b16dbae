"""The FP8 grouped family's tuning (docs/grouped.md, "FP8"): the grouped family's (``grouped_gemm.tuning``) on
e4m3 operands with per-token and per-channel scales: every compiled FP8 grouped variant writing bf16 timed on
the cases of the MoE tune split whose K fills 16-byte e4m3 rows, the per-regime priors and wave models fitted,
``<gpu-slug>.scaled_grouped_gemm.wtt`` written.

    python -m wavetune tune --family scaled_grouped_gemm --out tables/ [--cases 600]
    python -m wavetune tune --family scaled_grouped_gemm --offline --log a.jsonl --out tables/
"""

from __future__ import annotations

from ..grouped_gemm.tuning import GroupedTuning, case_done
from . import FAMILY
from .api import scaled_grouped_configs

DRIVER = GroupedTuning(FAMILY.name, scaled_grouped_configs, scales="row")
open_log, measure_job, run = DRIVER.open_log, DRIVER.measure_job, DRIVER.run
job_done = case_done

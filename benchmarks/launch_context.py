"""How a long GEMM's measured time depends on what runs around it (docs/tuning.md, "Why each step").

    # docs/results.md#launch_order_h100.jsonl (the rows of the current profiler): one config against cuBLAS in the
    # table's order, reversed, and alone in pairs
    python benchmarks/launch_context.py order --table tables/nvidia-h100-80gb-hbm3.wtt --m 8324 --n 4096 \\
        --k 14336 --config bf16_bcol_swapab_cooperative_128x192x64_1x1_stream_k/data_parallel/1
    # docs/results.md#call_size_h200.jsonl: configs against cuBLAS in 3-launch calls after rest or load, and among
    # every config of the table (a config suffixed ':rule' is launched with its table micro rule)
    python benchmarks/launch_context.py call-size --table tables/nvidia-h200.wtt --m 7901 --n 28672 --k 4096 \\
        --config bf16_bcol_swapab_cooperative_128x224x64_2x1_persistent/data_parallel/1 \\
        --config bf16_bcol_pingpong_128x128x64_1x1_persistent/data_parallel/1:rule

Every call goes through tuning.profile, precise (as deployment tuning measures). Prints JSON lines: each
config's time over cuBLAS's in the same call, with the SM clock, temperature and power before and after
the call where nvidia-ml-py is installed.
"""

from __future__ import annotations

import argparse
import json
import time

from wavetune.families.gemm import tuning
from wavetune.families.gemm.comparison import table_launches
from wavetune.tuning import deploy, tablefile

LIBRARY = "cublas_bf16_bcol/data_parallel/1"


def gpu_state():
    """SM clock (MHz), temperature (C) and power (W) now, or None without nvidia-ml-py."""
    try:
        import pynvml
    except ImportError:
        return None
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    return {"sm_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            "temp": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
            "watts": round(pynvml.nvmlDeviceGetPowerUsage(h) / 1000)}


def timed_call(shape: tuple, runs: dict[str, tuple], names: list[str], seed: int, **fields) -> dict:
    """One precise profiler call of ``runs`` in their order; ``names``' times over cuBLAS's."""
    before = gpu_state()
    us = dict(zip(runs, tuning.profile(shape, list(runs.values()), seed=seed, precise=True)))
    return {**fields, "launches": len(runs), "before": before, "after": gpu_state(),
            "cublas_us": round(us[LIBRARY], 1), **{f"{name}_over_cublas": round(us[name] / us[LIBRARY], 3)
                                                    for name in names}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("study", choices=("order", "call-size"))
    p.add_argument("--table", required=True)
    p.add_argument("--m", type=int, required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--k", type=int, required=True)
    p.add_argument("--config", action="append", required=True, help="config key; ':rule' for its micro rule")
    p.add_argument("--reps", type=int, default=2)
    args = p.parse_args()
    table = tablefile.read_table(args.table)
    shape = ("bf16", "col", args.m, args.n, args.k)
    every = table_launches(table, [LIBRARY, *args.config, *(c.key for c in deploy.table_candidates(table, "bf16", "col")
                                                            .values())], args.m, args.n, args.k)
    chosen = {name: every[name] for name in (LIBRARY, *args.config)}
    for rep in range(args.reps):
        if args.study == "order":
            calls = {"table_order": every, "reversed": dict(reversed(every.items())), "pair": chosen,
                     "pair_reversed": dict(reversed(chosen.items()))}
            for name, runs in calls.items():
                print(json.dumps(timed_call(shape, runs, args.config, 7 + rep, rep=rep, call=name)), flush=True)
            continue
        time.sleep(3.0)
        print(json.dumps(timed_call(shape, chosen, args.config, 7 + rep, rep=rep, mode="cool")), flush=True)
        start = time.time()
        while time.time() - start < 2.0:  # two seconds of cuBLAS on the same problem
            tuning.profile(shape, [every[LIBRARY]], seed=1)
        print(json.dumps(timed_call(shape, chosen, args.config, 7 + rep, rep=rep, mode="hot")), flush=True)
        print(json.dumps(timed_call(shape, every, args.config, 7 + rep, rep=rep, mode="in_many")), flush=True)


if __name__ == "__main__":
    main()

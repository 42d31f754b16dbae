"""wavetune against its peers: the kernel each method picks for each shape of a suite, and how fast it runs.

    python benchmarks/compare.py measure --log h100.jsonl          # GPU; resumable; --skip-* to split it up
    python benchmarks/compare.py report --log h100.jsonl --out $OUT # no GPU needed: markdown, JSON, pictures
    python benchmarks/compare.py all --log h100.jsonl --out $OUT    # both
    python benchmarks/compare.py overhead                          # GPU: host time per call, alone

--log is the tuning log (`python -m wavetune tune --log ...`): its anchor measurements are the profiling
budget wavetune's table was fitted on, and the learned models are trained on exactly those. `measure` adds
to it, through the C++ profiler, every candidate config on every suite shape (the exhaustive oracle; its fastest configs also with
every swizzled raster option), the launches the table picks, and an M sweep for the model picture; it times cuBLAS (torch.matmul and
F.linear) and the oracle's config in torch into <log>.torch.jsonl, and the host cost of a call into
<log>.overhead.json. docs/benchmarks.md describes the methods, the mappings and the timing.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import importlib.util
import json
import math
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import wavetune
from wavetune import _C
from wavetune.families.gemm import comparison, tuning
from wavetune.families.gemm.tuning import Candidate
from wavetune.runtime import tables
from wavetune.tuning import model
from wavetune.tuning.report import M_RANGES, fmt, geomean, markdown_table, summarize

REPO = Path(__file__).resolve().parents[1]
SUITES = (REPO.parent / "shared" / "benchmarks" / "llm_shapes.json", REPO / "shared" / "benchmarks" / "llm_shapes.json")
# The M sweep of the model picture: data-parallel configs of four tile shapes, at one (N, K).
SWEEP_CONFIGS = ("pingpong_64x128x64_1x1_persistent", "cooperative_128x128x64_1x1_persistent",
                 "cooperative_128x256x64_1x2_persistent", "cooperative_256x128x64_2x1_persistent")
SWEEP_NK = (4096, 4096)
SWEEP_M = tuple(range(64, 8192 + 1, 64))
MAX_ERROR = 2e-2  # relative error (Frobenius) of a bf16 GEMM against cuBLAS above which a launch is wrong
TORCH_TIMING = ("torch: median of CUDA-graph replays after warm-up, operand copies (uniform [-1, 1)) rotated to "
                "exceed twice the L2, launch counts as the C++ profiler's (tuning.profile_options)")


# ------------------------------------------------------------------------------------------------
# Arguments and files
# ------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--log", required=True, type=Path, help="the tuning log (measurement JSON lines)")
    common.add_argument("--table", type=Path, help="wavetune table (default: the shipped one for the log's GPU)")
    common.add_argument("--shapes", type=Path, default=next((s for s in SUITES if s.exists()), SUITES[0]),
                        help="shape suite JSON, or one model's layer list ({layer: [N, K]})")
    common.add_argument("--models", help="comma-separated models of the suite (default: all)")
    common.add_argument("--m", help="comma-separated M values (default: the suite's)")
    common.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    common.add_argument("--b-layout", default="col", choices=("col", "row"))
    measure = sub.add_parser("measure", parents=[common], help="GPU: measure what the report needs (resumable)")
    report = sub.add_parser("report", parents=[common], help="every method's picks and times; no GPU needed")
    both = sub.add_parser("all", parents=[common], help="measure, then report")
    for s in (measure, both):
        s.add_argument("--skip-exhaustive", action="store_true", help="no profiler measurements of the suite")
        s.add_argument("--skip-cublas", action="store_true", help="no torch timings (cuBLAS, oracle config)")
        s.add_argument("--skip-sweep", action="store_true", help="no M sweep for the model picture")
        s.add_argument("--skip-overhead", action="store_true", help="no host launch-overhead timing")
    overhead = sub.add_parser("overhead", help="GPU: host time per call of each way to issue a GEMM, alone")
    overhead.add_argument("--table", type=Path, help="wavetune table (default: the shipped one for this GPU)")
    overhead.add_argument("--out", type=Path, help="also write the result to this JSON file")
    for s in (report, both):
        s.add_argument("--out", type=Path, default=Path("benchmark-results"), help="directory for compare.md/.json")
        s.add_argument("--img-dir", type=Path, help="directory for the pictures (default: OUT/img)")
        s.add_argument("--decision-time", type=Path,
                       help="output of benchmarks/cpp decision_time for the table (C++ decision cost)")
    return p.parse_args(argv)


def companion(log: Path, what: str) -> Path:
    """Files measure writes beside the log: <log>.torch.jsonl, <log>.overhead.json."""
    return log.with_name(f"{log.stem}.{what}")


def suite(args: argparse.Namespace) -> list[tuple[int, int, int]]:
    ms = [int(m) for m in args.m.split(",")] if args.m else None
    return comparison.load_shapes(args.shapes, args.models, ms)


def table_path(args: argparse.Namespace, gpu_name: str) -> Path:
    path = args.table or tables.default_table_path(gpu_name)
    if path is None:
        sys.exit(f"no wavetune table for {gpu_name}: pass --table")
    return Path(path)


def table_keys(selector) -> dict[int, str]:
    """Table config id -> candidate key ('variant/decomposition/splits')."""
    return {p["config"]: p["name"] for dtype in _C.DTYPES for b_layout in _C.B_LAYOUTS
            for p in selector.explain(dtype, b_layout, 1, 8, 8)}


def sweep_candidates(dtype: str, b_layout: str) -> list[Candidate]:
    by_key = {c.key: c for c in tuning.candidates(dtype, b_layout)}
    return [by_key[key] for s in SWEEP_CONFIGS if (key := f"{dtype}_b{b_layout}_{s}/data_parallel/1") in by_key]


class TorchLog:
    """Torch-timed latencies (cuBLAS, and wavetune configs for the timer comparison) as JSON lines: a header
    with the device and software, then {"problem", "method", "config", "us", "error"} records; resumable."""

    def __init__(self, path: Path, header: dict | None = None):
        self.path = path
        self.records: dict[tuple, float] = {}
        self.header = {}
        if path.exists():
            lines = path.read_text().splitlines()
            self.header = json.loads(lines[0])
            if header and self.header.get("gpu_name") != header["gpu_name"]:
                sys.exit(f"{path} was recorded on a {self.header.get('gpu_name')}, not a {header['gpu_name']}")
            for line in lines[1:]:
                r = json.loads(line)
                self.records[(*r["problem"], r["method"], r["config"])] = r["us"]
        elif header:
            self.header = header
            path.write_text(json.dumps(header) + "\n")

    def get(self, problem: tuple, method: str, config: str | None = None) -> float | None:
        return self.records.get((*problem, method, config))

    def add(self, problem: tuple, method: str, config: str | None, us: float, error: float) -> None:
        self.records[(*problem, method, config)] = us
        with self.path.open("a") as f:
            f.write(json.dumps({"problem": list(problem), "method": method, "config": config, "us": us,
                                "error": error}) + "\n")


# ------------------------------------------------------------------------------------------------
# measure (GPU)
# ------------------------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> None:
    import torch

    log = tuning.MeasurementLog(args.log)
    device = log.device
    cands = tuning.candidates(args.dtype, args.b_layout)
    selector = tables.open_table(table_path(args, device["name"]))
    keys = table_keys(selector)
    shapes = suite(args)
    print(f"{device['name']}: {len(shapes)} shapes x {len(cands)} configs")

    if not args.skip_exhaustive:
        for shape in tuning.progress(shapes, "exhaustive"):
            problem = (args.dtype, args.b_layout, *shape)
            runs = [(c, "heuristic", 1) for c in cands]
            for exact in (True, False):  # the table's picks, with their micro parameters
                pick = selector.select(*problem, exact=exact)
                runs.append((comparison.candidate_of(keys[pick["config"]]), pick["raster"], pick["max_swizzle"]))
            log.measure(problem, list(dict.fromkeys(runs)))
            log.measure(problem, comparison.micro_oracle_runs(log.records, problem, cands, device["sm_count"]))
        print(f"profiler: {log.measured} new measurements, {log.gpu_seconds:.1f} s")

    if not args.skip_sweep:
        sweep = sweep_candidates(args.dtype, args.b_layout)
        for m in tuning.progress(list(SWEEP_M), "M sweep"):
            log.measure((args.dtype, args.b_layout, m, *SWEEP_NK), [(c, "heuristic", 1) for c in sweep])

    if not args.skip_cublas:
        header = {"gpu_name": device["name"], "sm_count": device["sm_count"], "l2_bytes": device["l2_bytes"],
                  "driver": driver_version(), "cuda_runtime": torch.version.cuda, "torch": torch.__version__,
                  "timing": TORCH_TIMING}
        torch_log = TorchLog(companion(args.log, "torch.jsonl"), header)
        for shape in tuning.progress(shapes, "torch"):
            time_in_torch(torch, torch_log, log.records, cands, (args.dtype, args.b_layout, *shape), device["l2_bytes"])
            torch.cuda.empty_cache()

    if not args.skip_overhead:
        time_overhead(torch, table_path(args, device["name"]), companion(args.log, "overhead.json"))


def time_overhead(torch, table: Path, out: Path | None) -> None:
    overhead = launch_overhead(torch, table)
    if out is not None:
        out.write_text(json.dumps(overhead, indent=1) + "\n")
    print("host time per call (us):", {k: round(v, 2) for k, v in overhead["host_us_per_call"].items()})


def driver_version() -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None


def torch_operands(torch, problem: tuple, l2_bytes: int) -> list[tuple]:
    """(x [M, K], W [N, K], out [M, N]) copies, as many as the C++ profiler rotates for this problem."""
    dtype, _, m, n, k = problem
    copies, _ = comparison.rotation(m, n, k, l2_bytes, tuning.profile_options(m, n, k))
    opts = dict(device="cuda", dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[dtype])
    return [(torch.empty(m, k, **opts).uniform_(-1, 1), torch.empty(n, k, **opts).uniform_(-1, 1),
             torch.empty(m, n, **opts)) for _ in range(copies)]


def torch_time_us(torch, launch: Callable, operands: list[tuple], options: dict) -> float:
    """Median us per launch over CUDA-graph replays of launches that rotate through the operand copies:
    the C++ profiler's scheme (csrc/families/gemm/profiler.cu) with torch's graph and events."""
    per_graph = len(operands) * math.ceil(options["min_launches"] / len(operands))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside the capture: workspaces are allocated here
        for i in range(options["warmup"]):
            launch(*operands[i % len(operands)])
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for i in range(per_graph):
            launch(*operands[i % len(operands)])
    graph.replay()  # the first replay uploads the graph
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(options["replays"]):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / per_graph)
    return statistics.median(samples)


def time_in_torch(torch, torch_log: TorchLog, records: dict, cands: list[Candidate], problem: tuple,
                  l2_bytes: int) -> None:
    """cuBLAS (torch.matmul, F.linear) and the oracle's config (wavetune.gemm) on one problem, each checked
    against torch.matmul into a NaN-poisoned output first."""
    best = comparison.oracle(records, problem, cands)
    launches = {("torch.matmul", None): lambda x, w, out: torch.matmul(x, w.t(), out=out),
                ("F.linear", None): lambda x, w, out: torch.nn.functional.linear(x, w)}
    if best is not None:
        c = comparison.candidate_of(best[1])
        oracle_config = wavetune.LaunchConfig(c.variant.name, c.decomposition, c.splits)
        launches[("wavetune.gemm", best[1])] = lambda x, w, out: wavetune.gemm(x, w.t(), out=out,
                                                                               config=oracle_config)
    todo = {key: launch for key, launch in launches.items() if torch_log.get(problem, *key) is None}
    if not todo:
        return
    operands = torch_operands(torch, problem, l2_bytes)
    x, w, out = operands[0]
    reference = torch.matmul(x, w.t()).float()
    options = tuning.profile_options(*problem[2:])
    for (method, config), launch in todo.items():
        out.fill_(float("nan"))
        result = launch(x, w, out).float()
        error = (torch.linalg.vector_norm(result - reference) / torch.linalg.vector_norm(reference)).item()
        if not error <= MAX_ERROR:  # NaN too
            raise RuntimeError(f"{method} {config or ''} on {problem}: relative error {error} against torch.matmul")
        torch_log.add(problem, method, config, torch_time_us(torch, launch, operands, options), error)


def launch_overhead(torch, table: Path, shape=(8, 256, 256), calls=20000, repeats=5) -> dict:
    """Host time per call (us) of issuing a tiny GEMM from Python: a loop of calls timed on the host,
    synchronized only at the end, so the GPU (a few us per kernel) is never what the loop waits for.
    The layer calls (nn.Linear, wavetune.nn.Linear: what a patched model pays per layer in eager mode) run
    with weights that need no grad, as in inference."""
    from wavetune import nn as wnn  # registers torch.ops.wavetune

    m, n, k = shape
    x, w = (torch.empty(rows, k, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1) for rows in (m, n))
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    try:
        table_note = f"table {tables.load_table(table)['path']}"
        choice = tables.open_table(table).select("bf16", "col", m, n, k)["name"]  # which launch path is timed
    except (ValueError, FileNotFoundError) as exc:
        table_note, choice = f"no table ({exc}); the built-in heuristic decides", None
    compiled = [c.name for c in wavetune.configs() if c.dtype == "bf16" and c.b_layout == "col"]
    default = comparison.default_choice("bf16", "col").split("/")[0]
    forced = wavetune.LaunchConfig(default if default in compiled else compiled[0])
    layer = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16).requires_grad_(False)
    wavetune_layer = wnn.Linear.from_linear(layer)
    # gemm's launch, prepared once: what the native call costs without the Python front end
    prepared = _C.PreparedGemm(m, n, k, k, k, n, _C.DTYPES.index("bf16"), _C.B_LAYOUTS.index("col"),
                               torch.cuda.current_device())
    workspace = torch.empty(max(prepared.workspace_bytes, 1), dtype=torch.uint8, device="cuda")
    native = (x.data_ptr(), w.data_ptr(), 0, out.data_ptr(), workspace.data_ptr(), torch.cuda.current_stream().cuda_stream)
    calls_by_name = {
        "torch.matmul": lambda: torch.matmul(x, w.t(), out=out),
        "F.linear": lambda: torch.nn.functional.linear(x, w),
        "wavetune.gemm (table choice)": lambda: wavetune.gemm(x, w.t(), out=out),
        "wavetune.gemm (config given)": lambda: wavetune.gemm(x, w.t(), out=out, config=forced),
        "wavetune.gemm (table choice, new output)": lambda: wavetune.gemm(x, w.t()),
        "_C.PreparedGemm (table choice, arguments prepared)": lambda: prepared(*native),
        "nn.Linear layer (F.linear)": lambda: layer(x),
        "wavetune.nn.Linear layer (eager: the op's kernel, called directly)": lambda: wavetune_layer(x),
        "torch.ops.wavetune.linear.default (through the dispatcher)": lambda: torch.ops.wavetune.linear.default(x, w),
    }
    library = [c.name for c in wavetune.configs() if c.from_library and (c.dtype, c.b_layout) == ("bf16", "col")]
    for name in library:  # the cuBLAS launch, whatever the table chooses for this shape
        calls_by_name[f"wavetune.gemm (config given: {name})"] = (
            lambda name=name: wavetune.gemm(x, w.t(), out=out, config=name))
    result = {}
    for name, call in calls_by_name.items():
        for _ in range(100):
            call()
        torch.cuda.synchronize()
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                call()
            samples.append((time.perf_counter() - start) / calls * 1e6)
            torch.cuda.synchronize()
        result[name] = statistics.median(samples)
    return {"shape": [m, n, k], "calls": calls, "repeats": repeats, "table": table_note, "table_choice": choice,
            "host_us_per_call": result,
            "method": "median over repeats of (host time of `calls` back-to-back calls) / calls; synchronized after"}


# ------------------------------------------------------------------------------------------------
# report (no GPU)
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Method:
    """A way to pick a kernel, with what it cost to decide and to tune."""

    name: str
    what: str
    # shape -> (candidate key, raster, max_swizzle), and for wavetune the source ("exact" or "model")
    picks: dict = dataclasses.field(default_factory=dict)
    decision_ns: float | None = None
    decision_note: str = ""
    tuning_measurements: int = 0
    tuning_gpu_s: float = 0.0
    ratio: dict = dataclasses.field(default_factory=dict)  # shape -> oracle time / its time
    speedup: dict = dataclasses.field(default_factory=dict)  # shape -> cuBLAS (torch.matmul) time / its time


class Data:
    """What measure recorded, read back: profiler latencies, torch latencies, and lookups on them."""

    def __init__(self, args: argparse.Namespace):
        self.dtype, self.b_layout = args.dtype, args.b_layout
        self.header, self.records = comparison.read_log(args.log)
        self.torch = TorchLog(companion(args.log, "torch.jsonl"))
        overhead = companion(args.log, "overhead.json")
        self.overhead = json.loads(overhead.read_text()) if overhead.exists() else None
        self.sm_count, self.l2_bytes = self.header["sm_count"], self.header["l2_bytes"]
        self.cands = tuning.candidates(self.dtype, self.b_layout)
        shapes = suite(args)
        # A shape is judged where every candidate was measured. The oracle is the best default-micro launch
        # (its config is the one timed in torch); the best launch at any micro parameters is the reference
        # of every ratio.
        best = {s: comparison.oracle(self.records, self.problem(s), self.cands) for s in shapes}
        self.oracle = {s: b for s, b in best.items() if b is not None}
        self.shapes = list(self.oracle)
        self.best = {s: comparison.best_launch(self.records, self.problem(s), self.cands) for s in self.shapes}
        self.skipped_shapes = len(shapes) - len(self.shapes)

    def problem(self, shape: tuple) -> tuple:
        return (self.dtype, self.b_layout, *shape)

    def key(self, shape: tuple, config: str, raster: str = "heuristic", max_swizzle: int = 1) -> tuple:
        return (*self.problem(shape), config, raster, max_swizzle)

    def us(self, shape: tuple, config: str, raster: str = "heuristic", max_swizzle: int = 1) -> float | None:
        return self.records.get(self.key(shape, config, raster, max_swizzle))

    def torch_us(self, shape: tuple, method: str, config: str | None = None) -> float | None:
        return self.torch.get(self.problem(shape), method, config)

    def cost(self, keys) -> tuple[int, float]:
        """(measurements, kernel GPU-seconds) of the log records among ``keys``."""
        found = [k for k in keys if k in self.records]
        seconds = sum(comparison.kernel_seconds(*k[2:5], self.records[k], self.l2_bytes)
                      for k in found if self.records[k] is not None)
        return len(found), seconds


def timed_ns(choose: Callable, *args, **kwargs) -> tuple[object, int]:
    """choose(*args, **kwargs), and the ns it took."""
    start = time.perf_counter_ns()
    result = choose(*args, **kwargs)
    return result, time.perf_counter_ns() - start


def wavetune_methods(data: Data, selector, decision_time: dict | None, anchor_keys: set,
                     micro_keys: set) -> list[Method]:
    """The table as shipped (exact entries, then the model) and the model alone."""
    keys = table_keys(selector)
    cost = data.cost(anchor_keys | micro_keys)
    found = []
    for exact in (True, False):
        m = Method("wavetune (table)" if exact else "wavetune (model only)",
                   "the table's exact entry for the shape, else its model and priors" if exact else
                   "the wave-aware bilinear model over every candidate and the table's priors "
                   "(exact entries ignored)")
        cold = []
        for s in data.shapes:
            pick, ns = timed_ns(selector.select, *data.problem(s), exact=exact)
            cold.append(ns)
            m.picks[s] = (keys[pick["config"]], pick["raster"], pick["max_swizzle"], pick["source"])
        m.tuning_measurements, m.tuning_gpu_s = cost
        if exact:
            hits = [s for s in data.shapes if m.picks[s][3] == "exact"]
            # Exact entries cost the exhaustive measurement of their shapes.
            extra = data.cost({data.key(s, c.key) for s in hits for c in data.cands})
            m.tuning_measurements += extra[0]
            m.tuning_gpu_s += extra[1]
            m.what += f" ({len(hits)} of {len(data.shapes)} shapes hit an exact entry)"
        if decision_time:
            m.decision_ns = decision_time["cold_ns"]
            m.decision_note = (f"C++ decision_time: {decision_time['cold_ns']:.0f} ns cold (model over "
                               f"{decision_time['candidates']} candidates), {decision_time['warm_ns']:.1f} ns cached")
        else:
            m.decision_ns = statistics.median(cold)
            m.decision_note = "Python Selector.select, first call per shape (includes pybind11 and dict building)"
        found.append(m)
    return found


def learned_methods(data: Data, plan: dict) -> tuple[list[Method], dict, list[str]]:
    """HistGradientBoosting and a decision tree on log latency, trained on the anchor measurements only;
    each picks the argmin of its predictions over every candidate. Also returns their (M, predicted,
    measured) points for the accuracy table."""
    try:
        import sklearn
    except ImportError:
        return [], {}, ["learned models: scikit-learn is not installed"]
    rows, targets = [], []
    for shape, cs in plan.items():
        for c in cs:
            us = data.records.get(data.key(shape, c.key))
            if us is not None:
                rows.append(comparison.features(*shape, c, c.coordinates(*shape, data.sm_count)))
                targets.append(math.log(us))
    if not rows:
        return [], {}, ["learned models: the log has no anchor measurements to train on (make it with "
                        "`python -m wavetune tune --log LOG`)"]
    anchors = data.cost({data.key(shape, c.key) for shape, cs in plan.items() for c in cs})
    found, points = [], {}
    for name in comparison.LEARNED_MODELS:
        estimator = comparison.make_learned_model(name)
        start = time.perf_counter()
        estimator.fit(np.array(rows), np.array(targets))
        fit_s = time.perf_counter() - start
        m = Method(name, f"scikit-learn {sklearn.__version__} {type(estimator).__name__} (defaults, random_state=0) "
                         f"on log latency; {len(rows)} anchor measurements, {len(comparison.FEATURES)} features; "
                         f"argmin over candidates (fit: {fit_s:.2f} s CPU)")
        points[name] = []
        times = []
        for s in data.shapes:
            predicted, ns = timed_ns(predicted_log_us, estimator, data, s)
            times.append(ns)
            m.picks[s] = (data.cands[int(np.argmin(predicted))].key, "heuristic", 1)
            points[name] += [(s[0], math.exp(p), us) for c, p in zip(data.cands, predicted)
                             if (us := data.us(s, c.key)) is not None]
        m.decision_ns = statistics.median(times)
        m.decision_note = "Python: features of every candidate, then predict"
        m.tuning_measurements, m.tuning_gpu_s = anchors
        found.append(m)
    return found, points, []


def predicted_log_us(estimator, data: Data, shape: tuple) -> np.ndarray:
    """A learned model's log-latency prediction for every candidate on a shape: what one decision computes."""
    x = np.array([comparison.features(*shape, c, c.coordinates(*shape, data.sm_count)) for c in data.cands])
    return estimator.predict(x)


def nvmmh_methods(data: Data) -> tuple[list[Method], list[str]]:
    """nvMatmulHeuristics' top choice, once bounded to wavetune's tile and cluster shapes and once free, each
    mapped onto the nearest candidate (comparison.nearest_candidate)."""
    if importlib.util.find_spec("nvMatmulHeuristics") is None:
        return [], ["nvMatmulHeuristics: not installed (pip install .whl/nvidia_matmul_heuristics-*.whl)"]
    gpu = comparison.nvmmh_gpu(data.header["gpu_name"])
    if gpu is None:
        return [], [f"nvMatmulHeuristics: no predefined GPU matches {data.header['gpu_name']}"]
    found = []
    for bounded in (True, False):
        heuristics = comparison.NvMatmulHeuristics(gpu, data.dtype, data.b_layout, data.cands if bounded else None)
        version = importlib.metadata.version("nvidia-matmul-heuristics")
        among = "wavetune's tile and cluster shapes (validity callback)" if bounded else "every kernel it knows"
        m = Method("nvMatmulHeuristics (bounded)" if bounded else "nvMatmulHeuristics (free)",
                   f"nvidia-matmul-heuristics {version}, CUTLASS3 target, {gpu}, top choice among {among}, "
                   f"mapped to the nearest candidate")
        times, unmatched = [], 0
        for s in data.shapes:
            top, ns = timed_ns(heuristics.top, *s)
            times.append(ns)
            if top is None:
                unmatched += 1
                continue
            c = comparison.nearest_candidate(top["tile"], top["cluster"], top["split_k"], data.cands)
            m.picks[s] = (c.key, "heuristic", 1)
        if unmatched:
            m.what += f"; it returned no config for {unmatched} shapes"
        m.decision_ns = statistics.median(times)
        m.decision_note = "Python: one query through its ctypes wrapper (the mapping is not included)"
        found.append(m)
    return found, []


def simple_methods(data: Data) -> list[Method]:
    """The exhaustive oracle, the M-bucket heuristic and the single default config."""
    oracle = Method("oracle (exhaustive)", f"the fastest of the {len(data.cands)} candidates, measured on the shape "
                    f"(the {comparison.MICRO_ORACLE_TOP} fastest also with each swizzled raster option)")
    for s in data.shapes:
        oracle.picks[s] = data.best[s][1:]
    per_shape = [data.cost({data.key(s, c.key) for c in data.cands}
                           | {data.key(s, c.key, raster, swizzle) for c, raster, swizzle in
                              comparison.micro_oracle_runs(data.records, data.problem(s), data.cands, data.sm_count)})
                 for s in data.shapes]
    oracle.decision_ns = statistics.median(seconds for _, seconds in per_shape) * 1e9
    oracle.decision_note = "kernel time of measuring every candidate on the shape"
    oracle.tuning_measurements = sum(n for n, _ in per_shape)
    oracle.tuning_gpu_s = sum(seconds for _, seconds in per_shape)

    bucket = Method("M-bucket heuristic", "wavetune's built-in fallback: [fallback] M buckets of cutlass_configs/")
    times = []
    for s in data.shapes:
        key, ns = timed_ns(comparison.bucket_choice, data.dtype, data.b_layout, *s)
        times.append(ns)
        bucket.picks[s] = (key, "heuristic", 1)
    bucket.decision_ns = statistics.median(times)
    bucket.decision_note = "Python: _C.default_variant through pybind11 (the C++ loop alone is a few ns)"

    default = Method("single config", f"{comparison.DEFAULT_VARIANT}, data-parallel, on every shape")
    default.picks = {s: (comparison.default_choice(data.dtype, data.b_layout), "heuristic", 1) for s in data.shapes}
    default.decision_ns, default.decision_note = 0.0, "no decision"
    return [oracle, bucket, default]


def judge(data: Data, found: list[Method]) -> list[Method]:
    """Ratio to the oracle (profiler times) and speedup over cuBLAS per shape, for every method; adds the
    cuBLAS rows. Speedup over cuBLAS joins two same-timer ratios: (cuBLAS / oracle config, both timed in
    torch) x (oracle / method, both timed by the profiler)."""
    cublas = {s: data.torch_us(s, "torch.matmul") for s in data.shapes}
    oracle_torch = {s: data.torch_us(s, "wavetune.gemm", data.oracle[s][1]) for s in data.shapes}
    for m in found:
        for s, (key, raster, swizzle, *_) in m.picks.items():
            us = data.us(s, key, raster, swizzle)
            if us is None:
                continue
            m.ratio[s] = data.best[s][0] / us
            if cublas[s] and oracle_torch[s]:
                m.speedup[s] = data.oracle[s][0] / us * cublas[s] / oracle_torch[s]
    for method, what in (("torch.matmul", "cuBLAS through torch.matmul(x, W.t())"),
                         ("F.linear", "cuBLAS through torch.nn.functional.linear(x, W)")):
        m = Method(f"cuBLAS ({method})", what + ", timed in torch", decision_note="inside cuBLAS: see launch overhead")
        for s in data.shapes:
            us = data.torch_us(s, method)
            if us and oracle_torch[s]:
                m.ratio[s] = oracle_torch[s] / us
                m.speedup[s] = cublas[s] / us
        if m.ratio:
            found.append(m)
    return found


def accuracy(points: list[tuple[int, float, float]]) -> dict:
    """Prediction error |predicted - measured| / measured per M range: {range: {n, median, p90}}."""
    out = {}
    for name, lo, hi in M_RANGES:
        group = [(p, us) for m, p, us in points if lo <= m <= hi]
        if group:
            acc = model.accuracy(*zip(*group))
            out[name] = {"n": acc["n"], "median": acc["median"], "p90": acc["p90"]}
    return out


def report(args: argparse.Namespace) -> None:
    data = Data(args)
    if not data.shapes:
        sys.exit(f"no suite shape of {args.shapes} has every candidate measured in {args.log}: run measure first")
    table = table_path(args, data.header["gpu_name"])
    selector = tables.open_table(table)
    # The waves the table's plan profiled (fewer under `tune --budget`; tables before the key: all).
    waves = selector.meta().get("plan_waves")
    plan = tuning.anchor_plan(data.cands, data.sm_count, map(int, waves.split(",")) if waves else model.PLAN_WAVES)
    anchor_keys = {data.key(shape, c.key) for shape, cs in plan.items() for c in cs}
    # The micro stage's raster/swizzle runs, made at anchor shapes.
    micro_keys = {k for k in data.records if k[:2] == (data.dtype, data.b_layout) and k[2:5] in plan
                  and k[6:] != ("heuristic", 1)}
    decision_time = None
    if args.decision_time:
        decision_time = json.loads(args.decision_time.read_text().strip().splitlines()[-1])

    notes = []
    found = simple_methods(data) + wavetune_methods(data, selector, decision_time, anchor_keys, micro_keys)
    learned, learned_points, missing = learned_methods(data, plan)
    nvmmh, missing_nvmmh = nvmmh_methods(data)
    found = judge(data, found + learned + nvmmh)
    notes += missing + missing_nvmmh
    if not data.torch.records:
        notes.append(f"no torch timings ({companion(args.log, 'torch.jsonl')}): no cuBLAS comparison")

    wavetune_points = []
    for s in data.shapes:
        wavetune_points += [(s[0], p["predicted_us"], us) for p in selector.explain(*data.problem(s))
                            if (us := data.us(s, p["name"])) is not None]
    model_accuracy = {"wavetune": accuracy(wavetune_points)}
    model_accuracy.update({name: accuracy(points) for name, points in learned_points.items()})
    agreement = [prof / t for s in data.shapes
                 if (t := data.torch_us(s, "wavetune.gemm", data.oracle[s][1])) and (prof := data.oracle[s][0])]

    results = {
        "device": {k: data.header.get(k) for k in ("gpu_name", "sm_count", "l2_bytes")}
                  | {k: data.torch.header.get(k) for k in ("driver", "cuda_runtime", "torch")},
        "wavetune_build": wavetune.build_info(), "wavetune_version": wavetune.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "log": str(args.log), "table": str(table), "table_meta": selector.meta(), "shapes_file": str(args.shapes),
        "shapes": len(data.shapes), "shapes_without_every_measurement": data.skipped_shapes,
        "candidates": len(data.cands),
        "timing": {"profiler": data.header.get("timing"), "torch": data.torch.header.get("timing"),
                   "profiler_over_torch_for_the_oracle_config": summary_of(agreement)},
        "methods": [{"name": m.name, "what": m.what, "ratio_to_oracle": summarize(by_m(m.ratio)),
                     "speedup_over_cublas": summarize(by_m(m.speedup)), "decision_ns": m.decision_ns,
                     "decision": m.decision_note, "tuning_measurements": m.tuning_measurements,
                     "tuning_gpu_seconds": m.tuning_gpu_s, "shapes_judged": len(m.ratio)} for m in found],
        "model_accuracy": model_accuracy, "launch_overhead": data.overhead, "notes": notes,
        "wavetune": wavetune_details(data, found), "per_shape": per_shape(data, found),
    }
    img_dir = args.img_dir or args.out / "img"
    pictures = plots(data, selector, found, img_dir, notes)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compare.json").write_text(json.dumps(results, indent=1) + "\n")
    text = markdown(results, found, pictures, args.out)
    (args.out / "compare.md").write_text(text)
    print(text)
    print(f"wrote {args.out / 'compare.md'}, {args.out / 'compare.json'} and {len(pictures)} pictures in {img_dir}")


def wavetune_details(data: Data, found: list[Method]) -> dict:
    """The table's exact hits against its model's choices, and the model's worst choices."""
    by_name = {m.name: m for m in found}
    table, model_only = by_name["wavetune (table)"], by_name["wavetune (model only)"]
    hits = [s for s in table.ratio if table.picks[s][3] == "exact"]
    elsewhere = [s for s in table.ratio if table.picks[s][3] != "exact"]
    worst = []
    for s, ratio in sorted(model_only.ratio.items(), key=lambda item: item[1])[:8]:
        key, raster, swizzle, _ = model_only.picks[s]
        worst.append({"M": s[0], "N": s[1], "K": s[2], "chosen": f"{key} {raster} {swizzle}",
                      "chosen_us": data.us(s, key, raster, swizzle), "oracle": " ".join(map(str, data.best[s][1:])),
                      "oracle_us": data.best[s][0], "ratio": ratio})
    ratio_geomean = lambda shapes: geomean([table.ratio[s] for s in shapes]) if shapes else None  # noqa: E731
    return {"exact_hits": len(hits), "table_ratio_geomean_on_exact_hits": ratio_geomean(hits),
            "table_ratio_geomean_elsewhere": ratio_geomean(elsewhere), "model_worst_choices": worst}


def by_m(values: dict) -> list[tuple[int, float]]:
    return [(shape[0], v) for shape, v in values.items()]


def summary_of(values: list[float]) -> dict | None:
    if not values:
        return None
    q = np.percentile(values, [10, 50, 90])
    return {"n": len(values), "p10": q[0], "median": q[1], "p90": q[2]}


def per_shape(data: Data, found: list[Method]) -> list[dict]:
    rows = []
    for s in data.shapes:
        picks = {}
        for m in found:
            if s in m.picks:
                key, raster, swizzle, *_ = m.picks[s]
                picks[m.name] = {"config": key, "raster": raster, "max_swizzle": swizzle,
                                 "us": data.us(s, key, raster, swizzle), "ratio_to_oracle": m.ratio.get(s)}
            elif s in m.ratio:
                picks[m.name] = {"ratio_to_oracle": m.ratio[s]}
        rows.append({"M": s[0], "N": s[1], "K": s[2], "oracle": data.oracle[s][1], "oracle_us": data.oracle[s][0],
                     "best": " ".join(map(str, data.best[s][1:])), "best_us": data.best[s][0],
                     "torch_us": {"torch.matmul": data.torch_us(s, "torch.matmul"),
                                  "F.linear": data.torch_us(s, "F.linear"),
                                  "oracle config": data.torch_us(s, "wavetune.gemm", data.oracle[s][1])},
                     "picks": picks})
    return rows


def markdown(results: dict, found: list[Method], pictures: list[Path], out: Path) -> str:
    d = results["device"]
    lines = [
        "# wavetune against its peers", "",
        f"{d['gpu_name']} ({d['sm_count']} SMs, L2 {d['l2_bytes'] >> 20} MiB), driver {d['driver'] or '?'}, CUDA "
        f"runtime {d['cuda_runtime'] or '?'}, torch {d['torch'] or '?'}; wavetune {results['wavetune_version']} "
        f"(kernel set {results['wavetune_build']['kernel_set']}, config space "
        f"{results['wavetune_build']['config_space_hash']}); {results['date']}.",
        f"Command: `{results['command']}`.",
        f"{results['shapes']} shapes of `{results['shapes_file']}` with every one of the {results['candidates']} "
        f"candidates measured ({results['shapes_without_every_measurement']} left out for missing measurements); "
        f"table `{results['table']}`; log `{results['log']}`.", "",
        "Ratio to oracle: the exhaustive best's time over the method's pick's time (1 = the best; profiler "
        "times). The exhaustive best is the fastest launch measured on the shape: every candidate at default "
        f"micro parameters, the {comparison.MICRO_ORACLE_TOP} fastest of them "
        f"(within {comparison.MICRO_ORACLE_WITHIN}x, more than one wave) with each swizzled raster option, and "
        "the table's picks. Speedup over cuBLAS: "
        "torch.matmul's time over the pick's, as (cuBLAS / best default-micro config, both timed in torch) x "
        "(that config's profiler time / the pick's). Worst: the smallest over the shapes.", "",
    ]
    header = ["method", "shapes", "ratio to oracle: geomean", "worst", "speedup over cuBLAS: geomean", "worst",
              "decision (ns)", "tuning: measurements", "tuning: GPU-s"]
    rows = []
    for m in found:
        r, sp = summarize(by_m(m.ratio)).get("all", {}), summarize(by_m(m.speedup)).get("all", {})
        stats = (fmt(s.get(k), ".3f") for s in (r, sp) for k in ("geomean", "worst"))
        rows.append([m.name, str(len(m.ratio)), *stats,
                     fmt(m.decision_ns, ",.0f"), f"{m.tuning_measurements:,}", f"{m.tuning_gpu_s:,.1f}"])
    lines += [markdown_table(header, rows), ""]
    ranges = [name for name, *_ in M_RANGES]
    for title, attr in (("Ratio to oracle by M range: geomean (worst)", "ratio"),
                        ("Speedup over cuBLAS by M range: geomean (worst)", "speedup")):
        if not any(getattr(m, attr) for m in found):
            continue
        rows = []
        for m in found:
            s = summarize(by_m(getattr(m, attr)))
            rows.append([m.name] + [f"{s[r]['geomean']:.3f} ({s[r]['worst']:.3f})" if r in s else "-" for r in ranges])
        lines += [f"## {title}", "", markdown_table(["method", *ranges], rows), ""]
    rows = [[name] + [f"{a[r]['median']:.1%} / {a[r]['p90']:.1%}" if r in a else "-" for r in ranges]
            for name, a in results["model_accuracy"].items()]
    lines += ["## Prediction error, |predicted - measured| / measured over every (shape, candidate): median / p90",
              "", markdown_table(["model", *ranges], rows), ""]
    lines += ["## Methods, decision cost and tuning cost", ""]
    lines += [f"- **{m.name}**: {m.what}. Decision: {m.decision_note}." for m in found]
    agreement = results["timing"]["profiler_over_torch_for_the_oracle_config"]
    w = results["wavetune"]
    lines += ["", f"The table had an exact entry for {w['exact_hits']} of the {results['shapes']} shapes"
              + (f" (ratio to oracle there: {w['table_ratio_geomean_on_exact_hits']:.3f}; elsewhere: "
                 f"{fmt(w['table_ratio_geomean_elsewhere'], '.3f')})." if w["exact_hits"] else ".")]
    lines += ["", "## wavetune's model: worst choices", "", markdown_table(
        ["M", "N", "K", "chosen (raster, swizzle)", "us", "oracle", "us", "ratio"],
        [[str(r["M"]), str(r["N"]), str(r["K"]), r["chosen"], f"{r['chosen_us']:.1f}", r["oracle"],
          f"{r['oracle_us']:.1f}", f"{r['ratio']:.3f}"] for r in w["model_worst_choices"]])]
    lines += ["", "## Timing", "", f"- Profiler: {results['timing']['profiler']}."]
    if results["timing"]["torch"]:
        lines.append(f"- Torch: {results['timing']['torch']}.")
    if agreement:
        lines.append(f"- The two timers on the same launch (the oracle's config, {agreement['n']} shapes): profiler / "
                     f"torch median {agreement['median']:.3f} (p10 {agreement['p10']:.3f}, "
                     f"p90 {agreement['p90']:.3f}).")
    lines.append("- Tuning GPU-seconds: kernel time, the measured latency times the launches each measurement made "
                 "(warm-up, graph upload, replays); wall time adds allocation, operand fill and graph set-up.")
    overhead = results["launch_overhead"]
    if overhead:
        lines += ["", f"## Host time per call at M, N, K = {', '.join(map(str, overhead['shape']))} (bf16)", "",
                  f"{overhead['method']}; {overhead['table']}.", "",
                  markdown_table(["call", "us per call"],
                                         [[k, f"{v:.2f}"] for k, v in overhead["host_us_per_call"].items()])]
    if pictures:
        lines += ["", "## Pictures", ""] + [f"![{p.stem}]({p.relative_to(out) if p.is_relative_to(out) else p})"
                                            for p in pictures]
    if results["notes"]:
        lines += ["", "## Not compared", ""] + [f"- {n}" for n in results["notes"]]
    return "\n".join(lines) + "\n"


def plots(data: Data, selector, found: list[Method], img_dir: Path, notes: list[str]) -> list[Path]:
    """The M sweep against the model (one panel per config, wave boundaries dashed), and the distributions
    of ratio to oracle and speedup over cuBLAS per method."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        notes.append("pictures: matplotlib is not installed")
        return []
    img_dir.mkdir(parents=True, exist_ok=True)
    written = []
    sweep = sweep_candidates(data.dtype, data.b_layout)
    n, k = SWEEP_NK
    measured = {c.key: [(m, us) for m in SWEEP_M if (us := data.us((m, n, k), c.key)) is not None] for c in sweep}
    if any(measured.values()):
        fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True)
        dense = range(8, SWEEP_M[-1] + 1, 8)
        predicted = {m: {p["name"]: p["predicted_us"] for p in selector.explain(data.dtype, data.b_layout, m, n, k)}
                     for m in dense}
        for ax, c in zip(axes.flat, sweep):
            waves = [c.coordinates(m, n, k, data.sm_count)[3] for m in dense]
            for m, w, w_next in zip(dense, waves, waves[1:]):
                if w_next != w:
                    ax.axvline(m + 4, color="0.8", ls="--", lw=0.8)
            ax.plot(dense, [predicted[m].get(c.key, math.nan) for m in dense], color="C1", label="model (table)")
            if measured[c.key]:
                ax.plot(*zip(*measured[c.key]), "o", ms=3, color="C0", label="measured (profiler)")
            ax.set_title(c.variant.name.removeprefix(f"{data.dtype}_b{data.b_layout}_"), fontsize=9)
            ax.set_xlabel("M (tokens)")
            ax.set_ylabel("us")
        axes.flat[0].legend(title="dashed: wave boundaries", fontsize=8)
        fig.suptitle(f"{data.header['gpu_name']}: latency against M at N = {n}, K = {k} "
                     f"({data.dtype}, {data.b_layout}-major B)")
        fig.tight_layout()
        written.append(img_dir / "m_sweep.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)
    else:
        notes.append("M sweep picture: no sweep measurements in the log (measure without --skip-sweep)")

    panels = [(attr, label) for attr, label in (("ratio", "ratio to oracle (1 = exhaustive best)"),
                                                ("speedup", "speedup over cuBLAS (torch.matmul)"))
              if any(getattr(m, attr) for m in found)]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 5), squeeze=False)
    for ax, (attr, label) in zip(axes[0], panels):
        for i, m in enumerate(found):
            values = sorted(getattr(m, attr).values())
            if values:
                ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", label=m.name,
                        color=f"C{i % 10}", ls="-" if i < 10 else "--")
        ax.axvline(1.0, color="0.5", lw=0.8)
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of shapes at or below")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{data.header['gpu_name']}: {len(data.shapes)} shapes")
    fig.tight_layout()
    written.append(img_dir / "distributions.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)
    return written


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.command in ("measure", "all"):
        measure(args)
    if args.command in ("report", "all"):
        report(args)
    if args.command == "overhead":
        import torch

        time_overhead(torch, table_path(args, wavetune.device_properties()["name"]), args.out)


if __name__ == "__main__":
    main()

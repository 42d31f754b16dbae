"""Command line: ``python -m wavetune {info,tune,explain,build}`` and ``python -m wavetune --cmake-dir``.

The kernel families (``--family``) are those of the registry (``wavetune.families``).

Errors a user can fix end the command with one line on stderr and exit status 2; ``WAVETUNE_DEBUG=1``
shows the traceback instead.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import sys
from pathlib import Path

from . import families
from .families.gemm.api import configs
from .runtime import tables
from .runtime.device import build_info, device_properties, no_gpu_reason, package_version
from .runtime.native import _C
from .tuning import deploy, model


def cmake_dir() -> Path:
    """The directory to put on CMAKE_PREFIX_PATH for ``find_package(wavetune)``."""
    return Path(__file__).parent / "share" / "cmake" / "wavetune"


def shipped_tables() -> str:
    return ", ".join(sorted(p.name for p in tables.TABLE_DIR.glob("*.wtt"))) or "none"


def cmd_info(args: argparse.Namespace) -> int:
    build = build_info()
    cuda, cutlass = build["cuda_version"], build["cutlass_version"]
    print(f"wavetune {package_version()}, kernel set {build['kernel_set']!r}, config space {build['config_space_hash']}, "
          f"CUDA {cuda // 1000}.{cuda % 1000 // 10}, CUTLASS {cutlass // 100}.{cutlass // 10 % 10}.{cutlass % 10}")
    for family in families.all():
        variants = family.list_configs()
        print(f"{family.name}: {compiled_count(family, len(variants))}" + (":" if variants else ""))
        for v in variants:
            print(f"  {v.name}")
    print(f"shipped tables ({tables.TABLE_DIR}): {shipped_tables()}")
    if (reason := no_gpu_reason()) is not None:
        print(f"GPU: none ({reason}); tables can be read and explained without one: "
              "python -m wavetune explain M N K --table PATH")
        return 0
    device = device_properties()
    print(f"GPU: {device['name']}, {device['sm_count']} SMs, L2 {device['l2_bytes'] >> 20} MiB, "
          f"sm_{''.join(map(str, device['compute_capability']))}")
    for family in families.names():
        for scales in tables.scales_modes(family):
            print_table(device["name"], family, scales)
    return 0


def compiled_count(family: families.Family, count: int) -> str:
    """How ``info`` counts a family's compiled variants; a family without a config space has no variants to
    choose among, its kernels are built in."""
    if not count and not family.config_space:
        return "its kernels are built in (no variants to choose among)"
    return f"{count} variant{'' if count == 1 else 's'} compiled"


def print_table(gpu_name: str, family: str, scales: str = "") -> None:
    """Which table of a family and scales mode the device uses, loading it as a first call would."""
    what = family + (f" ({scales} scales)" if scales else "")
    table = tables.default_table_path(gpu_name, family, scales)
    if table is None:
        print(f"{what} table: none for this GPU (looked for {tables.table_file_name(gpu_name, family, scales)} in "
              f"{tables.TABLE_DIR} and ${tables.table_env(family, scales)}); {what} uses the built-in heuristic")
        return
    try:
        info = tables.load_table(table, family=family, scales=scales)
    except ValueError as exc:
        print(f"{what} table: {table} does not fit this build; {what} uses the built-in heuristic ({exc})")
        return
    print(f"{what} table: {table} ({info['configs']} configs, {info['exact']} exact ranges, "
          f"{info['skipped_configs']} configs skipped as not compiled)")


def default_log(args: argparse.Namespace) -> Path:
    """--log, else ``<family>[.<scales>]-measurements.jsonl`` in the --out directory (the current one for
    --shapes)."""
    if args.log:
        return Path(args.log)
    out = Path(args.out or ("." if args.shapes else "tables"))
    scales = f".{args.scales}" if getattr(args, "scales", "") else ""
    return (out.parent if out.suffix == ".wtt" else out) / f"{args.family}{scales}-measurements.jsonl"


def is_benchmark_log(path: str) -> bool:
    """Whether ``path`` is a log of benchmarks/grouped.py or benchmarks/attention.py (its header names the GPU
    as ``gpu``; tuning's own logs say ``gpu_name``)."""
    try:
        with open(path) as f:
            header = json.loads(f.readline())
    except (OSError, ValueError):
        return False
    return isinstance(header, dict) and "gpu" in header and "gpu_name" not in header


def cmd_tune(args: argparse.Namespace) -> int:
    from .tuning import runner

    if not families.get(args.family).tuning:
        raise ValueError(f"the {args.family} family has no tuning driver: its variants are chosen by its built-in "
                         f"wave model ({families.get(args.family).doc})")
    if args.family != "gemm" and not args.offline and args.log and all(map(is_benchmark_log, args.log.split(","))):
        # NOTES: before the families measured their own cases, `tune --family F --log LOGS` fitted a table to
        # benchmarks/grouped.py or benchmarks/attention.py logs; such logs are still fitted, as --offline does.
        print(f"wavetune tune: fitting {args.log} (benchmark logs) without measuring, as --offline does",
              file=sys.stderr)
        args.offline = True
    args.log = str(default_log(args))
    if args.shapes:
        deploy.run(Path(args.shapes), args.out and Path(args.out), Path(args.log), args.table and Path(args.table),
                   args.dtype, args.b_layout, args.tp, args.models, args.max_m, args.top)
        return 0
    devices = None if args.offline else runner.parse_devices(args.devices)
    runner.pin_device(devices)  # before no_gpu_reason starts CUDA
    if args.sms is not None and not args.offline:
        os.environ[runner.SMS_ENV] = str(args.sms)
        runner.confine_sms()
    if not args.offline and (reason := no_gpu_reason()) is not None:
        raise RuntimeError(f"{reason}: tune measures kernels on the GPU it tunes for; without one, "
                           "--offline --log FILE refits a table from the measurement log of an earlier tuning")
    options = {"scales": args.scales} if args.scales else None  # the driver's measurement options
    measure = runner.measurer_for(args.family, devices, args.time_budget, options)
    families.get(args.family).module("tuning").run(args, measure)
    return 0


def explain_table(args: argparse.Namespace) -> Path:
    """--table, or the table of this GPU where there is one."""
    if args.table:
        return Path(args.table)
    if (reason := no_gpu_reason()) is not None:
        raise ValueError(f"{reason}: pass the table to explain with --table PATH (shipped in {tables.TABLE_DIR}: "
                         f"{shipped_tables()})")
    name = device_properties()["name"]
    family = args.family or "gemm"
    table = tables.default_table_path(name, family, args.scales)
    if table is None:
        raise ValueError(f"no {family} table{f' of {args.scales} scales' if args.scales else ''} for {name}: pass "
                         "--table PATH")
    return table


def checked_size(name: str, value: int, largest: int) -> int:
    """``value`` if it is in [1, largest]; else a ValueError naming the argument and the range (before the
    value reaches the native module, which takes 64-bit integers)."""
    if not 1 <= value <= largest:
        raise ValueError(f"{name}={value} is out of range: it must be in [1, {largest}]")
    return value


def explain_heads(text: str) -> tuple[int, int]:
    """--heads QUERY_HEADS,KV_HEADS as two counts."""
    parts = text.split(",")
    if len(parts) != 2 or not all(part.strip().isdigit() for part in parts):
        raise ValueError(f"--heads {text!r}: --heads takes QUERY_HEADS,KV_HEADS, two counts such as 32,8")
    return tuple(checked_size(f"--heads {name}", int(part), _C.MAX_GROUPS)
                 for name, part in zip(("QUERY_HEADS", "KV_HEADS"), parts))


def check_explain_args(args: argparse.Namespace) -> None:
    """explain's numbers, each in the range the lookup takes."""
    for name in ("M", "N", "K"):
        checked_size(name, getattr(args, name), _C.MAX_EXTENT)
    checked_size("--groups", args.groups, _C.MAX_GROUPS)
    if args.top < 1:
        raise ValueError(f"--top {args.top}: list at least 1 config")


def table_family(table: Path, requested: str | None) -> str:
    """The kernel family the table file says it is for, as the loader reads it (meta ``family``); --family,
    where given, must agree."""
    family = _C.table_family(str(table))  # the loader's error where the file is not a readable table
    if requested not in (None, family):
        raise ValueError(f"{table} is a table of the {family} family, not {requested}: pass --family {family} "
                         "or leave --family out")
    return family


def explain_selector(table: Path, family: str):
    """(selector, configs it explains from the config space): the table bound to the variants a full install
    runs, the compiled ones and the config space's others (on a GPU they compile on demand), so that explain
    shows the table's choices on any build."""
    from .runtime import jit

    selector = tables.open_table(table, family)  # the loader's checks of the file, as load_table makes them
    missing = jit.missing_variants(family) if selector.skipped_configs() else []
    if not missing:
        return selector, 0
    variants = [dataclasses.asdict(c) for c in [*families.get(family).list_configs(), *missing]]
    full = _C.Selector(str(table), family, variants)
    return full, selector.skipped_configs() - full.skipped_configs()


def explain_notes(selector, table: Path, from_space: int) -> list[str]:
    """What explain does with a table's configs this build has not compiled, and that a choice among fewer
    configs than the table's is not necessarily what a full install on the GPU chooses."""
    notes, kernel_set = [], build_info()["kernel_set"]
    if from_space:
        notes.append(f"note: {from_space} of the table's {selector.config_count()} configs name variants this "
                     f"build has not compiled (kernel set {kernel_set!r}): they are explained as a full install "
                     f"runs them (on a GPU they compile on demand; python -m wavetune build --table {table} "
                     "compiles them ahead)")
    if not (skipped := selector.skipped_configs()):
        return notes
    cublas = 0 if any(c.name.startswith("cublas_") for c in configs()) else sum(
        1 for name in selector.variant_names() if name.startswith("cublas_"))
    why = ("cuBLAS's: libcublas cannot be loaded here" if cublas == skipped
           else f"their variants are not in this build, kernel set {kernel_set!r}")
    notes.append(f"note: {skipped} of the table's {selector.config_count()} configs are left out ({why}): the choice "
                 f"below is among the {selector.config_count() - skipped} others, not necessarily what the GPU "
                 "chooses")
    return notes


def print_floors(selector, args: argparse.Namespace) -> None:
    """The table's floors under every prediction, for this problem."""
    if bandwidth := selector.memory_bytes_per_us():
        floor = model.memory_floor_us(args.M, args.N, args.K, bandwidth, args.groups)
        print(f"memory floor: {floor:.2f} us (A, B and D at {bandwidth / 1e6:.2f} TB/s, the fastest traffic "
              f"measured while tuning; no prediction is lower)")
    if rate := selector.traffic_bytes_per_us():
        print(f"traffic floor: each config's tile traffic (G*L K-steps of both operand tiles) at {rate / 1e6:.2f} "
              f"TB/s, the fastest measured while tuning; no prediction of that config is lower")
    if rate := selector.compute_flop_per_us():
        print(f"compute floor: {model.compute_floor_us(args.M, args.N, args.K, rate):.2f} us (2*M*N*K at "
              f"{rate / 1e6:.0f} TFLOP/s, the fastest measured while tuning; no calibrated prediction is lower)")


def cmd_explain(args: argparse.Namespace) -> int:
    check_explain_args(args)
    heads = explain_heads(args.heads)
    table = explain_table(args)
    family = table_family(table, args.family)
    selector, from_space = explain_selector(table, family)
    problem = (args.dtype, args.b_layout, args.M, args.N, args.K)
    # The problem key fields the table's family names, of those the options give (the others take their defaults).
    options = dict(heads_q=heads[0], heads_kv=heads[1], causal=int(args.causal))
    key = {name: options[name] for name in selector.key_fields if name in options}
    rows = sorted(selector.explain(*problem, args.groups, **key), key=lambda r: r["predicted_us"])
    sizes = families.SizeProblem(args.M, args.N, args.K, args.groups, _C.DTYPES.index(args.dtype),
                                 _C.B_LAYOUTS.index(args.b_layout), key, selector.scales)
    if error := families.get(family).size_error(sizes):
        raise ValueError(f"the {family} family does not run this problem: {error}")
    choice = selector.select(*problem, groups=args.groups, **key)
    scales = f" ({selector.scales} scales)" if selector.scales else ""
    print(f"{table}: {family} table{scales} of {selector.meta()['gpu_name']}, {selector.sm_count()} SMs")
    for note in explain_notes(selector, table, from_space):
        print(note)
    print_floors(selector, args)
    print(f"{'config':<70} {'G':>7} {'L':>6} {'waves':>5} {'pred us':>9}")
    for r in rows[: args.top]:
        mark = "" if r["choosable"] else "  (not chosen: stream-K outside its model, docs/model.md section 7)"
        print(f"{r['name']:<70} {r['grid']:>7} {r['k_iters']:>6} {r['waves']:>5} {r['predicted_us']:>9.2f}{mark}")
    fastest = next((r for r in rows if r["choosable"]), None)
    if choice["source"] == "exact":
        how = "exact table: a tuned range of this layer holds this M"
    elif fastest and choice["config"] != fastest["config"]:
        how = "the table's prior for this M (per busy group): no config is predicted faster by more than its margin"
    else:
        how = "model: lowest predicted latency of the candidates above"
    print(f"choice: {choice['name']} raster={choice['raster']} max_swizzle={choice['max_swizzle']} "
          f"({choice['predicted_us']:.2f} us, {how})")
    if (invariant := invariant_choice(selector, problem, args.groups, key)) is not None:
        print_k_orders(rows)
        print(f"batch-invariant choice: {invariant}")
    return 0


def print_k_orders(rows: list[dict]) -> None:
    """How many of the candidates sum K in each fixed order, and how many in one that depends on M (which
    batch-invariant mode never chooses)."""
    orders = collections.Counter(r["reduction_order"] if r["batch_invariant"] else None for r in rows)
    print("K orders (batch-invariant mode chooses one per layer): " + "; ".join(
        f"{order}: {count}" for order, count in orders.items() if order is not None)
        + f"; depends on M: {orders[None]}")


def invariant_choice(selector, problem: tuple, groups: int, key: dict) -> str | None:
    """The batch-invariant mode's choice for the problem and its K order (docs/torch.md, "Batch-invariant mode");
    None for a table that has none of its own (attention: its family's choose fixes the batch instead)."""
    if not selector.selects_batch_invariantly:
        return None
    try:
        choice = selector.select(*problem, groups=groups, batch_invariance="reduction_order", **key)
    except ValueError as exc:
        return f"none ({exc})"
    rows = selector.explain(*problem, groups, **key)
    order = next(r["reduction_order"] for r in rows if r["config"] == choice["config"])
    return f"{choice['name']} ({choice['predicted_us']:.2f} us; {order}, the order of every M of this layer)"


def check_tune_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The option combinations ``tune`` refuses, each with what to do instead (exit status 2)."""
    if args.family != "gemm" and (args.shapes or args.exact or args.budget or args.no_micro):
        parser.error(f"--family {args.family} measures its cases (--cases, --time-budget); --shapes, --exact, "
                     "--budget and --no-micro are options of the gemm family")
    if args.family == "gemm" and (args.cases is not None or args.time_budget is not None):
        parser.error("--cases and --time-budget are options of the grouped_gemm and attention families; gemm's "
                     "measurements are capped by --budget N")
    if args.shapes and (args.exact or args.budget or args.no_micro or args.offline):
        parser.error("--shapes adds a model's layers to an existing table; --exact, --budget, --no-micro and "
                     "--offline are options of the table's own tuning")
    if args.devices is not None and (args.offline or args.shapes):
        parser.error("--devices spreads measurements over GPUs; --offline measures nothing and --shapes runs on "
                     "the current GPU")
    if args.cases is not None and args.cases < 1:
        parser.error(f"--cases {args.cases}: at least 1")
    if args.sms is not None and (args.sms < 1 or args.offline or args.shapes):
        parser.error(f"--sms {args.sms}: a positive SM count, for a tuning run that measures (not --offline or "
                     "--shapes)")
    if args.scales not in tables.scales_modes(args.family):
        modes = ", ".join(m for m in tables.scales_modes(args.family) if m) or "none"
        parser.error(f"--scales {args.scales}: the {args.family} family's tables have scales modes: {modes}")
    if args.time_budget is not None and args.time_budget <= 0:
        parser.error(f"--time-budget {args.time_budget}: a positive number of seconds")
    if args.offline and args.family == "gemm" and args.log and "," in args.log:
        parser.error("--offline refits gemm's table from one log (--log FILE)")
    if args.devices is not None:
        try:
            from .tuning.runner import parse_devices

            parse_devices(args.devices)
        except ValueError as exc:
            parser.error(str(exc))


def cmd_build(args: argparse.Namespace) -> int:
    from .runtime import jit

    chosen = [option for option in ("table", "family", "all") if getattr(args, option)]
    if len(chosen) != 1:
        raise ValueError("say what to compile with one of --table PATH, --family F or --all")
    if args.family:
        jit.check_family(args.family)
    if (reason := jit.unavailable_reason()) is not None:
        raise RuntimeError(f"variants cannot be compiled here: {reason}")
    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {args.jobs}")
    gpu = jit.GpuArch.named(args.arch) if args.arch else jit.current_gpu_arch()
    for family, variants in jit.build_requests(args.table and Path(args.table), args.family, args.all, gpu):
        if not variants:
            print(f"{family}: every variant asked for that runs on sm{gpu.served} is compiled already")
            continue
        built = jit.build(family, variants, jobs=args.jobs, progress=True, gpu=gpu)
        compiled = sum(b.compiled for b in built)
        places = ", ".join(sorted({str(b.library.parent) for b in built}))
        print(f"{family}: {compiled} compiled, {len(built) - compiled} found in the cache ({places}):")
        for b in built:
            print(f"  {b.name}{'' if b.compiled else ' (cached)'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m wavetune",
        description="wavetune: wave-aware kernel selection for LLM inference on NVIDIA GPUs from Ampere on. "
                    "Errors end with one line and exit status 2 (WAVETUNE_DEBUG=1 shows the traceback).")
    parser.add_argument("--cmake-dir", action="store_true", help="print the CMake package directory and exit")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("info", help="GPU, compiled variants, table in use")

    tune = sub.add_parser("tune", help="profile this GPU, fit the model, write a kernel family's table; with "
                                       "--shapes, add a model's layers to a table as exact ranges along M")
    tune.add_argument("--family", default="gemm", choices=families.names(),
                      help="the kernel family to tune (default: %(default)s): its table is <gpu>.wtt for gemm, "
                           "<gpu>.<family>.wtt for the others")
    tune.add_argument("--scales", default="", metavar="MODE",
                      help="grouped_gemm: the scales mode whose table to tune (row, block128: e4m3 variants with "
                           "those scales; default: 16-bit operands), written as <gpu>.<family>.<scales>.wtt")
    tune.add_argument("--out", help="directory for the table (default: tables; with --shapes: the current "
                                    "directory), or with --shapes a .wtt file")
    tune.add_argument("--log", help="measurement log (default: <family>-measurements.jsonl in the --out directory); "
                                    "an existing log of the same GPU, family and build is resumed. With --offline "
                                    "and another family than gemm: a comma-separated list of logs, this command's "
                                    "or benchmarks/grouped.py's (--suite tune) / benchmarks/attention.py's "
                                    "(--suite named), of one GPU model")
    tune.add_argument("--devices", metavar="I,J,...",
                      help="CUDA devices to measure on (default: the current one): several spread the measurements "
                           "over GPUs of one host and one model, a worker process each, then one table is fitted")
    tune.add_argument("--cases", type=int, metavar="N",
                      help="grouped_gemm / attention: measure the first N cases of the family's plan (grouped_gemm: "
                           "600 cases of the tune split; attention: the named suite's)")
    tune.add_argument("--time-budget", type=float, metavar="SECONDS",
                      help="grouped_gemm / attention: start no case after SECONDS and fit what is measured (a rerun "
                           "resumes the rest)")
    tune.add_argument("--sms", type=int, metavar="N",
                      help="tune a GPU of N SMs: measure in a CUDA green context of N SMs of this GPU (torch's "
                           "green contexts), where the table is named and checked as that smaller GPU's")
    tune.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    tune.add_argument("--b-layout", default="col", choices=["col", "row"])
    tune.add_argument("--exact", help="shape-suite JSON whose shapes are profiled exhaustively into the exact table")
    tune.add_argument("--models", help="comma-separated models of a shape-suite --exact or --shapes file "
                                       "(default: all)")
    tune.add_argument("--shapes", metavar="FILE",
                      help="deployment tuning: a model's layers (a shape-suite JSON of (N, K) per model, or a Hugging "
                           "Face config.json), measured along M and written as exact ranges into a copy of --table")
    tune.add_argument("--table", help="with --shapes: the table to copy (default: the installed one for this GPU)")
    tune.add_argument("--max-m", type=int, default=16384, help="with --shapes: the ranges cover M 1..MAX_M "
                      "(the LM head's up to 512)")
    tune.add_argument("--tp", type=int, default=1, help="with a config.json: tensor-parallel ranks (column-parallel "
                      "layers split N, row-parallel ones K)")
    tune.add_argument("--top", type=int, default=deploy.TOP_CANDIDATES, help="with --shapes: how many of the model's "
                      "fastest predictions contend at each M, besides the table's choice, its prior and the screen's "
                      "fastest (default: %(default)s)")
    tune.add_argument("--no-micro", action="store_true", help="skip the raster/swizzle stage")
    tune.add_argument("--offline", action="store_true",
                      help="measure nothing: refit the table from --log (recorded on its GPU with this build)")
    tune.add_argument("--budget", type=int, metavar="N",
                      help="at most N measurements for the model (anchors, raster/swizzle runs, then as many "
                           "calibration shapes as the rest allows): fewer wave regimes are profiled and the model "
                           "bridges the others; --exact shapes come on top")

    explain = sub.add_parser("explain", help="predicted latency of every config for one problem, and the choice")
    explain.add_argument("M", type=int, help="rows of A: tokens (grouped: all experts' rows; attention: query length)")
    explain.add_argument("N", type=int, help="columns of the output: out_features (attention: KV length)")
    explain.add_argument("K", type=int, help="the reduction: in_features (attention: head dim)")
    explain.add_argument("--table", help="table file (default: the installed one for this GPU); no GPU needed")
    explain.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    explain.add_argument("--b-layout", default="col", choices=["col", "row"])
    explain.add_argument("--top", type=int, default=15, help="configs to list (at least 1)")
    explain.add_argument("--family", choices=families.names(),
                         help="the table's kernel family (default: what the table file says; without --table, "
                              "gemm); grouped_gemm: a grouped problem, M rows over --groups experts")
    explain.add_argument("--scales", default="", metavar="MODE",
                         help="without --table: the scales mode of the table (grouped_gemm: row, block128)")
    explain.add_argument("--groups", type=int, default=1, help="with --family grouped_gemm: the expert count; "
                         "with --family attention: the batch (M, N, K are then seqlen_q, seqlen_k, head_dim)")
    explain.add_argument("--heads", default="1,1", metavar="QUERY_HEADS,KV_HEADS",
                         help="with --family attention: query heads and KV heads (default: %(default)s)")
    explain.add_argument("--causal", action="store_true", help="with --family attention: the causal mask")

    build = sub.add_parser("build", help="compile variants outside the installed kernel set into the kernel cache "
                                         "(docs/kernels.md), so that no call waits for them")
    build.add_argument("--table", metavar="PATH", help="the variants the table's configs name (its working set)")
    build.add_argument("--family", help=f"every variant of a kernel family ({', '.join(families.names())})")
    build.add_argument("--all", action="store_true", help="every variant of every family")
    build.add_argument("--jobs", type=int, help="nvcc processes at once (default: the cores)")
    build.add_argument("--arch", metavar="SM", help="the GPU architecture to compile for, as sm80, sm86, sm89, sm90, "
                       "sm100, sm120 (default: the current GPU's; needed on a host without one): the variants that "
                       "run there, for its cache")

    args = parser.parse_args(argv)
    if args.command == "tune":
        check_tune_args(parser, args)
    if args.cmake_dir:
        print(cmake_dir())
        return 0
    commands = {"info": cmd_info, "tune": cmd_tune, "explain": cmd_explain, "build": cmd_build}
    if args.command not in commands:
        parser.print_help()
        return 2
    try:
        return commands[args.command](args)
    except (ValueError, OSError, RuntimeError) as exc:
        if os.environ.get("WAVETUNE_DEBUG"):
            raise
        message = str(exc).removeprefix("wavetune: ")
        print(f"wavetune {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

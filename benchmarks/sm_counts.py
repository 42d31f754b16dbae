"""The dense GEMM table across SM counts: per SM count, a table tuned there on the tune split and every config
measured there on the held-out split; each table's held-out choice quality at its own count, and what the full
GPU's table loses at each smaller count against the table tuned there.

    # on a GPU, after benchmarks/gpu_run.sh built the kernel set (docs/gpus.md names it); --work stays on the machine
    python benchmarks/sm_counts.py --out $OUT --work build/sm-counts
    # anywhere, no GPU: the report again from the logs and tables in --work
    python benchmarks/sm_counts.py --out report --work build/sm-counts --score-only

Per SM count (`full`: the whole GPU; N: a CUDA green context of N SMs, as `python -m wavetune tune --sms N` makes
it, which rounds N to the driver's SM granularity: the report gives the count the context had):
1. `tune --exact tune.json` into <work>/<count>/table/: the table, tuned on the tune split's shapes (its exact
   records, which the judge does not consult) within --budget measurements for the model;
2. `tune --exact heldout.json` on the same log into <work>/<count>/heldout/: every config measured on the held-out
   shapes (the table this run writes is not judged: its working set has seen them).
Then, from the logs (wavetune.families.gemm.replay.judge, as benchmarks/choice_quality.py scores):
- each table's held-out choice / best at its own count, best being the fastest of the table's configs (target
  >= 0.97);
- at each smaller count, over the fastest of every config measured there: the table tuned there, the full GPU's
  table as it chooses (the lookup maps with a table's own SM count), and the full GPU's table mapped at that count
  (whether its model transfers), and the penalty, the full GPU's table's geomean over the table tuned there.
A count whose two runs finished with the same options is not run again, so a command cut short resumes in the next
one on the same machine (a count's wall time is then the finishing command's); --stop-after starts no count after
that many seconds.

Run time, estimated (not yet measured): a count measures about --budget + (--tune-count + --heldout-count) x C,
C being the configs that serve a shape: the build's bf16 column-major CUTLASS configs (a stream-K variant twice)
and cuBLAS, and within 64 tokens (about 45% of the splits' shapes) the 35 decode GEMM configs too. With the
12-variant filter of docs/gpus.md (17 configs, 52 within 64 tokens) and the defaults that is about 3,500
measurements. A measurement takes 6-30 ms on a full H100 (the profiler's kernel time on held-out shapes averages
5.6 ms in the shipped H100 tuning log; benchmarks.md's exhaustive measurement spent under 30 ms a measurement in
all), so 20-110 s, plus two fits of the model; at N SMs the large shapes' kernels take up to full/N as long. About
0.5-2.5 minutes a count, 4-10 minutes for the four default counts: where one 10-minute command does not finish
them, the same command again does the rest.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import shape_suite
import wavetune
from wavetune.families.gemm.comparison import read_log
from wavetune.families.gemm.replay import Judged, judge, measured_by_shape
from wavetune.tuning.report import markdown_table, summarize

FULL = "full"
SPLITS = {"tune": "table", "heldout": "heldout"}  # split -> the folder its tuning run writes a table to


def parse_counts(text: str) -> list[str]:
    """`full,108,66,46` -> labels: `full` and positive SM counts, `full` among them (the penalty compares with it)."""
    labels = [item.strip() for item in text.split(",") if item.strip()]
    for label in labels:
        if label != FULL and not (label.isdigit() and int(label) > 0):
            raise argparse.ArgumentTypeError(f"{label!r} is neither {FULL!r} nor a positive SM count")
    if FULL not in labels or len(set(labels)) < len(labels):
        raise argparse.ArgumentTypeError(f"the counts must hold {FULL!r} (the penalty compares with its table), "
                                         f"each once; got {text!r}")
    return labels


def write_shapes(work: Path, counts: dict[str, int]) -> dict[str, Path]:
    """The shape-suite files `tune --exact` reads, one per split (kept where --work holds them already)."""
    files = {split: work / f"{split}-{count}.json" for split, count in counts.items()}
    for split, path in files.items():
        if not path.exists():
            path.write_text(json.dumps(shape_suite.shapes(split, counts[split]), indent=1))
    return files


def tune_command(label: str, log: Path, exact: Path, out: Path, budget: int | None) -> list[str]:
    sms = [] if label == FULL else ["--sms", label]
    limit = [] if budget is None else ["--budget", str(budget)]
    return [sys.executable, "-m", "wavetune", "tune", *sms, "--log", str(log), "--exact", str(exact), "--out",
            str(out), *limit]


def compiled_variants() -> list[str]:
    """The bf16 column-major CUTLASS variants of this build: the kernel set the tables choose among."""
    return sorted(c.name for c in wavetune.configs()
                  if (c.dtype, c.b_layout) == ("bf16", "col") and not c.built_in)


def measure_count(label: str, work: Path, shapes: dict[str, Path], options: dict) -> None:
    """The two tuning runs of one count, unless they finished with these options; `done.json` records them."""
    directory, done = work / label, work / label / "done.json"
    if done.exists() and json.loads(done.read_text())["options"] == options:
        print(f"{label}: measured already")
        return
    directory.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    for split, folder in SPLITS.items():
        print(f"{label}: tuning with the {split} split's shapes exact", flush=True)
        command = tune_command(label, directory / "gemm.jsonl", shapes[split], directory / folder, options["budget"])
        subprocess.run(command, check=True)
    done.write_text(json.dumps({"options": options, "wall_s": round(time.monotonic() - start, 1),
                                "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
                                "kernel_set": wavetune.build_info()["kernel_set"], "variants": compiled_variants()}))


def load_count(work: Path, label: str, options: dict) -> dict:
    """A count measured with ``options``: its log's device and latencies, its table and its done.json."""
    directory = work / label
    tables = sorted((directory / SPLITS["tune"]).glob("*.wtt"))
    done = json.loads((directory / "done.json").read_text())
    if len(tables) != 1 or done["options"] != options:
        raise ValueError(f"{directory}: measured with {done['options']} and {len(tables)} tables; this report "
                         f"needs one table measured with {options}")
    header, records = read_log(directory / "gemm.jsonl")
    return {"label": label, "gpu_name": header["gpu_name"], "sm_count": header["sm_count"], "table": tables[0],
            "measured": measured_by_shape(records), **done}


def summary(judged: Judged) -> dict:
    """Geomean and worst over every shape (by M range in "by_m"), and the prediction error's median and p90."""
    by_m = summarize(judged.ratios)
    return {"shapes": len(judged.ratios), "missing": judged.missing, "configs": judged.configs,
            "geomean": by_m["all"]["geomean"], "worst": by_m["all"]["worst"], "by_m": by_m,
            "error_median": statistics.median(judged.errors),
            "error_p90": statistics.quantiles(judged.errors, n=10)[-1]}


def own_quality(count: dict, shapes: list[tuple]) -> dict:
    return summary(judge(count["measured"], count["table"], count["sm_count"], shapes))


def cross_count(full: dict, count: dict, shapes: list[tuple]) -> dict:
    """The table tuned at ``count`` and the full GPU's, as tuned and mapped there, over the count's fastest config."""
    def scored(table: dict, sm_count: int) -> dict:
        return summary(judge(count["measured"], table["table"], sm_count, shapes, catalog_oracle=True))

    out = {"tuned_here": scored(count, count["sm_count"]), "full_as_tuned": scored(full, full["sm_count"]),
           "full_mapped_here": scored(full, count["sm_count"])}
    out["penalty"] = out["full_as_tuned"]["geomean"] / out["tuned_here"]["geomean"]
    return out


def score(work: Path, labels: list[str], heldout: list[tuple], options: dict) -> list[dict]:
    counts = {label: load_count(work, label, options) for label in labels}
    rows = []
    for label, count in counts.items():
        row = {key: count[key] for key in ("label", "gpu_name", "sm_count", "wall_s", "date", "kernel_set", "variants")}
        row["own"] = own_quality(count, heldout)
        if label != FULL:
            row["cross"] = cross_count(counts[FULL], count, heldout)
        rows.append(row)
    return rows


def cell(s: dict) -> str:
    return f"{s['geomean']:.3f} ({s['worst']:.2f})"


def markdown(report: dict) -> str:
    rows = report["counts"]
    own = [[str(r["sm_count"]), str(r["own"]["configs"]), str(r["own"]["shapes"]), cell(r["own"]),
            f"{r['own']['error_median']:.1%}, {r['own']['error_p90']:.1%}", f"{r['wall_s']:.0f}"] for r in rows]
    cross = [[str(r["sm_count"]), cell(r["cross"]["tuned_here"]), cell(r["cross"]["full_as_tuned"]),
              cell(r["cross"]["full_mapped_here"]), f"{r['cross']['penalty']:.3f}"] for r in rows if "cross" in r]
    o = report["options"]
    return "\n".join([
        "# The dense GEMM table across SM counts", "",
        f"{report['device']}, {report['date']}; kernel set {report['kernel_set']!r} ({len(report['variants'])} bf16 "
        f"column-major CUTLASS variants); tune split {o['tune_count']} shapes, held-out split {o['heldout_count']} "
        f"shapes, tune --budget {o['budget']}. `{report['command']}`", "",
        "Each table on the held-out split at its own SM count: choice / best of its configs, geomean (worst).", "",
        markdown_table(["SMs", "table configs", "shapes", "choice / best", "prediction error: median, p90",
                        "tuning runs, s"], own), "",
        "At fewer SMs, over the fastest of every config measured there, geomean (worst); penalty: the full GPU's "
        "table as it chooses over the table tuned there.", "",
        markdown_table(["SMs", "table tuned here", "full GPU's table", "full GPU's table mapped here", "penalty"],
                       cross), ""])


def report_of(work: Path, labels: list[str], heldout: list[tuple], options: dict) -> dict | None:
    """The report of the counts measured so far (the full GPU's among them), or None before it is."""
    done = [label for label in labels if (work / label / "done.json").exists()]
    if FULL not in done:
        return None
    rows = score(work, done, heldout, options)
    full = next(r for r in rows if r["label"] == FULL)
    return {"device": full["gpu_name"], "date": full["date"], "kernel_set": full["kernel_set"],
            "variants": full["variants"], "options": options, "counts": rows,
            "command": " ".join(["python", *sys.argv])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="where sm_counts.json and sm_counts.md go")
    p.add_argument("--work", type=Path, help="logs and tables, one folder per count (default: --out)")
    p.add_argument("--sms", type=parse_counts, default=parse_counts("full,108,66,46"),
                   help="SM counts, comma-separated, 'full' among them (default: full,108,66,46)")
    p.add_argument("--tune-count", type=int, default=24, help="tune-split shapes measured exact (default: 24)")
    p.add_argument("--heldout-count", type=int, default=40, help="held-out shapes judged (default: 40)")
    p.add_argument("--budget", type=int, default=1500, help="tune's measurement budget for the model (default: 1500)")
    p.add_argument("--stop-after", type=float, metavar="SECONDS", help="start no count after this many seconds")
    p.add_argument("--score-only", action="store_true", help="measure nothing: report from --work")
    args = p.parse_args()
    work = args.work or args.out
    for directory in (work, args.out):
        directory.mkdir(parents=True, exist_ok=True)
    options = {"tune_count": args.tune_count, "heldout_count": args.heldout_count, "budget": args.budget}
    shapes = write_shapes(work, {"tune": args.tune_count, "heldout": args.heldout_count})
    start = time.monotonic()
    for label in [] if args.score_only else args.sms:
        if args.stop_after is not None and time.monotonic() - start > args.stop_after:
            print(f"--stop-after {args.stop_after:g}: {label} and the counts after it are left for the next run")
            break
        measure_count(label, work, shapes, options)
    heldout = [(s["m"], s["n"], s["k"]) for s in json.loads(shapes["heldout"].read_text())]
    report = report_of(work, args.sms, heldout, options)
    if report is None:
        raise SystemExit(f"{work}: the full GPU's count is not measured yet: nothing to report")
    (args.out / "sm_counts.json").write_text(json.dumps(report, indent=1, default=str))
    (args.out / "sm_counts.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()

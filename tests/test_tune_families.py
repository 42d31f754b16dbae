"""Tuning every kernel family from the installed package, without a GPU: the family registry, the tune
command's argument errors, sharding a plan over devices (worker processes included, with a driver that
needs no GPU), merging shard logs, resuming from a complete log (the profiler mocked), the progress bar.
The GPU tier (tests/test_tune_gpu.py) measures for real."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import wavetune
from wavetune import _C
from wavetune import __main__ as cli
from wavetune import families
from wavetune.families.gemm import tuning as gemm_tuning
from wavetune.runtime import tables
from wavetune.tuning import runner, tablefile
from wavetune.tuning.log import MeasurementLog

DEVICE = {"name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "l2_bytes": 52428800}
GROUPED_MODES = [layout["name"] for layout in _C.GROUPED_SCALES]


# ---- the registry -----------------------------------------------------------------------------------

def test_the_registry_finds_every_family_subpackage():
    assert families.names() == ["gemm", "attention", "grouped_gemm", "layer_ops", "scaled_gemm"]
    assert [f.name for f in families.all()] == families.names()
    assert {f.name: f.table_env for f in families.all()} == {
        "gemm": "WAVETUNE_TABLE", "grouped_gemm": "WAVETUNE_GROUPED_TABLE", "attention": "WAVETUNE_ATTENTION_TABLE",
        "scaled_gemm": "WAVETUNE_SCALED_GEMM_TABLE",
        "layer_ops": "WAVETUNE_LAYER_OPS_TABLE"}
    assert tables.table_envs()["grouped_gemm"] == "WAVETUNE_GROUPED_TABLE"
    assert tables.table_file_name("NVIDIA H200", "attention") == "nvidia-h200.attention.wtt"
    assert tables.table_file_name("NVIDIA H200") == "nvidia-h200.wtt"
    # The grouped family's tables are one per scales mode, each with its file and variable.
    assert tables.scales_modes("grouped_gemm") == GROUPED_MODES and GROUPED_MODES[:3] == ["", "row", "block128"]
    assert tables.scales_modes("gemm") == [""]
    assert tables.table_file_name("NVIDIA H200", "grouped_gemm", "row") == "nvidia-h200.grouped_gemm.row.wtt"
    assert tables.table_env("grouped_gemm", "block128") == "WAVETUNE_GROUPED_TABLE_BLOCK128"
    for family in families.all():
        assert family.package == f"wavetune.families.{family.name}"
        assert family.config_space in {p.name for p in (Path(cli.__file__).parents[2] / "cutlass_configs").glob("*")} \
            or family.config_space.startswith("sm90_") or not family.config_space and not family.tuning
        for name in family.entry_points:  # exported by the package, as the public API
            assert getattr(wavetune, name) is family.function("api", name)
        assert callable(family.function("api", family.input_checks))
        assert isinstance(family.list_configs(), list) and len(family.compiled_hash()) == 16
        if not family.tuning:
            continue  # built-in variants only (scaled_gemm, layer_ops)
        driver = family.module("tuning")
        assert all(callable(getattr(driver, f)) for f in ("open_log", "job_done", "measure_job", "run"))


def test_an_unknown_family_is_named_with_the_known_ones():
    known = "one of gemm, attention, grouped_gemm, layer_ops, scaled_gemm"
    with pytest.raises(ValueError, match=f"unknown kernel family 'conv' \\({known}\\)"):
        families.get("conv")
    with pytest.raises(ValueError, match="unknown kernel family"):
        tables.ensure_table(0, "conv")
    twin = families.Family(name="gemm", config_space="x.toml", table_suffix=".wtt", table_env="X", entry_points=(),
                           configs="configs", config_space_hash="h", input_checks="c", package="elsewhere")
    with pytest.raises(ValueError, match="registered twice"):
        families.register(twin)


def test_importing_wavetune_imports_no_torch_and_no_tuning_driver():
    code = ("import sys; sys.modules['torch'] = None\nimport wavetune\nfrom wavetune import families\n"
            "families.all()\nassert not [m for m in sys.modules if m.endswith(('.torch_ops', '.tuning', '.measure'))]\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert done.returncode == 0, done.stderr


# ---- the command line -------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["--family", "conv"], "invalid choice: 'conv'"),
    (["--cases", "4"], "--cases and --time-budget are options of the grouped_gemm and attention families"),
    (["--time-budget", "60"], "--cases and --time-budget are options"),
    (["--family", "grouped_gemm", "--budget", "50"], "--budget and --no-micro are options of the gemm family"),
    (["--family", "attention", "--exact", "s.json"], "are options of the gemm family"),
    (["--family", "grouped_gemm", "--cases", "0"], "--cases 0: at least 1"),
    (["--family", "grouped_gemm", "--scales", "block64"], "--scales block64: the grouped_gemm family's tables have "
                                                         f"scales modes: {', '.join(GROUPED_MODES[1:])}"),
    (["--scales", "row"], "--scales row: the gemm family's tables have scales modes: none"),
    (["--family", "attention", "--time-budget", "-1"], "a positive number of seconds"),
    (["--devices", "0,0"], "distinct non-negative CUDA device indices"),
    (["--devices", "gpu0"], "comma-separated CUDA device indices"),
    (["--offline", "--devices", "0,1"], "--offline measures nothing"),
    (["--shapes", "config.json", "--devices", "0,1"], "--shapes runs on the current GPU"),
    (["--sms", "0"], "--sms 0: a positive SM count"),
    (["--offline", "--sms", "66"], "for a tuning run that measures (not --offline"),
])
def test_tune_refuses_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["tune", *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_confining_to_fewer_sms_needs_a_gpu(monkeypatch):
    from wavetune.tuning import runner

    if wavetune.runtime.device.no_gpu_reason() is None:
        pytest.skip("a GPU is present: tests/test_gpu.py checks the green context")
    monkeypatch.setenv(runner.SMS_ENV, "66")
    with pytest.raises(RuntimeError, match="--sms 66 needs a CUDA GPU"):
        runner.confine_sms()


def test_family_choices_come_from_the_registry(capsys):
    with pytest.raises(SystemExit):
        cli.main(["tune", "--help"])
    assert "{gemm,attention,grouped_gemm,layer_ops,scaled_gemm}" in capsys.readouterr().out


@pytest.mark.parametrize("family", ["gemm", "grouped_gemm", "attention"])
def test_tune_without_a_gpu_says_so(family, capsys, tmp_path):
    if wavetune.runtime.device.no_gpu_reason() is None:
        pytest.skip("a GPU is usable here")
    assert cli.main(["tune", "--family", family, "--out", str(tmp_path)]) == 2
    assert "tune measures kernels on the GPU it tunes for" in capsys.readouterr().err


def test_the_default_log_is_under_out():
    args = argparse.Namespace(log=None, out="/t", shapes=None, family="attention")
    assert cli.default_log(args) == Path("/t/attention-measurements.jsonl")
    assert cli.default_log(argparse.Namespace(log=None, out=None, shapes=None, family="gemm")) == Path(
        "tables/gemm-measurements.jsonl")
    assert cli.default_log(argparse.Namespace(log=None, out="a/b.wtt", shapes="x", family="gemm")) == Path(
        "a/gemm-measurements.jsonl")


def test_only_benchmark_logs_are_fitted_without_measuring(tmp_path):
    bench, own = tmp_path / "bench.jsonl", tmp_path / "own.jsonl"
    bench.write_text(json.dumps({"gpu": "NVIDIA H200", "sm_count": 132}) + "\n")
    own.write_text(json.dumps({"gpu_name": "NVIDIA H200", "sm_count": 132, "family": "grouped_gemm"}) + "\n")
    assert cli.is_benchmark_log(str(bench)) and not cli.is_benchmark_log(str(own))
    assert not cli.is_benchmark_log(str(tmp_path / "missing.jsonl"))


# ---- sharding, merging ------------------------------------------------------------------------------

@pytest.mark.parametrize("count", [1, 2, 3, 8])
def test_every_job_lands_in_exactly_one_shard(count):
    jobs = [{"key": i} for i in range(29)]
    shards = runner.shard(jobs, count)
    assert len(shards) == count
    dealt = [job["key"] for shard in shards for job in shard]
    assert sorted(dealt) == list(range(29)) and len(dealt) == len(set(dealt))
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_devices_and_their_visibility(monkeypatch):
    assert runner.parse_devices(None) is None and runner.parse_devices("2,0") == [2, 0]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert runner.visible_device(3) == "3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert runner.visible_device(1) == "6"
    with pytest.raises(ValueError, match="device 2 is not visible here"):
        runner.visible_device(2)


def test_gpus_of_different_models_are_refused(monkeypatch):
    models = {"0": "NVIDIA H100 80GB HBM3", "1": "NVIDIA H200"}
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def fake_run(command, env, **kwargs):
        assert command[-2:] == ["--properties", "gemm"]  # the family's occupancy is probed with the device
        props = {**DEVICE, "name": models[env["CUDA_VISIBLE_DEVICES"]], "ctas_per_sm": {"v": 3}}
        return SimpleNamespace(returncode=0, stdout=json.dumps(props) + "\n", stderr="")

    monkeypatch.setattr(runner.subprocess, "run", fake_run)
    with pytest.raises(ValueError, match="GPUs of different models .*0: NVIDIA H100 80GB HBM3.*1: NVIDIA H200"):
        runner.probe_devices([0, 1], "gemm")
    models["1"] = models["0"]
    assert runner.probe_devices([0, 1], "gemm")[1]["name"] == "NVIDIA H100 80GB HBM3"
    assert runner.measurer_for("gemm", [0, 1]).device["ctas_per_sm"] == {"v": 3}


class Records(MeasurementLog):
    """A log of plain records keyed by "key" (the gemm family's header, a device given)."""

    @staticmethod
    def key_of(record: dict):
        return record["key"]


def test_merged_shard_logs_equal_a_single_log(tmp_path):
    jobs = [{"key": f"job{i}", "us": i * 1.5} for i in range(11)]
    single = Records(tmp_path / "single.jsonl", device=DEVICE)
    single.add(jobs)
    main = Records(tmp_path / "main.jsonl", device=DEVICE)
    main.add(jobs[:2])  # measured before the run was spread over devices
    for index, part in enumerate(runner.shard(jobs[2:], 3)):
        shard = Records(tmp_path / f"main.jsonl.gpu{index}", device=DEVICE)
        shard.add(part)
        assert main.merge(shard.path) == len(part)
    assert main.merge(tmp_path / "main.jsonl.gpu0") == 0  # merging is idempotent
    assert main.records == single.records
    assert Records(main.path, device=DEVICE).records == single.records  # and so is the file
    other = Records(tmp_path / "h200.jsonl", device={**DEVICE, "name": "NVIDIA H200"})
    with pytest.raises(ValueError, match="recorded on"):
        main.merge(other.path)


FAKE_DRIVER = '''
import os
from wavetune.tuning.log import MeasurementLog

class Log(MeasurementLog):
    @staticmethod
    def key_of(record):
        return record["key"]

def open_log(path, device=None, **options):
    return Log(path, "gemm", device=device)

def job_done(log, job):
    return job["key"] in log

def measure_job(log, job, scale=1, **options):
    log.add([{"key": job["key"], "us": job["n"] * scale, "gpu": os.environ["CUDA_VISIBLE_DEVICES"]}])
'''


def test_several_devices_measure_shards_in_worker_processes_then_merge(tmp_path, monkeypatch):
    """The multi-GPU path end to end with a driver that needs no GPU: a worker process per device measures
    its shard into a log of its own (CUDA_VISIBLE_DEVICES its device alone), merged into the main log."""
    (tmp_path / "fake_driver.py").write_text(FAKE_DRIVER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    sys.path.insert(0, str(tmp_path))
    try:
        import fake_driver
    finally:
        sys.path.remove(str(tmp_path))
    log = fake_driver.open_log(tmp_path / "log.jsonl", device=DEVICE)
    jobs = [{"key": f"p{i}", "n": i} for i in range(9)]
    log.add([{"key": "p0", "us": 0, "gpu": "here"}])  # measured already: not measured again
    measure = runner.Measurer("gemm", devices=[0, 1], device=DEVICE, driver_module="fake_driver",
                              options={"scale": 2})
    assert measure.sharded and measure(log, jobs, "cases") == 0
    assert set(log.records) == {job["key"] for job in jobs}
    assert {log.records[f"p{i}"]["us"] for i in range(1, 9)} == {2 * i for i in range(1, 9)}
    assert {r["gpu"] for r in log.records.values()} == {"here", "0", "1"}
    lines = log.path.read_text().splitlines()
    assert len(lines) == 1 + len(jobs)  # each measurement once
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("log")) == ["log.jsonl"]  # shards merged
    assert measure(log, jobs, "cases") == 0 and len(log.path.read_text().splitlines()) == len(lines)


# ---- resuming, progress -----------------------------------------------------------------------------

needs_bf16_col = pytest.mark.skipif(not gemm_tuning.candidates(), reason="no compiled bf16 column-major variant")


def synthetic_profile(calls):
    """A profiler whose latency grows with each launch's work (G*L) and wave count; counts its calls."""
    def profile(problem, launches, seed, precise=False):
        calls.append(problem)
        _, _, m, n, k = problem
        out = []
        for launch in launches:
            c = next(c for c in gemm_tuning.candidates(*problem[:2]) if c.launch()[:3] == tuple(launch[:3]))
            raster, swizzle = launch[3:]
            g, l, _, w = c.coordinates(m, n, k, DEVICE["sm_count"])
            out.append(2.0 + 0.002 * g * l / DEVICE["sm_count"] + 0.5 * w + 0.01 * raster + 0.001 * swizzle)
        return out
    return profile


@needs_bf16_col
def test_a_rerun_with_a_complete_log_measures_nothing(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(gemm_tuning, "profile", synthetic_profile(calls))
    measure = runner.Measurer("gemm", device=DEVICE)
    path = gemm_tuning.tune(tmp_path, tmp_path / "log.jsonl", budget=800, measure=measure)
    first = calls.copy()
    assert first and path.name == "nvidia-h100-80gb-hbm3.wtt"
    err = capsys.readouterr().err
    assert "anchors" in err and "calibration" in err and "%|" in err  # tqdm's bars, on stderr
    lines = (tmp_path / "log.jsonl").read_text()
    written = tablefile.read_table(path)
    calls.clear()
    again = gemm_tuning.tune(tmp_path, tmp_path / "log.jsonl", budget=800, measure=runner.Measurer("gemm", device=DEVICE))
    assert calls == [] and (tmp_path / "log.jsonl").read_text() == lines
    rewritten = tablefile.read_table(again)
    assert {k: v for k, v in rewritten.items() if k != "meta"} == {k: v for k, v in written.items() if k != "meta"}


@needs_bf16_col
def test_the_exact_shapes_time_the_decode_gemm_only_within_its_tokens(tmp_path, monkeypatch):
    """Every config on each exact shape, but the decode GEMM's only up to DECODE_MAX_M tokens (as the calibration)."""
    calls, timed = [], {}
    profile = synthetic_profile(calls)

    def recording(problem, launches, seed, precise=False):
        timed.setdefault(tuple(problem[2:]), set()).update(tuple(launch[:3]) for launch in launches)
        return profile(problem, launches, seed, precise)

    monkeypatch.setattr(gemm_tuning, "profile", recording)
    exact = [(gemm_tuning.DECODE_MAX_M, 4096, 4096), (gemm_tuning.DECODE_MAX_M + 1, 4096, 4096)]
    gemm_tuning.tune(tmp_path, tmp_path / "log.jsonl", exact_shapes=exact, budget=800,
                     measure=runner.Measurer("gemm", device=DEVICE))
    cands = gemm_tuning.candidates()
    decode = {c.launch()[:3] for c in cands if c.variant.schedule == "decode"}
    assert decode and timed[exact[0]] == {c.launch()[:3] for c in cands}
    assert timed.get(exact[1], set()) == {c.launch()[:3] for c in cands} - decode


def grouped_record(case: dict) -> dict:
    """A synthetic measurement of a grouped case: every compiled bf16 grouped variant, time from its size."""
    rows = case["tokens"] * case["topk"]
    variants = [v for v in wavetune.grouped_configs() if v.dtype == "bf16"]
    times = {v.name: 3.0 + rows * case["n"] * case["k"] / 4e8 * (1 + 0.1 * i) for i, v in enumerate(variants)}
    best = min(times, key=times.get)
    return {**case, "rows": rows, "busy_experts": min(rows, case["experts"]), "copies": 1, "best": best,
            "best_us": times[best], "variants_us": times, "max_error": 0.0}


def attention_record(case: dict) -> dict:
    variants = [v for v in wavetune.attention_configs() if v.dtype == "bf16" and v.tile[2] == case["head_dim"]]
    work = case["batch"] * case["seqlen_q"] * case["seqlen_k"] * case["heads_q"] / 1e9
    times = {f"{v.name}/1": 5.0 + work * (1 + 0.1 * i) for i, v in enumerate(variants)}
    if case["seqlen_q"] == 1:
        times.update({f"{v.name}/4": 4.0 + work / 3 for v in variants})
    best = min(times, key=times.get)
    return {**case, "copies": 1, "best": best, "best_us": times[best], "variants_us": times, "max_error": 0.0}


@pytest.mark.parametrize("family, record", [("grouped_gemm", grouped_record), ("attention", attention_record)])
def test_case_families_resume_and_fit_a_loadable_table(family, record, tmp_path, monkeypatch, capsys):
    if not [v for v in families.get(family).list_configs() if v.dtype == "bf16" and not v.from_library]:
        pytest.skip(f"no bf16 {family} variant compiled besides the library candidates")
    pytest.importorskip("torch")
    measure_module = families.get(family).module("measure")
    calls = []

    def fake_measure_case(case, l2_bytes, *args, **kwargs):
        calls.append(case["case_key"])
        return (record(case), {}, []) if family == "grouped_gemm" else (record(case), {})

    monkeypatch.setattr(measure_module, "measure_case", fake_measure_case)
    monkeypatch.setattr(measure_module.torch.cuda, "empty_cache", lambda: None)
    driver = families.get(family).module("tuning")
    args = argparse.Namespace(out=str(tmp_path), log=str(tmp_path / "log.jsonl"), offline=False, cases=8, scales="")
    path = driver.run(args, runner.Measurer(family, device=DEVICE))
    assert len(calls) == 8 and len(set(calls)) == 8
    assert "cases" in capsys.readouterr().err
    selector = tables.open_table(path, family)
    assert selector.meta()["family"] == family and selector.config_count() >= 1
    header = json.loads((tmp_path / "log.jsonl").read_text().splitlines()[0])
    assert header["family"] == family and header["config_space_hash"] == families.get(family).table_hash(args.scales)

    calls.clear()  # a rerun with the log complete measures nothing, and fits the same table
    again = driver.run(args, runner.Measurer(family, device=DEVICE))
    assert calls == []
    strip = lambda table: {k: v for k, v in table.items() if k != "meta"}  # noqa: E731
    assert strip(tablefile.read_table(again)) == strip(tablefile.read_table(path))

    more = argparse.Namespace(**{**vars(args), "cases": 10})  # a larger plan measures only what is new
    driver.run(more, runner.Measurer(family, device=DEVICE))
    assert 0 < len(calls) <= 2

    offline = argparse.Namespace(**{**vars(args), "offline": True})  # refit from the log, no GPU
    refit = driver.run(offline, runner.Measurer(family))
    assert tables.open_table(refit, family).config_count() == selector.config_count()


def test_a_time_budget_leaves_the_rest_for_a_rerun(tmp_path, capsys):
    measured = []

    class Driver:
        @staticmethod
        def job_done(log, job):
            return job in measured

        @staticmethod
        def measure_job(log, job, **options):
            measured.append(job)

    measure = runner.Measurer("gemm", time_budget_s=0.0)
    measure.started -= 1  # the budget is spent before the first job
    object.__setattr__(measure, "driver_module", None)
    monkey = pytest.MonkeyPatch()
    monkey.setattr(runner.Measurer, "driver", property(lambda self: Driver))
    try:
        assert measure(None, [1, 2, 3], "cases") == 3 and measured == []
        assert "time budget spent: 3 cases jobs left unmeasured" in capsys.readouterr().err
        assert runner.Measurer("gemm")(None, [1, 2, 3], "cases") == 0 and measured == [1, 2, 3]
    finally:
        monkey.undo()

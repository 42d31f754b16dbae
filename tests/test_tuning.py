"""The tuning plan under a measurement budget (CPU: the plan comes from the mapping, no GPU involved)."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest

from wavetune import __main__ as cli
from wavetune import _C, families
from wavetune.families.gemm import api
from wavetune.tuning import model
from wavetune.families.gemm import tuning

SMS = 132
needs_bf16_col = pytest.mark.skipif(not tuning.candidates(), reason="no compiled bf16 column-major variant")


def runs(plan: dict) -> set:
    return {(shape, c.key) for shape, cs in plan.items() for c in cs}


@needs_bf16_col
def test_planned_measurements_count_anchors_and_the_micro_runs():
    cands = tuning.candidates()
    plan = tuning.anchor_plan(cands, SMS)
    anchors = sum(map(len, plan.values()))
    micro = tuning.micro_runs(plan, SMS)
    extra = sum(1 for rs in micro.values() for _, raster, swizzle in rs if (raster, swizzle) != ("heuristic", 1))
    assert tuning.planned_measurements(plan, SMS, micro=False) == anchors
    assert tuning.planned_measurements(plan, SMS) == anchors + extra
    # Each data-parallel CUTLASS candidate gets each of its non-default options at its two largest-wave anchors
    # (the multistage kernels swizzle only); cuBLAS and the decode GEMM order their tiles themselves.
    data_parallel = [c for c in cands if c.decomposition == "data_parallel" and not c.variant.fixed_tile_order]
    assert extra == sum(2 * (len(c.micro_options) - 1) for c in data_parallel)


def test_the_cublas_candidate_has_no_micro_runs_and_no_tile_traffic():
    """Its tile is nominal: cuBLAS picks the kernel, so neither tile orders nor tile traffic are its."""
    library = api.KernelConfig(1 << 20, "cublas_bf16_bcol", "bf16", "col", False, "cublas", (128, 128, 64),
                               (1, 1), "persistent", "any")
    cand = tuning.Candidate(library)
    assert library.from_library and not dataclasses.replace(library, schedule="cooperative").from_library
    assert tuning.tile_traffic(SMS)(cand, 4096, 4096, 4096) == 0.0
    plan = {(4096 * 8, 4096, 4096): [cand]}  # several waves: a CUTLASS variant would get micro runs here
    assert tuning.micro_runs(plan, SMS) == {}


def test_prior_is_cublas_where_it_is_a_candidate():
    library = api.KernelConfig(1 << 20, "cublas_bf16_bcol", "bf16", "col", False, "cublas", (128, 128, 64),
                               (1, 1), "persistent", "any")
    cands = [c for c in tuning.candidates() if not c.variant.from_library] + [tuning.Candidate(library)]
    assert tuning.prior_records(cands, "bf16", "col") == [
        {"config_id": len(cands) - 1, "max_m": 0, "margin": tuning.LIBRARY_PRIOR_MARGIN}]
    assert tuning.prior_records(cands, "fp16", "row") == []  # cuBLAS's bf16 col config takes no fp16


@needs_bf16_col
def test_a_budget_drops_whole_waves_and_keeps_a_subset_of_the_full_plan():
    cands = tuning.candidates()
    full = tuning.anchor_plan(cands, SMS)
    needed = tuning.planned_measurements(full, SMS)
    assert tuning.budget_plan(cands, SMS, None) == (full, model.PLAN_WAVES)
    assert tuning.budget_plan(cands, SMS, needed) == (full, model.PLAN_WAVES)

    plan, waves = tuning.budget_plan(cands, SMS, needed - 1)
    assert waves == model.thin_waves(model.PLAN_WAVES)
    assert tuning.planned_measurements(plan, SMS) <= needed - 1
    assert runs(plan) < runs(full)  # the same anchors, fewer of them: resumable from a full log
    for shape, cs in plan.items():
        assert all(c.coordinates(*shape, SMS)[3] in waves for c in cs)

    least = tuning.planned_measurements(tuning.anchor_plan(cands, SMS, (1, 32)), SMS)
    assert tuning.budget_plan(cands, SMS, least)[1] == (1, 32)  # the first and last waves always stay
    with pytest.raises(ValueError, match=f"below the smallest plan: {least} "):
        tuning.budget_plan(cands, SMS, least - 1)


def test_cli_tune_passes_its_options(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(tuning, "tune", lambda *args, **kwargs: seen.update(args=args, kwargs=kwargs))
    assert cli.main(["tune", "--budget", "700", "--no-micro", "--offline", "--out", str(tmp_path),
                     "--log", str(tmp_path / "l")]) == 0
    measure = seen["kwargs"].pop("measure")
    assert seen["kwargs"] == {"micro": False, "budget": 700, "offline": True}
    assert seen["args"][:2] == (tmp_path, tmp_path / "l")
    assert measure.family == "gemm" and not measure.sharded


def test_prune_variants_drops_the_redundant_and_keeps_the_required():
    keys = ["a/data_parallel/1", "b/data_parallel/1", "c/data_parallel/1", "c/stream_k/1"]
    times = np.ones((40, 4))
    times[:20, 0] = 0.5  # a wins half the grid by 2x: it must stay
    times[20:, 2] = 0.9  # c's data-parallel config wins the other half by 10%
    times[:, 3] = 1.001  # c's stream-K config is never best
    assert tuning.prune_variants(keys, times, set()) == {"a", "c"}
    assert tuning.prune_variants(keys, times, {"b"}) == {"a", "b", "c"}
    times[20:, 1] = 0.9 * 1.002  # b now trails c by 0.2% where c wins: one of them is redundant
    assert len(tuning.prune_variants(keys, times, set())) == 2


def test_prune_variants_keeps_a_lone_variant():
    """A build with one variant of the dtype and layout (the default kernel set) tunes without pruning."""
    assert tuning.prune_variants(["a/data_parallel/1", "a/split_k/2"], np.array([[1.0, 2.0], [3.0, 1.5]]),
                                 set()) == {"a"}


def test_an_offline_log_takes_its_own_device_and_measures_nothing(tmp_path):
    path = tmp_path / "log.jsonl"
    header = {"gpu_name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "l2_bytes": 52428800,
              "config_space_hash": families.get("gemm").table_hash()}
    path.write_text(json.dumps(header) + "\n")
    log = tuning.GemmLog(path, offline=True)
    assert log.device == {"name": header["gpu_name"], "sm_count": 132, "l2_bytes": 52428800}
    with pytest.raises(ValueError, match="refit offline"):
        log.measure(("bf16", "col", 1, 8, 8), [(SimpleNamespace(key="v/data_parallel/1"), "heuristic", 1)])
    # A run logged as unable to run the problem (us null) counts as measured: it is not tried again.
    record = {"problem": ["bf16", "col", 1, 8, 8], "config": "v/data_parallel/1", "raster": "heuristic",
              "max_swizzle": 1, "us": None}
    path.write_text(json.dumps(header) + "\n" + json.dumps(record) + "\n")
    log = tuning.GemmLog(path, offline=True)
    log.measure(("bf16", "col", 1, 8, 8), [(SimpleNamespace(key="v/data_parallel/1"), "heuristic", 1)])
    assert log.get(("bf16", "col", 1, 8, 8), SimpleNamespace(key="v/data_parallel/1")) is None
    path.write_text(json.dumps({**header, "config_space_hash": "0" * 16}) + "\n")
    with pytest.raises(ValueError, match="recorded on"):
        tuning.GemmLog(path, offline=True)
    with pytest.raises(ValueError, match="no such measurement log"):
        tuning.GemmLog(tmp_path / "missing.jsonl", offline=True)


@pytest.mark.parametrize("library_only", [[], [SimpleNamespace(variant=SimpleNamespace(from_library=True))]])
def test_tune_refuses_a_build_without_cutlass_variants(tmp_path, monkeypatch, library_only):
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({"gpu_name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "l2_bytes": 52428800,
                                "config_space_hash": families.get("gemm").table_hash()}) + "\n")
    monkeypatch.setattr(tuning, "candidates", lambda *layout: library_only)
    with pytest.raises(ValueError, match="no compiled CUTLASS fp16 variant with row-major B"):
        tuning.tune(tmp_path, path, "fp16", "row", offline=True)


def test_precise_profiling_replays_every_kernel_more_each_after_one_of_its_own():
    for shape in [(16, 4096, 4096), (16384, 28672, 4096)]:
        budget, precise = tuning.profile_options(*shape), tuning.profile_options(*shape, precise=True)
        assert budget["replays"] < precise["replays"] == tuning.PRECISE_REPLAYS
        assert budget["lead_in"] == 0 and precise["lead_in"] == 1
        del budget["replays"], precise["replays"], budget["lead_in"], precise["lead_in"]
        assert budget == precise


def test_profile_passes_the_precise_options_and_every_launch_once(monkeypatch):
    seen = {}

    def fake_profile(m, n, k, dtype, b_layout, launches, **options):
        seen.update(launches=launches, options=options)
        return [float(i) for i in range(len(launches))]

    monkeypatch.setattr(tuning._C, "profile", fake_profile)
    launches = [(1, 0, 1, 0, 1), (2, 0, 1, 0, 1), (3, 0, 1, 0, 1)]
    assert tuning.profile(("bf16", "col", 64, 4096, 4096), launches, seed=3) == [0.0, 1.0, 2.0]
    assert seen["launches"] == launches and seen["options"]["seed"] == 3 and seen["options"]["lead_in"] == 0
    assert tuning.profile(("bf16", "col", 64, 4096, 4096), launches, seed=3, precise=True) == [0.0, 1.0, 2.0]
    assert seen["launches"] == launches
    assert seen["options"]["replays"] == tuning.PRECISE_REPLAYS and seen["options"]["lead_in"] == 1


def test_calibration_shapes_are_generic_bounded_and_fixed():
    shapes = tuning.calibration_shapes()
    assert len(shapes) == tuning.CALIBRATION_SHAPES and shapes == tuning.calibration_shapes()
    assert tuning.calibration_shapes(8, seed=1) != tuning.calibration_shapes(8, seed=2)
    for m, n, k in shapes:
        assert 1 <= m <= 16384 and n % 128 == 0 and k % 128 == 0
        assert 2.0 * m * n * k <= tuning.CALIBRATION_MAX_FLOP
    assert sum(m % 2 for m, _, _ in shapes) > len(shapes) / 4  # odd token counts, as a batcher makes them

"""How accurate a model has to be (benchmarks/required_accuracy.py, wavetune.families.gemm.comparison's
simulation): the choices of a model with known noise, on synthetic measurements."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wavetune.families.gemm import comparison


def results_by_key(results):
    return {(r["sigma"], r["margin"]): r for r in results}


def test_an_exact_model_without_margin_chooses_the_oracle():
    rng = np.random.default_rng(3)
    times = rng.uniform(10, 20, (50, 8))
    prior = np.zeros(50, dtype=int)
    r = results_by_key(comparison.simulate(times, prior, sigmas=(0.0,), margins=(0.0,)))[0.0, 0.0]
    assert r["geomean"] == pytest.approx(1.0) and r["worst"] == pytest.approx(1.0)
    assert r["error_median"] == 0.0


def test_the_margin_keeps_a_prior_only_within_it():
    # Shape 0: the prior (config 0) is 10% slower than config 1; shape 1: 30% slower.
    times = np.array([[11.0, 10.0, 50.0], [13.0, 10.0, 50.0]])
    prior = np.array([0, 0])
    r = results_by_key(comparison.simulate(times, prior, sigmas=(0.0,), margins=(0.2,)))[0.0, 0.2]
    assert r["worst"] == pytest.approx(10 / 11)
    assert r["geomean"] == pytest.approx(math.sqrt(10 / 11))


def test_noise_costs_choices_and_matches_its_error():
    rng = np.random.default_rng(4)
    times = rng.uniform(10, 12, (200, 10))
    prior = rng.integers(0, 10, 200)
    got = results_by_key(comparison.simulate(times, prior, sigmas=(0.0, 0.1, 0.3), margins=(0.0,)))
    assert 1.0 == pytest.approx(got[0.0, 0.0]["geomean"])
    assert got[0.0, 0.0]["geomean"] > got[0.1, 0.0]["geomean"] > got[0.3, 0.0]["geomean"]
    assert got[0.3, 0.0]["worst"] < got[0.3, 0.0]["geomean"]
    # |e^(0.1 z) - 1| for standard normal z: median about 0.1 * 0.674.
    assert got[0.1, 0.0]["error_median"] == pytest.approx(0.0675, abs=0.002)


def test_infeasible_configs_are_never_chosen():
    times = np.array([[np.inf, 10.0, 30.0], [np.inf, 12.0, 36.0]])
    prior = np.array([2, 2])
    r = results_by_key(comparison.simulate(times, prior, sigmas=(0.2,), margins=(0.0,)))[0.2, 0.0]
    assert r["geomean"] == pytest.approx(1.0)


def test_measured_times_takes_each_configs_fastest_launch_on_fully_measured_shapes():
    records = {
        ("bf16", "col", 1, 64, 64, "a", "heuristic", 1): 5.0,
        ("bf16", "col", 1, 64, 64, "a", "along_m", 2): 4.0,
        ("bf16", "col", 1, 64, 64, "b", "heuristic", 1): None,  # cannot run
        ("bf16", "col", 2, 64, 64, "a", "heuristic", 1): 6.0,  # b missing: not judged
        ("fp16", "col", 1, 64, 64, "c", "heuristic", 1): 1.0,  # another dtype
    }
    shapes, configs, times = comparison.measured_times(records, [(1, 64, 64), (2, 64, 64), (3, 64, 64)],
                                                       "bf16", "col")
    assert shapes == [(1, 64, 64)]
    assert configs == ["a", "b"]
    assert times.tolist() == [[4.0, math.inf]]

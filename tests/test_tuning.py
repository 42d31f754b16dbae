"""Tuning without a GPU: the micro second stage and the first-stage fit over a fake measurement log
(python/wavetune/tuning.py). The fake times every launch with a made-up formula in which a swizzled
raster order makes one config's multi-wave launches faster."""

from __future__ import annotations

import pytest

from wavetune import model, tuning

SM_COUNT = 132
needs_bf16_col = pytest.mark.skipif(not tuning.candidates(), reason="no compiled bf16 column-major variant")


class FakeLog:
    """The two methods of tuning.MeasurementLog that the stages use, over a latency formula."""

    def __init__(self, fast_key: str):
        self.records: dict[tuple, float] = {}
        self.fast_key = fast_key

    def latency(self, problem, c: tuning.Candidate, raster: str, swizzle: int) -> float:
        g, l, cap, w = c.coordinates(*problem[2:], SM_COUNT)
        us = 2.0 + 0.01 * g + 0.05 * l * w
        if c.key == self.fast_key and w >= 2 and (raster, swizzle) == ("along_n", 2):
            us *= 0.5
        return us

    def measure(self, problem, runs):
        for c, raster, swizzle in runs:
            self.records.setdefault((*problem, c.key, raster, swizzle), self.latency(problem, c, raster, swizzle))

    def get(self, problem, c, raster="heuristic", max_swizzle=1):
        return self.records.get((*problem, c.key, raster, max_swizzle))


def test_launch_micro_takes_the_rule_of_the_largest_min_wave_reached():
    rules = [(2, "along_m", 2), (8, "along_n", 8)]
    assert tuning.launch_micro(rules, 1) == model.DEFAULT_MICRO
    assert tuning.launch_micro(rules, 2) == ("along_m", 2)
    assert tuning.launch_micro(rules, 7) == ("along_m", 2)
    assert tuning.launch_micro(rules, 40) == ("along_n", 8)
    assert tuning.launch_micro([], 40) == model.DEFAULT_MICRO


@needs_bf16_col
def test_first_stage_is_fitted_at_the_micro_parameters_the_table_launches():
    cands = [c for c in tuning.candidates() if c.decomposition == "data_parallel"][:2]
    fast, other = cands
    log = FakeLog(fast.key)
    plan = {shape: [c for c in cs if c in cands] for shape, cs in tuning.anchor_plan(cands, SM_COUNT).items()}
    for shape, cs in plan.items():
        log.measure(("bf16", "col", *shape), [(c, "heuristic", 1) for c in cs])

    rules = tuning.second_stage(log, cands, plan, "bf16", "col", SM_COUNT)
    assert rules[fast.key] == [(tuning.MICRO_MIN_WAVE, "along_n", 2)]
    assert rules.get(other.key, []) == []
    # Every multi-wave anchor of the fast config was timed again with its rule's parameters.
    multi = [s for s, cs in plan.items() if fast in cs and fast.coordinates(*s, SM_COUNT)[3] >= 2]
    assert multi and all(log.get(("bf16", "col", *s), fast, "along_n", 2) is not None for s in multi)

    fits = tuning.fit_candidates(log, cands, plan, "bf16", "col", SM_COUNT, rules)
    m, n, k = 8192, 8192, 8192
    for c in cands:
        g, l, cap, w = c.coordinates(m, n, k, SM_COUNT)
        assert w >= 2
        predicted = model.predict(fits[c.key], g, l, w, cap)
        launched = log.latency(("bf16", "col", m, n, k), c, *tuning.launch_micro(rules.get(c.key, []), w))
        assert predicted == pytest.approx(launched, rel=0.02)

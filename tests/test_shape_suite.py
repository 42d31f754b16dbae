"""The dense GEMM cases (wavetune.families.gemm.cases, printed by benchmarks/shape_suite.py): the splits that
judge choices share no layer, and are the same on every run."""

import pytest

from wavetune.families.gemm import cases
from wavetune.families.grouped_gemm.cases import moe_cases

# The public suite lives outside the repository; the splits' own properties do not depend on it.
NO_PUBLIC_SUITE: set[tuple[int, int]] = set()


def test_splits_share_no_layer_and_are_fixed():
    pairs = {split: {nk for nk, _ in cases.split_pairs(split, NO_PUBLIC_SUITE)} for split in cases.SPLITS}
    assert all(pairs.values())
    assert not pairs["tune"] & pairs["heldout"]
    assert not pairs["fresh"] & (pairs["tune"] | pairs["heldout"])
    for split in cases.SPLITS:
        rows = cases.shapes(split, 150, NO_PUBLIC_SUITE)
        assert rows == cases.shapes(split, 150, NO_PUBLIC_SUITE)
        assert {(r["n"], r["k"]) for r in rows} <= pairs[split]
        assert all(1 <= r["m"] <= cases.M_MAX and r["n"] % 8 == 0 and r["k"] % 8 == 0 for r in rows)
        assert sum(r["m"] % 2 for r in rows) > len(rows) / 4  # odd token counts, as a batcher makes them


def test_generic_suite_is_fixed_and_not_the_calibration_shapes():
    from wavetune.families.gemm import tuning

    rows = cases.shapes("generic", 50, NO_PUBLIC_SUITE)
    assert rows == cases.shapes("generic", 50, NO_PUBLIC_SUITE) and len(rows) == 50
    problems = {(r["m"], r["n"], r["k"]) for r in rows}
    assert not problems & set(tuning.calibration_shapes())
    assert all(2.0 * m * n * k <= tuning.CALIBRATION_MAX_FLOP for m, n, k in problems)


def test_grouped_cases_come_only_from_the_hashed_splits():
    assert moe_cases("tune", 4, ("balanced",))
    with pytest.raises(ValueError, match="split must be one of"):
        moe_cases("fresh", 4, ("balanced",))

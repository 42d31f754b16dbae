"""The latency model (fit, reference evaluation, anchor plan, micro choice) and the table writer.

CPU only, numpy only. The modules are loaded by file path (``load_module``): they import nothing from
the wavetune package, so these tests need neither the native extension nor an installed package.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def load_module(name: str):
    """Load ``python/wavetune/tuning/<name>.py`` standalone (not as part of the wavetune package)."""
    path = REPO / "python" / "wavetune" / "tuning" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"wavetune_standalone_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


model = load_module("model")
tablefile = load_module("tablefile")

SMS = 132  # H100 SXM / H200


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def make_map_fn(tile_m, tile_n, tile_k, cluster_m=1, cluster_n=1, swap_ab=False, decomposition="data_parallel",
                splits=1, sm_count=SMS):  # fmt: skip
    """One config's mapping (model.map_problem), as the plan takes it."""
    def map_fn(m: int, n: int, k: int):
        return model.map_problem((tile_m, tile_n, tile_k), (cluster_m, cluster_n), swap_ab, m, n, k, decomposition,
                                 splits, sm_count)

    return map_fn


def test_python_mapping_matches_the_header_on_hand_cases():
    # 128x256x64 cooperative, M=1000, N=4096, K=4096: 8 x 16 tiles, 64 K steps.
    assert make_map_fn(128, 256, 64)(1000, 4096, 4096) == (128, 64, 132, 1)
    # swap-AB 128x16x128: the kernel's M is N (4096/128 = 32 tiles), its N is M (7 tokens -> 1 tile).
    assert make_map_fn(128, 16, 128, swap_ab=True)(7, 4096, 4096) == (32, 32, 132, 1)
    # split-K 4 on 128x128x64: 8 x 32 tiles x 4 splits, 64 K steps split into 16.
    assert make_map_fn(128, 128, 64, decomposition="split_k", splits=4)(1024, 4096, 4096) == (1024, 16, 132, 8)
    # 2x1 cluster: capacity is whole clusters (132 // 2 * 2), tiles padded to whole clusters.
    assert make_map_fn(256, 128, 64, 2, 1)(300, 1000, 100) == (2 * 8, 2, 132, 1)
    # stream-K: one wave, the K steps spread over the capacity.
    assert make_map_fn(128, 128, 64, decomposition="stream_k")(128, 4096, 8192) == (132, 32, 132, 1)


# ----------------------------------------------------------------------------------------------------
# fit_wave / fit_config
# ----------------------------------------------------------------------------------------------------

TRUE = np.array([6.0, 0.012, 0.15, 0.0021])  # a + b*G + c*L + d*G*L, in us


def bilinear(coef, G, L):
    G = np.asarray(G, dtype=float)
    L = np.asarray(L, dtype=float)
    return coef[0] + coef[1] * G + coef[2] * L + coef[3] * G * L


def grid_points(w=1, C=SMS):
    G, L = np.meshgrid([(w - 1) * C + f for f in (46, 92, 132)], [16, 64, 256, 1024])
    return G.ravel(), L.ravel()


def test_fit_recovers_exact_bilinear_coefficients():
    G, L = grid_points()
    coef = model.fit_wave(G, L, bilinear(TRUE, G, L))
    np.testing.assert_allclose(coef, TRUE, rtol=1e-8)


def test_fit_recovers_coefficients_under_small_multiplicative_noise():
    rng = np.random.default_rng(1234)
    G, L = grid_points()
    T = bilinear(TRUE, G, L) * (1 + 0.002 * rng.standard_normal(G.size))
    coef = model.fit_wave(G, L, T)
    np.testing.assert_allclose(coef, TRUE, rtol=0.15)
    # The fit is accurate where it was sampled.
    assert model.accuracy(bilinear(coef, G, L), T)["p90"] < 0.005


def test_fit_minimizes_relative_error():
    # Overdetermined noisy data: the result is the least-squares solution of (X / T) beta = 1.
    rng = np.random.default_rng(7)
    G, L = grid_points(w=3)
    T = bilinear(TRUE, G, L) * (1 + 0.05 * rng.standard_normal(G.size))
    X = np.stack([np.ones_like(G), G, L, G * L], axis=1).astype(float)
    expected, *_ = np.linalg.lstsq(X / T[:, None], np.ones_like(T), rcond=None)
    np.testing.assert_allclose(model.fit_wave(G, L, T), expected, rtol=1e-6)


def test_fit_falls_back_with_two_points():
    G, L = np.array([100, 132]), np.array([16, 256])
    T = bilinear(TRUE, G, L)
    coef = model.fit_wave(G, L, T)
    assert np.all(np.isfinite(coef)) and np.max(np.abs(coef)) < 1e3
    np.testing.assert_allclose(bilinear(coef, G, L), T, rtol=1e-9)
    # Two parameters at most: the reduced model a + d*G*L ("time proportional to work").
    assert coef[1] == 0 and coef[2] == 0


def test_fit_falls_back_when_all_points_share_one_G():
    G = np.full(5, 132)
    L = np.array([16, 32, 64, 128, 256])
    T = bilinear(TRUE, G, L)
    coef = model.fit_wave(G, L, T)
    assert np.all(np.isfinite(coef)) and np.max(np.abs(coef)) < 1e3
    np.testing.assert_allclose(bilinear(coef, G, L), T, rtol=1e-9)
    # Repeats of one (G, L) point: nothing to separate, a constant (the relative-error optimum).
    coef = model.fit_wave([132, 132, 132], [64, 64, 64], [10.0, 11.0, 12.0])
    assert coef[1:].tolist() == [0, 0, 0] and 10.0 < coef[0] < 12.0


def test_fit_falls_back_on_collinear_points_and_single_points():
    G = np.array([10, 20, 30, 40])
    L = G * 2  # on a line: 1, G and L are collinear
    T = bilinear(TRUE, G, L)
    coef = model.fit_wave(G, L, T)
    np.testing.assert_allclose(bilinear(coef, G, L), T, rtol=1e-6)
    assert model.fit_wave([50], [16], [7.5]).tolist() == [7.5, 0, 0, 0]


def test_fit_rejects_invalid_input():
    with pytest.raises(ValueError, match="no points"):
        model.fit_wave([], [], [])
    with pytest.raises(ValueError, match="same length"):
        model.fit_wave([1, 2], [1], [1, 2])
    with pytest.raises(ValueError, match="> 0"):
        model.fit_wave([1, 2], [1, 2], [1.0, 0.0])
    with pytest.raises(ValueError, match="non-finite"):
        model.fit_wave([1, 2], [1, 2], [1.0, np.nan])


def test_fit_config_fits_each_wave_and_skips_thin_ones():
    coef1, coef2 = TRUE, TRUE * np.array([2.0, 1.0, 1.5, 0.9])
    G1, L1 = grid_points(w=1)
    G2, L2 = grid_points(w=2)
    G = np.concatenate([G1, G2, [400, 410]])
    L = np.concatenate([L1, L2, [16, 64]])
    w = np.concatenate([np.full(G1.size, 1), np.full(G2.size, 2), [4, 4]])
    T = np.concatenate([bilinear(coef1, G1, L1), bilinear(coef2, G2, L2), [500.0, 900.0]])
    fits = model.fit_config(G, L, w, T)
    assert list(fits) == [1, 2]  # wave 4 has 2 < 3 points: skipped
    np.testing.assert_allclose(fits[1], coef1, rtol=1e-8)
    np.testing.assert_allclose(fits[2], coef2, rtol=1e-8)
    # No wave with enough points: everything fitted together, under the smallest wave.
    fits = model.fit_config([140, 150, 300], [16, 64, 64], [2, 2, 3], [10.0, 20.0, 40.0])
    assert list(fits) == [2]
    assert list(model.fit_config(G, L, w, T, min_points=2)) == [1, 2, 4]


# ----------------------------------------------------------------------------------------------------
# predict: docs/tables.md "Evaluating the model", on hand-computed cases (C = 100)
# ----------------------------------------------------------------------------------------------------

W1 = [10.0, 0.1, 1.0, 0.0]  # T_1(G, L) = 10 + 0.1 G + L
W2 = [20.0, 0.1, 1.0, 0.0]  # T_2(G, L) = 20 + 0.1 G + L
W4 = [50.0, 0.2, 0.0, 0.01]  # T_4(G, L) = 50 + 0.2 G + 0.01 G L


def test_predict_profiled_wave():
    assert model.predict({1: W1, 2: W2, 4: W4}, G=50, L=10, w=1, C=100) == 10 + 5 + 10


def test_predict_below_the_smallest_wave_uses_it_unshifted():
    assert model.predict({2: W2, 4: W4}, G=50, L=10, w=1, C=100) == 20 + 5 + 10


def test_predict_interpolates_at_the_same_position_in_the_neighbouring_waves():
    # w = 3 between 2 and 4: G_2 = 250 - 100 = 150 -> 45; G_4 = 250 + 100 = 350 -> 50 + 70 + 35 = 155.
    assert model.predict({1: W1, 2: W2, 4: W4}, G=250, L=10, w=3, C=100) == pytest.approx(45 + (155 - 45) / 2)


def test_predict_extrapolates_by_the_average_wave_of_the_top_fit():
    # w = 6 over {1, 2, 4}: G_top = 550 - 200 = 350 -> T_4 = 155; the full grid of wave 4 (G = 400) takes
    # 170, so each of the 2 further waves costs 170 / 4.
    assert model.predict({1: W1, 2: W2, 4: W4}, G=550, L=10, w=6, C=100) == pytest.approx(155 + 2 * 170 / 4)
    # One profiled wave: G_top = 450 - 300 = 150 -> 45; full grid (G = 200) 50, so 3 waves of 25 more.
    assert model.predict({2: W2}, G=450, L=10, w=5, C=100) == pytest.approx(45 + 3 * 25)


def test_predict_clamps():
    # G_i is clamped to >= 1: G_top = 50 - 200 -> 1, T_top = 10 + 1 = 11, plus 2 waves of T_1(100) = 110.
    assert model.predict({1: [10.0, 1.0, 0.0, 0.0]}, G=50, L=10, w=3, C=100) == pytest.approx(231.0)
    # The prediction is clamped to >= 0.1 us ...
    assert model.predict({1: [-5.0, 0.0, 0.0, 0.0]}, G=50, L=10, w=1, C=100) == 0.1
    # ... but only the prediction, not the per-wave terms: -10 + (30 - (-10)) * (2 - 1) / (3 - 1) = 10.
    assert model.predict({1: [-10.0, 0, 0, 0], 3: [30.0, 0, 0, 0]}, G=150, L=10, w=2, C=100) == 10.0
    # NaN (inf - inf from absurd coefficients) never wins a comparison (as the C++ engine does).
    assert model.predict({1: [math.inf, 0, 0, 0], 3: [math.inf, 0, 0, 0]}, G=150, L=10, w=2, C=100) == math.inf


def test_predict_agrees_with_the_fit_it_came_from():
    G, L = grid_points(w=2)
    fits = model.fit_config(G, L, np.full(G.size, 2), bilinear(TRUE, G, L))
    for g, l in zip(G, L):
        assert model.predict(fits, g, l, 2, SMS) == pytest.approx(bilinear(TRUE, g, l), rel=1e-9)


# ----------------------------------------------------------------------------------------------------
# plan_anchors
# ----------------------------------------------------------------------------------------------------

PLAN_CONFIGS = {
    "cooperative_128x256x64_1x1_data_parallel": make_map_fn(128, 256, 64),
    "swapab_cooperative_128x16x128_1x1_data_parallel": make_map_fn(128, 16, 128, swap_ab=True),
    "cooperative_128x128x64_1x1_split_k_4": make_map_fn(128, 128, 64, decomposition="split_k", splits=4),
}


@pytest.mark.parametrize("name", sorted(PLAN_CONFIGS))
def test_plan_anchors_land_in_their_waves_and_are_llm_like(name):
    map_fn = PLAN_CONFIGS[name]
    detailed = model.plan_anchors_detailed(map_fn)
    anchors = model.plan_anchors(map_fn)
    assert anchors == [(a["m"], a["n"], a["k"]) for a in detailed]
    assert 20 <= len(anchors) <= 40
    assert len(set(anchors)) == len(anchors)
    for a in detailed:
        m, n, k = a["m"], a["n"], a["k"]
        G, L, C, w = map_fn(m, n, k)
        assert (G, L, w) == (a["G"], a["L"], a["w"])
        assert w == _ceil_div(a["target_G"], C), a  # the intended wave
        assert abs(G - a["target_G"]) <= 0.2 * C and abs(L - a["target_L"]) <= 0.25 * a["target_L"]
        assert 1 <= m <= 16384
        assert n % 8 == 0 and k % 8 == 0 and n % 128 == 0 and k % 128 == 0
        assert 1024 <= n <= 65536 and 128 <= k <= 65536
    assert {a["w"] for a in detailed} == set(model.PLAN_WAVES)
    # Several (G, L) points per wave, enough for a bilinear fit.
    for w in model.PLAN_WAVES:
        assert sum(a["w"] == w for a in detailed) >= 4
    assert model.plan_anchors(map_fn) == anchors  # deterministic


def test_plan_anchors_reach_decode_shapes_through_n_for_swap_ab():
    map_fn = PLAN_CONFIGS["swapab_cooperative_128x16x128_1x1_data_parallel"]
    wave1 = [a for a in model.plan_anchors_detailed(map_fn) if a["w"] == 1]
    assert wave1 and max(a["m"] for a in wave1) <= 256  # a few tokens; the grid comes from N


def test_plan_anchors_drop_unrealizable_targets():
    map_fn = PLAN_CONFIGS["cooperative_128x256x64_1x1_data_parallel"]
    # L = 4 needs K = 256 on a tile-K-64 data-parallel config; wave 10**6 needs more tokens.
    plan = model.plan_anchors_detailed(map_fn, waves=(1, 10**6), k_steps=(4, 16, 256), k_range=(1024, 65536))
    assert plan and {a["w"] for a in plan} == {1} and {a["L"] for a in plan} <= {16, 256}
    short = model.plan_anchors_detailed(map_fn, waves=(1,), k_steps=(4, 16, 256))
    assert any(a["L"] == 4 and a["k"] == 256 for a in short)  # the default K range reaches it
    # Split-K 4 reaches L = 4 with K = 1024.
    split = model.plan_anchors_detailed(PLAN_CONFIGS["cooperative_128x128x64_1x1_split_k_4"], waves=(1,))
    assert any(a["L"] == 4 and a["k"] == 1024 for a in split)
    # Stream-K is one wave: only wave-1 anchors survive.
    stream = model.plan_anchors_detailed(make_map_fn(128, 128, 64, decomposition="stream_k"))
    assert stream and {a["w"] for a in stream} == {1}


def test_thin_waves_keeps_the_ends_and_drops_the_most_crowded_wave():
    steps = [model.PLAN_WAVES]
    while (thinner := model.thin_waves(steps[-1])) != steps[-1]:
        steps.append(thinner)
    assert steps == [(1, 2, 3, 4, 6, 8, 16, 32), (1, 2, 3, 4, 8, 16, 32), (1, 2, 4, 8, 16, 32), (1, 2, 4, 8, 32),
                     (1, 2, 8, 32), (1, 8, 32), (1, 32)]
    assert model.thin_waves((8, 1, 2)) == (1, 8)  # unsorted input; 2 sits closest between its neighbours
    assert model.thin_waves((4, 1)) == (1, 4)


# ----------------------------------------------------------------------------------------------------
# choose_micro, accuracy
# ----------------------------------------------------------------------------------------------------


def _samples(per_wave):
    return [(w, raster, swizzle, us) for w, options in per_wave.items() for (raster, swizzle), us in options.items()]


def test_choose_micro_keeps_only_clear_wins_and_compresses():
    samples = _samples({
        1: {("heuristic", 1): 10.0, ("along_m", 2): 9.9},  # 1% better: not enough
        2: {("heuristic", 1): 20.0, ("along_n", 4): 19.0, ("along_m", 1): 19.5},  # 5%: along_n 4
        4: {("heuristic", 1): 40.0, ("along_n", 4): 38.0},  # same rule: compressed
        8: {("heuristic", 1): 80.0, ("along_n", 4): 79.0, ("along_m", 8): 77.5},  # 3.1%: along_m 8
        16: {("heuristic", 1): 160.0, ("along_m", 8): 157.0},  # 1.9%: back to the default
        32: {("heuristic", 1): 100.0, ("along_m", 8): 98.0},  # exactly 2%: not more than 2%
    })  # fmt: skip
    assert model.choose_micro(samples) == [(2, "along_n", 4), (8, "along_m", 8), (16, "heuristic", 1)]
    # Only default choices: no rules (the table's default applies).
    assert model.choose_micro(_samples({1: {("heuristic", 1): 10.0, ("along_m", 1): 9.95}})) == []


def test_choose_micro_needs_the_default_and_valid_options():
    with pytest.raises(ValueError, match="default"):
        model.choose_micro([(1, "along_m", 2, 10.0)])
    with pytest.raises(ValueError, match="raster"):
        model.choose_micro([(1, "diagonal", 1, 10.0)])
    with pytest.raises(ValueError, match="max_swizzle"):
        model.choose_micro([(1, "heuristic", 3, 10.0)])


def test_accuracy():
    acc = model.accuracy([11.0, 9.0, 10.0, 20.0], [10.0, 10.0, 10.0, 10.0])
    assert acc["median"] == pytest.approx(0.1) and acc["max"] == pytest.approx(1.0)
    assert acc["p90"] == pytest.approx(np.percentile([0.1, 0.1, 0.0, 1.0], 90))
    assert acc["n"] == 4


# ----------------------------------------------------------------------------------------------------
# tablefile
# ----------------------------------------------------------------------------------------------------


def test_fnv1a64_known_vectors():
    assert tablefile.fnv1a64(b"") == 0xCBF29CE484222325
    assert tablefile.fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert tablefile.fnv1a64(b"foobar") == 0x85944171F73967E8


def test_table_slug():
    from wavetune.runtime import tables

    assert tables.table_slug("NVIDIA H200") == "nvidia-h200"
    assert tables.table_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert tables.table_slug("NVIDIA  GH200 -- 480GB") == "nvidia-gh200-480gb"
    # docs/tables.md: leading and trailing runs become "-" too; only ASCII letters and digits are kept.
    assert tables.table_slug("NVIDIA H100 (PCIe)") == "nvidia-h100-pcie-"
    assert tables.table_slug("\u212a80") == "-80"  # the Kelvin sign lower-cases to "k" in Python


def tiny_table():
    meta = {
        "gpu_name": "NVIDIA H200", "sm_count": 132, "config_space_hash": "0123456789abcdef",
        "wavetune_version": "0.1.0", "cuda_version": 13000, "created": "2026-11-21T00:00:00Z",
        "timing": "cuda graph, cold weights", "l2_bytes": 62914560,
    }  # fmt: skip
    configs = [
        {"variant": "bf16_bcol_cooperative_128x128x64_1x1_stream_k", "decomposition": "split_k", "splits": 4},
        {"variant": "bf16_bcol_swapab_cooperative_128x16x128_1x1_persistent", "decomposition": "data_parallel",
         "splits": 1},
    ]  # fmt: skip
    waves = {0: {2: [1.5, 0.25, 0.125, 1e-05], 1: [3.0, 0.1, 0.2, 0.003]}, 1: {1: np.array([2.0, 0.0, 0.5, -0.0])}}
    micro = {0: [(4, "along_n", 2)], 1: []}
    exact = [{"dtype": "bf16", "b_layout": "col", "m_first": 17, "m_last": 300, "n": 4096, "k": 4096, "config_id": 0,
              "raster": "along_m", "max_swizzle": 2, "us": 30.5},
             {"dtype": "bf16", "b_layout": "col", "m_first": 1, "m_last": 16, "n": 4096, "k": 4096, "config_id": 1,
              "raster": "heuristic", "max_swizzle": 1, "us": 12.25}]  # fmt: skip
    return meta, configs, waves, micro, exact


# Priors of both configs' data (bf16, col): config 1 up to M = 64, config 0 for every larger M.
TINY_PRIORS = [{"config_id": 0, "max_m": 0, "margin": 0.2}, {"config_id": 1, "max_m": 64, "margin": 0.25}]

GOLDEN = """\
wavetune-table 4
meta gpu_name NVIDIA H200
meta sm_count 132
meta config_space_hash 0123456789abcdef
meta wavetune_version 0.1.0
meta cuda_version 13000
meta created 2026-11-21T00:00:00Z
meta l2_bytes 62914560
meta timing cuda graph, cold weights
config 0 bf16_bcol_cooperative_128x128x64_1x1_stream_k split_k 4
config 1 bf16_bcol_swapab_cooperative_128x16x128_1x1_persistent data_parallel 1
wave 0 1 3.0 0.1 0.2 0.003
wave 0 2 1.5 0.25 0.125 1e-05
wave 1 1 2.0 0.0 0.5 -0.0
micro 0 4 along_n 2
exact bf16 col 1 16 4096 4096 1 heuristic 1 12.25
exact bf16 col 17 300 4096 4096 0 along_m 2 30.5
prior 1 64 0.25
prior 0 0 0.2
memory 2500000.0
checksum 18b8c73392b45946
"""


def test_write_table_golden(tmp_path):
    path = tmp_path / "nvidia-h200.wtt"
    tablefile.write_table(path, *tiny_table(), priors=TINY_PRIORS, memory_bytes_per_us=2.5e6)
    data = path.read_bytes()
    assert data == GOLDEN.encode()
    body, last = data[: data.rindex(b"checksum ")], data.splitlines()[-1]
    assert last == f"checksum {tablefile.fnv1a64(body):016x}".encode()
    assert sorted(os.listdir(tmp_path)) == ["nvidia-h200.wtt"]  # no temporary file left


def test_read_table_gives_back_what_write_table_wrote(tmp_path):
    path = tmp_path / "in.wtt"
    path.write_bytes(GOLDEN.encode())
    table = tablefile.read_table(path)
    assert table["exact"][0] == {"dtype": "bf16", "b_layout": "col", "m_first": 1, "m_last": 16, "n": 4096,
                                 "k": 4096, "config_id": 1, "raster": "heuristic", "max_swizzle": 1, "us": 12.25}
    assert table["memory_bytes_per_us"] == 2.5e6 and table["waves"][0][2] == [1.5, 0.25, 0.125, 1e-05]
    tablefile.write_table(tmp_path / "out.wtt", **table)
    assert (tmp_path / "out.wtt").read_bytes() == GOLDEN.encode()


BODY = GOLDEN[: GOLDEN.rindex("checksum")]


def signed(body: str) -> str:
    return body + f"checksum {tablefile.fnv1a64(body.encode()):016x}\n"


@pytest.mark.parametrize(
    "text, message",
    [
        (signed(BODY.replace("wavetune-table 4", "wavetune-table 3")),
         r"in.wtt: not a wavetune-table 4 file \(version '3'\): re-tune"),
        (GOLDEN.replace("wave 1 1 2.0", "wave 1 1 2.5"), "in.wtt: checksum mismatch"),
        (BODY, "in.wtt: no checksum line"),
        (signed(BODY.replace("1 heuristic 1 12.25", "1 heuristic 1")),
         r"in.wtt:16: malformed record 'exact bf16 col 1 16 4096 4096 1 heuristic 1' \(9 fields"),
        (signed(BODY + "bogus 1\n"), r"in.wtt:21: malformed record 'bogus 1' \(unknown record type"),
    ],
)  # fmt: skip
def test_read_table_refusals(tmp_path, text, message):
    (tmp_path / "in.wtt").write_text(text)
    with pytest.raises(ValueError, match=message):
        tablefile.read_table(tmp_path / "in.wtt")


def _with(index, changes):
    """The tiny table with ``changes`` merged into part ``index`` (for configs: into the first config)."""
    parts = list(tiny_table())
    if index == 1:
        parts[1] = [{**parts[1][0], **changes}, parts[1][1]]
    else:
        parts[index] = {**parts[index], **changes}
    return parts


@pytest.mark.parametrize(
    "parts, message",
    [
        ([{k: v for k, v in tiny_table()[0].items() if k != "sm_count"}, *tiny_table()[1:]], "sm_count"),
        (_with(0, {"config_space_hash": "XYZ"}), "config_space_hash"),
        (_with(0, {"timing": "two\nlines"}), "one line"),
        (_with(1, {"id": 5}), "contiguous"),
        (_with(1, {"decomposition": "splitk"}), "decomposition"),
        (_with(1, {"decomposition": "stream_k"}), "splits must be 1"),
        (_with(1, {"split": 4}), "unknown key"),
        (_with(1, {"variant": "bf16_bcol_cooperative_128x128x64_1x1_persistent"}), "data_parallel only"),
        (_with(2, {1: {}}), "no wave"),
        (_with(3, {0: [(1, "diagonal", 1)]}), "raster"),
        (_with(3, {0: [(1, "along_m", 3)]}), "max_swizzle"),
        (_with(3, {7: [(1, "along_m", 2)]}), "out of range"),
    ],
)  # fmt: skip
def test_write_table_rejects_invalid_input(tmp_path, parts, message):
    with pytest.raises(ValueError, match=message):
        tablefile.write_table(tmp_path / "t.wtt", *parts)
    assert os.listdir(tmp_path) == []


def test_write_table_rejects_bad_waves_and_exact_records(tmp_path):
    meta, configs, waves, micro, exact = tiny_table()
    with pytest.raises(ValueError, match=r"config\(s\) 1 have no wave"):
        tablefile.write_table(tmp_path / "t.wtt", meta, configs, {0: waves[0]}, micro, exact)
    with pytest.raises(ValueError, match="4 coefficients"):
        tablefile.write_table(tmp_path / "t.wtt", meta, configs, {**waves, 1: {1: [1.0, 2.0]}}, micro, exact)
    with pytest.raises(ValueError, match="finite"):
        tablefile.write_table(tmp_path / "t.wtt", meta, configs, {**waves, 1: {1: [math.inf, 0, 0, 0]}}, micro,
                              exact)  # fmt: skip
    with pytest.raises(ValueError, match="does not take dtype fp16"):
        tablefile.write_table(tmp_path / "t.wtt", meta, configs, waves, micro, [dict(exact[0], dtype="fp16")])
    with pytest.raises(ValueError, match="2\\^31-1"):
        tablefile.write_table(tmp_path / "t.wtt", meta, configs, waves, micro, [dict(exact[0], n=2**31)])
    with pytest.raises(ValueError, match="exact record 2 repeats M 17..300 of bf16 col N=4096 K=4096"):
        tablefile.write_table(tmp_path / "t.wtt", meta, configs, waves, micro, exact * 2)
    with pytest.raises(ValueError, match="M 1..16 and M 16..20 of bf16 col N=4096 K=4096 overlap"):
        tablefile.write_table(tmp_path / "t.wtt", meta, configs, waves, micro,
                              [*exact, dict(exact[1], m_first=16, m_last=20)])  # fmt: skip
    with pytest.raises(ValueError, match="m_first 9 is above m_last 8"):
        tablefile.write_table(tmp_path / "t.wtt", meta, configs, waves, micro, [dict(exact[0], m_first=9, m_last=8)])
    assert os.listdir(tmp_path) == []
    # Ranges of other layers may hold the same M.
    tablefile.write_table(tmp_path / "t.wtt", meta, configs, waves, micro, [*exact, dict(exact[1], k=8192)])


@pytest.mark.parametrize(
    "priors, message",
    [
        ([{"config_id": 0, "max_m": 16}], "exactly the keys config_id, max_m, margin"),
        ([{"config_id": 2, "max_m": 16, "margin": 0.2}], "out of range"),
        ([{"config_id": 0, "max_m": -1, "margin": 0.2}], "max_m"),
        ([{"config_id": 0, "max_m": 16, "margin": -0.1}], "margin must be >= 0"),
        ([{"config_id": 0, "max_m": 16, "margin": math.nan}], "margin"),
        ([{"config_id": 0, "max_m": 16, "margin": 0.2}, {"config_id": 1, "max_m": 16, "margin": 0.1}],
         "repeats max_m 16"),
    ],
)  # fmt: skip
def test_write_table_rejects_bad_priors(tmp_path, priors, message):
    with pytest.raises(ValueError, match=message):
        tablefile.write_table(tmp_path / "t.wtt", *tiny_table(), priors=priors)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("bandwidth, message", [(0.0, "must be > 0"), (-1e6, "must be > 0"), (math.inf, "finite"),
                                                ("fast", "must be a number")])  # fmt: skip
def test_write_table_rejects_bad_memory_bandwidth(tmp_path, bandwidth, message):
    with pytest.raises(ValueError, match=message):
        tablefile.write_table(tmp_path / "t.wtt", *tiny_table(), memory_bytes_per_us=bandwidth)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("rate, message", [(0.0, "must be > 0"), (math.nan, "finite")])
def test_write_table_rejects_bad_traffic_rate(tmp_path, rate, message):
    with pytest.raises(ValueError, match=message):
        tablefile.write_table(tmp_path / "t.wtt", *tiny_table(), traffic_bytes_per_us=rate)
    assert os.listdir(tmp_path) == []


def test_traffic_floor():
    # 10 tiles of 128x16 run 6 K-steps of 64: each step moves (128 + 16) * 64 elements of 2 bytes.
    assert model.tile_traffic_bytes(10, 6, (128, 16, 64)) == 10 * 6 * 64 * 144 * 2
    assert model.traffic_floor_us(10, 6, (128, 16, 64), 1e6) == 10 * 6 * 64 * 144 * 2 / 1e6
    assert model.traffic_floor_us(10, 6, (128, 16, 64), 0) == 0.0  # no traffic record: no floor


def test_memory_floor():
    assert model.operand_bytes(1, 4096, 4096) == 2 * (4096 + 4096 * 4096 + 4096)
    assert model.memory_floor_us(1, 4096, 4096, 2e6) == model.operand_bytes(1, 4096, 4096) / 2e6
    assert model.memory_floor_us(1, 4096, 4096, 0) == 0.0  # no memory record: no floor


def test_write_table_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "t.wtt"
    path.write_bytes(b"old table\n")
    meta, configs, waves, micro, exact = tiny_table()
    # Invalid input: the old file is untouched.
    with pytest.raises(ValueError):
        tablefile.write_table(path, meta, [], waves, micro, exact)
    assert path.read_bytes() == b"old table\n"

    # A failure at the last step: the temporary file is removed, the old file is untouched.
    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(tablefile.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        tablefile.write_table(path, meta, configs, waves, micro, exact)
    assert path.read_bytes() == b"old table\n" and os.listdir(tmp_path) == ["t.wtt"]
    monkeypatch.undo()

    tablefile.write_table(path, meta, configs, waves, None, None)  # replaces the old file
    data = path.read_bytes()
    assert data.startswith(b"wavetune-table 4\n") and b"\nmicro " not in data and b"\nexact " not in data
    assert b"\nmemory " not in data
    assert os.listdir(tmp_path) == ["t.wtt"]



def test_fit_calibration_recovers_a_power_law_and_round_trips_in_a_table(tmp_path):
    """Ratios that follow exp(c0) M^c1 N^c2 K^c3 exactly give those coefficients back (the ridge moves
    slopes only a little at this size); the table writes and reads them as given, and refuses bad ones."""
    rng = np.random.default_rng(3)
    problems = [(int(rng.integers(1, 16384)), int(rng.integers(256, 65536)), int(rng.integers(256, 32768)))
                for _ in range(400)]
    truth = [0.3, -0.05, 0.02, 0.04]
    ratios = [model.calibration_factor(truth, *p) for p in problems]
    coef = model.fit_calibration(problems, ratios, ridge=0.0)
    assert np.allclose(coef, truth, atol=1e-9)
    ridged = model.fit_calibration(problems, ratios)
    assert np.allclose(ridged[1:], truth[1:], atol=0.01)
    assert model.fit_calibration([(8, 8, 8)], [2.0]) == pytest.approx([math.log(2.0), 0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="positive, finite ratio"):
        model.fit_calibration([(8, 8, 8)], [0.0])

    configs = [{"variant": "bf16_bcol_pingpong_64x64x64_1x1_persistent", "decomposition": "data_parallel", "splits": 1}]
    meta = {"gpu_name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "config_space_hash": "0123456789abcdef",
            "wavetune_version": "0", "cuda_version": 13000, "created": "2026-11-23T00:00:00+00:00"}
    path = tmp_path / "t.wtt"
    tablefile.write_table(path, meta, configs, {0: {1: [5.0, 0.0, 0.0, 0.0]}}, None, None, calibration={0: coef})
    assert b"\ncalibration 0 " in path.read_bytes()
    assert tablefile.read_table(path)["calibration"] == {0: coef}
    with pytest.raises(ValueError, match="4 coefficients"):
        tablefile.format_table(meta, configs, {0: {1: [5.0, 0.0, 0.0, 0.0]}}, calibration={0: [1.0]})
    with pytest.raises(ValueError, match="calibration config id"):
        tablefile.format_table(meta, configs, {0: {1: [5.0, 0.0, 0.0, 0.0]}}, calibration={3: coef})


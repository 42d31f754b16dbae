"""The wave-aware bilinear latency model: fitting, reference evaluation, anchor planning, micro choice.

Within one wave regime ``w`` of a config, latency is close to bilinear in the grid size ``G`` and the
inner-loop length ``L`` (docs/model.md)::

    T_us = a + b*G + c*L + d*G*L

This module fits (a, b, c, d) per wave from profiled anchor problems, evaluates the model exactly as
docs/tables.md "Evaluating the model" says (a reference for diagnostics and tests; the C++ lookup
engine is the run-time evaluator), plans which anchor problems to profile, and picks the second-stage
("micro") launch parameters.

Standalone on purpose: numpy and the standard library only, and nothing from the wavetune package, so
it loads without the native extension (tests load it by file path).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np

__all__ = [
    "DEFAULT_N_CHOICES",
    "PLAN_WAVES",
    "accuracy",
    "calibration_factor",
    "choose_micro",
    "fit_calibration",
    "fit_config",
    "fit_wave",
    "map_problem",
    "memory_floor_us",
    "operand_bytes",
    "plan_anchors",
    "plan_anchors_detailed",
    "predict",
    "thin_waves",
    "tile_traffic_bytes",
    "traffic_floor_us",
    "wave_time",
]

# ----------------------------------------------------------------------------------------------------
# Fitting
# ----------------------------------------------------------------------------------------------------

# Candidate models, most complete first. Each is a tuple of term indices into (1, G, L, G*L), i.e. of
# the coefficients (a, b, c, d). Within one size the first full-rank candidate wins. With two terms the
# throughput term G*L comes first: "time proportional to work" is the safest two-parameter prior (it
# keeps the fit growing in both G and L), and it still fits point sets where only G or only L varies.
_CANDIDATES: tuple[tuple[int, ...], ...] = (
    (0, 1, 2, 3),  # a + b*G + c*L + d*G*L
    (0, 1, 2),  # drop d
    (0, 1, 3),
    (0, 2, 3),
    (0, 3),  # a + d*G*L
    (0, 1),  # a + b*G
    (0, 2),  # a + c*L
    (0,),  # a constant: always possible
)

# A weighted, column-equilibrated design whose smallest singular value is below RCOND times its largest
# is treated as rank deficient (duplicate or collinear points), and the next reduced model is tried.
RCOND = 1e-9


def _as_float_vector(name: str, x) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains a non-finite value")
    return arr


def _check_points(G, L, T) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    G = _as_float_vector("G", G)
    L = _as_float_vector("L", L)
    T = _as_float_vector("T", T)
    if not (G.size == L.size == T.size):
        raise ValueError(f"G, L and T must have the same length (got {G.size}, {L.size}, {T.size})")
    if G.size == 0:
        raise ValueError("no points to fit")
    if np.any(G < 1) or np.any(L < 1):
        raise ValueError("G and L must be >= 1")
    if np.any(T <= 0):
        raise ValueError("latencies T must be > 0 (the fit minimizes relative error)")
    return G, L, T


def wave_time(coef, G, L) -> float:
    """One wave's bilinear model ``a + b*G + c*L + d*G*L`` (in this operation order, in double)."""
    a, b, c, d = (float(x) for x in coef)
    G = float(G)
    L = float(L)
    return a + b * G + c * L + d * G * L


def fit_wave(G, L, T, *, rcond: float = RCOND) -> np.ndarray:
    """Fit ``T = a + b*G + c*L + d*G*L`` to the points of one wave regime; returns ``[a, b, c, d]``.

    Method: weighted least squares on relative error, i.e. minimize ``sum(((model - T) / T)**2)``
    (every row of the design and the target divided by T, so a 10 us and a 2 ms point count alike).
    For conditioning, G and L are divided by their maxima and the columns of the weighted design are
    normalized to unit length; the solution is scaled back, so the coefficients apply to raw G and L.

    Robustness: a bilinear fit needs 4 distinct (G, L) points in general position. With fewer, or a
    rank-deficient design (e.g. all points at one G: the columns 1 and G coincide), a reduced model is
    fitted instead, trying in order (first full-rank one of each size wins)::

        a+bG+cL+dGL -> a+bG+cL, a+bG+dGL, a+cL+dGL -> a+dGL, a+bG, a+cL -> a

    so dropped terms come back as 0. A candidate is also rejected when its fit is not positive at the
    four corners of the sampled (G, L) box (a bilinear function takes its extremes there), which
    catches the wild coefficients of a nearly degenerate design. The constant model (the
    relative-error optimal ``a = sum(1/T) / sum(1/T**2)``) always succeeds, so this never fails on
    valid input. Raises ValueError on empty, mismatched, non-finite, ``G < 1``, ``L < 1`` or
    ``T <= 0`` input.
    """
    G, L, T = _check_points(G, L, T)
    g_scale, l_scale = float(G.max()), float(L.max())
    g, l = G / g_scale, L / l_scale
    features = np.stack([np.ones_like(g), g, l, g * l], axis=1) / T[:, None]  # weighted by 1/T
    target = np.ones_like(T)  # T / T
    unscale = np.array([1.0, 1.0 / g_scale, 1.0 / l_scale, 1.0 / (g_scale * l_scale)])
    n_distinct = len(set(zip(G.tolist(), L.tolist())))
    corners = [(G.min(), L.min()), (G.min(), L.max()), (G.max(), L.min()), (G.max(), L.max())]

    for terms in _CANDIDATES:
        if len(terms) > n_distinct:
            continue
        A = features[:, terms]
        norms = np.linalg.norm(A, axis=0)
        An = A / norms
        s = np.linalg.svd(An, compute_uv=False)
        if len(terms) > 1 and not (s[-1] > rcond * s[0]):
            continue
        z, *_ = np.linalg.lstsq(An, target, rcond=None)
        coef = np.zeros(4)
        coef[list(terms)] = z / norms * unscale[list(terms)]
        if not np.all(np.isfinite(coef)):
            continue
        if len(terms) > 1 and min(wave_time(coef, gc, lc) for gc, lc in corners) <= 0:
            continue
        return coef
    raise AssertionError("unreachable: the constant model always fits")  # pragma: no cover


def fit_config(G, L, w, T, min_points: int = 3) -> dict[int, np.ndarray]:
    """Fit one config: one ``fit_wave`` per wave regime, as ``{w: [a, b, c, d]}`` sorted by w.

    A wave value is fitted when at least ``min_points`` points (measurements, repeats included) have
    it; waves with fewer points are skipped, not merged into a neighbour (their G range belongs to
    another regime, so merging would bias both). At run time a skipped wave is covered by
    interpolation or extrapolation between the fitted ones. If no wave has enough points, all points
    are fitted together and returned under the smallest wave present, so a config always gets at least
    one wave (tables require one).
    """
    G, L, T = _check_points(G, L, T)
    w = np.asarray(w).reshape(-1)
    if w.size != G.size:
        raise ValueError(f"w must have the same length as G, L and T (got {w.size}, expected {G.size})")
    if not np.all(np.isfinite(w.astype(np.float64))) or np.any(w < 1) or np.any(w != np.round(w)):
        raise ValueError("wave counts w must be integers >= 1")
    w = w.astype(np.int64)
    if min_points < 1:
        raise ValueError("min_points must be >= 1")
    out: dict[int, np.ndarray] = {}
    for wave in sorted(set(w.tolist())):
        sel = w == wave
        if int(sel.sum()) >= min_points:
            out[int(wave)] = fit_wave(G[sel], L[sel], T[sel])
    if not out:
        out[int(w.min())] = fit_wave(G, L, T)
    return out


# ----------------------------------------------------------------------------------------------------
# Reference evaluation (docs/tables.md, "Evaluating the model")
# ----------------------------------------------------------------------------------------------------

MIN_PREDICTION_US = 0.1


def operand_bytes(m: int, n: int, k: int, groups: int = 1) -> int:
    """Bytes a GEMM must move at least: A, B and D once each, 2 bytes per element (bf16, fp16). A grouped
    problem of ``groups`` experts over M rows reads the weights of min(groups, M) of them."""
    return 2 * (m * k + min(groups, m) * n * k + m * n)


def memory_floor_us(m: int, n: int, k: int, bytes_per_us: float, groups: int = 1) -> float:
    """The table's floor under every prediction (its ``memory`` record; docs/tables.md): the operands
    moved at the fastest traffic measured while tuning. 0 without a record (``bytes_per_us`` 0)."""
    return operand_bytes(m, n, k, groups) / bytes_per_us if bytes_per_us > 0 else 0.0


def compute_floor_us(m: int, n: int, k: int, flop_per_us: float) -> float:
    """The table's compute floor (docs/tables.md): 2*M*N*K at the fastest arithmetic measured while tuning;
    no calibrated prediction is lower. 0 without a rate."""
    return 2.0 * m * n * k / flop_per_us if flop_per_us > 0 else 0.0


def tile_traffic_bytes(G: int, L: int, tile: Sequence[int]) -> float:
    """Bytes a config moves from L2 into shared memory: G*L K-steps, each a tile_k slice of both operand
    tiles (``tile`` = (tile_m, tile_n, tile_k)), 2 bytes per element."""
    tile_m, tile_n, tile_k = tile
    return 2.0 * G * L * tile_k * (tile_m + tile_n)


def traffic_floor_us(G: int, L: int, tile: Sequence[int], bytes_per_us: float) -> float:
    """The table's floor under one config's prediction (its ``traffic`` record; docs/tables.md): its tile
    traffic at the fastest rate measured while tuning. 0 without a record (``bytes_per_us`` 0)."""
    return tile_traffic_bytes(G, L, tile) / bytes_per_us if bytes_per_us > 0 else 0.0


# NOTES: a ridge penalty on the standardized slopes (not the intercept) keeps a config measured on few
# shapes near a constant factor. Chosen on the tune split of benchmarks/shape_suite.py (1-100 scored
# within 0.5% of each other; docs/tuning.md).
CALIBRATION_RIDGE = 10.0


def calibration_factor(coef: Sequence[float], m: int, n: int, k: int) -> float:
    """The factor a ``calibration`` record applies to a config's floored prediction (docs/tables.md)."""
    c0, c1, c2, c3 = (float(x) for x in coef)
    return math.exp(c0 + c1 * math.log(m) + c2 * math.log(n) + c3 * math.log(k))


def fit_calibration(problems: Sequence[tuple[int, int, int]], ratios: Sequence[float],
                    ridge: float = CALIBRATION_RIDGE) -> list[float]:
    """``[c0, c1, c2, c3]`` with ``ln(ratio) ~ c0 + c1 ln M + c2 ln N + c3 ln K`` over one config's
    ``problems`` (m, n, k), ``ratios`` = measured / predicted latency: ridge regression on standardized
    logs (the intercept unpenalized), mapped back to raw logs. Needs at least one problem."""
    X = np.log(np.asarray(problems, dtype=np.float64).reshape(-1, 3))
    y = np.log(_as_float_vector("ratios", ratios))
    if len(X) != len(y) or len(y) == 0 or np.any(~np.isfinite(y)):
        raise ValueError("calibration needs one positive, finite ratio per problem, and at least one")
    mean, scale = X.mean(axis=0), X.std(axis=0)
    scale[scale == 0] = 1.0
    Z = np.hstack([np.ones((len(X), 1)), (X - mean) / scale])
    penalty = ridge * np.eye(4)
    penalty[0, 0] = 0.0
    z = np.linalg.solve(Z.T @ Z + penalty, Z.T @ y)
    slopes = z[1:] / scale
    return [float(z[0] - slopes @ mean), *map(float, slopes)]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def problem_extents(tile: Sequence[int], cluster: Sequence[int], swap_ab: bool, m: int, n: int, k: int
                    ) -> tuple[int, int]:
    """(output tiles padded to whole clusters, K steps per tile) of a problem under a tile shape."""
    tile_m, tile_n, tile_k = tile
    cluster_m, cluster_n = cluster
    rows, cols = (n, m) if swap_ab else (m, n)
    tiles = (_ceil_div(_ceil_div(rows, tile_m), cluster_m) * cluster_m *
             _ceil_div(_ceil_div(cols, tile_n), cluster_n) * cluster_n)
    return tiles, max(1, _ceil_div(k, tile_k))


def map_problem(tile: Sequence[int], cluster: Sequence[int], swap_ab: bool, m: int, n: int, k: int,
                decomposition: str, splits: int, sm_count: int, ctas_per_sm: int = 1) -> tuple[int, int, int, int]:
    """(G, L, C, waves) of a problem under a config with ``ctas_per_sm`` of its CTAs resident per SM, as
    docs/model.md section 1 states the unified mapping: the reference that csrc/include/wavetune/mapping.h is
    tested against, and the mapping of tools that evaluate tables without the native module."""
    tiles, k_iters = problem_extents(tile, cluster, swap_ab, m, n, k)
    cluster_m, cluster_n = cluster
    cluster_size = cluster_m * cluster_n
    capacity = max(cluster_size, sm_count // cluster_size * cluster_size) * max(1, ctas_per_sm)
    if decomposition == "split_k":
        s = min(max(splits, 1), k_iters)
        grid, steps = tiles * s, _ceil_div(k_iters, s)
    elif decomposition == "stream_k":
        grid = min(capacity, tiles * k_iters)
        steps = _ceil_div(tiles * k_iters, grid)
    else:
        grid, steps = tiles, k_iters
    return grid, steps, capacity, _ceil_div(grid, capacity)


def predict(waves: dict[int, Sequence[float]], G: int, L: int, w: int, C: int) -> float:
    """Predicted latency (us) of a problem at (G, L, w) under a config with capacity C.

    Exactly the rules of docs/tables.md, with ``W`` the sorted profiled waves and ``T_v`` the bilinear
    model of wave v (``wave_time``, evaluated in double in the order ``a + b*G + c*L + d*G*L``):

    - ``w in W``: ``T_w(G, L)``;
    - ``w < min(W)``: ``T_min(W)(G, L)`` (G as is, not shifted);
    - ``w1 < w < w2`` adjacent in W: ``G_i = max(1, G - (w - w_i)*C)`` and
      ``T = T1 + (T2 - T1) * (w - w1) / (w2 - w1)`` with ``T_i = T_wi(G_i, L)``;
    - ``w > max(W)``: ``G_top = max(1, G - (w - w_top)*C)`` and
      ``T = T_w_top(G_top, L) + (w - w_top) * T_w_top(w_top*C, L) / w_top``: every further wave costs
      the top wave's average (its full grid's time over its wave count);
    - the result (only the final value, not the per-wave terms) is clamped to at least 0.1 us; a NaN
      result (only possible from absurd coefficients) becomes +inf, so it never wins a comparison.
    """
    if not waves:
        raise ValueError("a config needs at least one wave")
    W = sorted(int(v) for v in waves)
    coef = {int(v): c for v, c in waves.items()}
    G, L, w, C = int(G), int(L), int(w), int(C)

    def at(v: int) -> float:  # T_v at the same position inside wave v
        return wave_time(coef[v], max(1, G - (w - v) * C), L)

    if w in coef:
        T = wave_time(coef[w], G, L)
    elif w < W[0]:
        T = wave_time(coef[W[0]], max(1, G), L)
    elif w > W[-1]:
        w_top = W[-1]
        T = at(w_top) + (w - w_top) * wave_time(coef[w_top], w_top * C, L) / w_top
    else:
        i = bisect.bisect_left(W, w)
        w1, w2 = W[i - 1], W[i]
        T1, T2 = at(w1), at(w2)
        T = T1 + (T2 - T1) * (w - w1) / (w2 - w1)
    if T != T:  # NaN (inf - inf from absurd coefficients) must never win a comparison
        return math.inf
    return max(MIN_PREDICTION_US, T)


# ----------------------------------------------------------------------------------------------------
# Sampling plan
# ----------------------------------------------------------------------------------------------------

# Weight-matrix row counts N of common LLM linear layers (hidden sizes, fused QKV, MLP widths and fused
# gate/up of Llama 2/3, Mistral, Mixtral, Qwen2, Gemma), all multiples of 128 in [1024, 65536].
DEFAULT_N_CHOICES: tuple[int, ...] = (
    1024, 1536, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240, 11008, 12288, 14336,
    16384, 18944, 22016, 24576, 28672, 29568, 32768, 37888, 49152, 57344, 65536,
)  # fmt: skip

# The wave regimes the plan profiles: dense where waves are few (each wave adds a large share of the
# time), sparse above, where the model interpolates and extrapolates by whole waves (section 4 of
# docs/model.md).
PLAN_WAVES: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 16, 32)

MapFn = Callable[[int, int, int], tuple[int, int, int, int]]


def thin_waves(waves: Sequence[int]) -> tuple[int, ...]:
    """``waves`` without the interior wave the model can best do without: the one whose neighbours are
    closest on a log scale, so the remaining regimes stay evenly spread (ties: the larger wave goes).
    The first and last waves stay, as they bound the range the model interpolates in; fewer than three
    waves are returned unchanged. From the plan's (1, 2, 3, 4, 6, 8, 16, 32) repeated thinning gives
    (1, 2, 3, 4, 8, 16, 32), (1, 2, 4, 8, 16, 32), (1, 2, 4, 8, 32), (1, 2, 8, 32), (1, 8, 32), (1, 32).
    """
    waves = sorted(set(int(w) for w in waves))
    if len(waves) < 3:
        return tuple(waves)

    def neighbour_gap(i: int) -> tuple[float, int]:
        return math.log(waves[i + 1] / waves[i - 1]), -waves[i]

    drop = min(range(1, len(waves) - 1), key=neighbour_gap)
    return tuple(waves[:drop] + waves[drop + 1 :])


def plan_anchors(map_fn: MapFn, **options) -> list[tuple[int, int, int]]:
    """Anchor problems ``(m, n, k)`` to profile for ONE config; see ``plan_anchors_detailed``.

    With the defaults (8 waves, 4 corners + 1 interior target per wave) a plan has at most 40 anchors;
    on 132 SMs it yields 40 for ``cooperative_128x256x64_1x1`` data-parallel, 40 for
    ``swapab_cooperative_128x16x128_1x1`` data-parallel and 40 for ``cooperative_128x128x64_1x1`` with
    split-K 4 (tests check 20 to 40 and at least 4 per wave). Every other shipped bf16 variant, data
    parallel and with split-K 2, 4 and 8, gets 39 or 40, except 128x64x64 with split-K 8 (31: its
    smallest grid is 16 tiles x 8 splits = 128 CTAs, so wave 1 has no partly filled shape). A stream-K
    decomposition is one wave by construction and gets 2 (see ``plan_anchors_detailed``).
    """
    return [(a["m"], a["n"], a["k"]) for a in plan_anchors_detailed(map_fn, **options)]


def plan_anchors_detailed(
    map_fn: MapFn,
    waves: Sequence[int] = PLAN_WAVES,
    fills: Sequence[float] = (0.35, 0.7, 1.0),
    k_steps: Sequence[int] = (4, 16, 64, 256),
    n_choices: Sequence[int] = DEFAULT_N_CHOICES,
    token_range: tuple[int, int] = (1, 16384),
    k_range: tuple[int, int] = (128, 65536),
    k_multiple: int = 128,
    fill_tol: float = 0.2,
    l_tol: float = 0.25,
    interior: int = 1,
) -> list[dict]:
    """The sampling plan of one config, with the target and realized coordinates of each anchor.

    ``map_fn(m, n, k) -> (G, L, C, w)`` is the config's unified mapping (mapping.h, bound to the
    config's tile shape, decomposition and the GPU's SM count). It is the only thing the plan knows
    about the config: tile sizes, swap-AB, splits and the capacity C are all seen through it, so there
    are no special cases. It must be nondecreasing in m, n and k (the mapping is).

    Targets. For each wave ``w`` in ``waves`` the plan puts targets (G*, L*) on the (fill, L) box:
    its 4 corners (lowest and highest fill x shortest and longest L: the best-conditioned design for a
    bilinear fit) and ``interior`` interior points (middle fills x middle L values, rotating from wave
    to wave so the waves together cover every middle L), with ``G* = (w-1)*C + max(1, round(fill*C))``.
    Only the ``k_steps`` that the config can realize with K in ``k_range`` are used (e.g. L=4 needs
    K=256 on a data-parallel tile-K-64 config, and K=1024 under split-K 4; a ``k_range`` from 1024
    drops it from the former); realizability is probed with ``map_fn`` on every K of the grid, at the
    smallest M and three N of ``n_choices``. The full cross product (8 waves x 3 fills x 4 L = 96
    targets) would more than double the profiling for little gain: a bilinear model has 4 unknowns.

    Shapes. K is found by probing, not from a tile-K parameter: the largest K on the grid (multiples
    of ``k_multiple`` in ``k_range``) whose L equals L* (for split-K that is the K that splits evenly).
    N comes from ``n_choices`` (realistic weight-row counts); for each N, M (tokens, in
    ``token_range``) is solved by bisection for the G nearest G* (re-solving K and M a few times,
    which matters only for stream-K where L depends on M and N too), then raised to the largest M with
    the same (G, L), i.e. whole tiles. Because N and M are both searched through map_fn, a swap-AB
    config (G grows with N; M only fills its narrow tile side) and a normal one are handled alike. The
    N list is walked from a position that rotates with the target, and the first N that hits G* within
    ``max(1, 0.02*C)`` CTAs and L* exactly is taken (else the nearest one), so the anchors spread over
    many N values.

    Checks. An anchor is kept only if map_fn puts it in the intended wave, within ``fill_tol*C`` CTAs
    of G* and within ``l_tol*L*`` of L*; other targets are dropped, as are repeats of an already
    planned (G, L). Deterministic: no randomness, no dependence on dict or set order.

    Stream-K is one wave with ``G = C`` whenever the problem has at least C units of work, so only the
    full-wave targets survive (2 anchors with the defaults). For such a config plan one wave densely in
    L instead, e.g. ``waves=(1,), fills=(1.0,), k_steps=(4, 8, ..., 1024), interior=7`` (9 anchors).

    Returns dicts ``{m, n, k, G, L, w, target_G, target_L, fill}`` in target order (by wave, then
    corners, then interior points). Default sizes: see ``plan_anchors``.
    """
    waves = sorted({int(v) for v in waves})
    fills = sorted({float(f) for f in fills})
    n_choices = [int(n) for n in n_choices]
    m_lo, m_hi = (int(x) for x in token_range)
    if not waves or waves[0] < 1:
        raise ValueError("waves must be a non-empty list of integers >= 1")
    if not fills or fills[0] <= 0 or fills[-1] > 1:
        raise ValueError("fills must be in (0, 1]")
    if not n_choices or min(n_choices) < 1:
        raise ValueError("n_choices must be a non-empty list of positive integers")
    if not 1 <= m_lo <= m_hi:
        raise ValueError(f"token_range must satisfy 1 <= lo <= hi (got {token_range})")
    k_first = -(-int(k_range[0]) // k_multiple) * k_multiple
    k_grid = list(range(max(k_multiple, k_first), int(k_range[1]) + 1, k_multiple))
    if not k_grid:
        raise ValueError(f"k_range {k_range} holds no multiple of {k_multiple}")

    cache: dict[tuple[int, int, int], tuple[int, int, int, int]] = {}

    def coords(m: int, n: int, k: int) -> tuple[int, int, int, int]:
        key = (m, n, k)
        if key not in cache:
            G, L, C, w = map_fn(m, n, k)
            cache[key] = (int(G), int(L), int(C), int(w))
        return cache[key]

    def first_index(lo: int, hi: int, pred) -> int:
        """Smallest i in [lo, hi) with pred(i) true (pred monotone false->true); hi if none."""
        while lo < hi:
            mid = (lo + hi) // 2
            if pred(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def k_for(L_t: int, m: int, n: int) -> int:
        """Largest grid K with L == L_t, else the grid K whose L is nearest to L_t."""
        i = first_index(0, len(k_grid), lambda j: coords(m, n, k_grid[j])[1] > L_t)
        if i > 0 and coords(m, n, k_grid[i - 1])[1] == L_t:
            return k_grid[i - 1]
        options = [k_grid[j] for j in (i - 1, i) if 0 <= j < len(k_grid)]
        return min(options, key=lambda k: (abs(coords(m, n, k)[1] - L_t), k))

    def m_for(G_t: int, w_t: int, n: int, k: int) -> int:
        """The M in token_range whose G is nearest G_t (in the wave w_t preferred), whole tiles."""
        i = first_index(m_lo, m_hi + 1, lambda m: coords(m, n, k)[0] >= G_t)
        options = [m for m in (i - 1, i) if m_lo <= m <= m_hi]

        def score(m):
            G, _, _, w = coords(m, n, k)
            return (w != w_t, abs(G - G_t), m)

        m = min(options, key=score)
        G0, L0 = coords(m, n, k)[:2]
        # Raise M to the last value with the same (G, L): the whole-tile problem of this grid.
        j = first_index(m, m_hi + 1, lambda x: coords(x, n, k)[:2] != (G0, L0))
        return j - 1

    if interior < 0:
        raise ValueError("interior must be >= 0")
    C = coords(m_lo, n_choices[0], k_grid[0])[2]
    if C < 1:
        raise ValueError(f"map_fn returned a capacity C = {C} < 1")
    # The L values the K grid reaches (L depends on M and N only under stream-K: probe a few N).
    probe_ns = sorted({min(n_choices), n_choices[len(n_choices) // 2], max(n_choices)})
    grid_Ls = {coords(m_lo, n, k)[1] for n in probe_ns for k in k_grid}
    Ls = sorted({int(x) for x in k_steps if int(x) in grid_Ls})
    if not Ls:
        return []

    targets: list[tuple[int, float, int]] = []
    inner = [(f, L_t) for L_t in (Ls[1:-1] or Ls) for f in (fills[1:-1] or fills)]
    for i, w in enumerate(waves):
        pts = [(fills[-1], Ls[0]), (fills[-1], Ls[-1]), (fills[0], Ls[0]), (fills[0], Ls[-1])]
        pts += [inner[(i * interior + j) % len(inner)] for j in range(interior)]
        for f, L_t in dict.fromkeys(pts):  # ordered de-duplication
            targets.append((w, f, L_t))

    slack = max(1.0, 0.02 * C)
    plan: list[dict] = []
    seen: set[tuple[int, int]] = set()
    for t_index, (w_t, fill, L_t) in enumerate(targets):
        G_t = min(w_t * C, (w_t - 1) * C + max(1, round(fill * C)))
        best, best_score = None, None
        for j in range(len(n_choices)):
            n = n_choices[(t_index + j) % len(n_choices)]
            k = k_for(L_t, m_lo, n)
            m = m_for(G_t, w_t, n, k)
            for _ in range(3):  # K and M are independent except under stream-K
                k2 = k_for(L_t, m, n)
                if k2 == k:
                    break
                k = k2
                m = m_for(G_t, w_t, n, k)
            G, L, _, w = coords(m, n, k)
            score = (w != w_t, max(0.0, abs(G - G_t) - slack), abs(L - L_t) / L_t, j)
            if best_score is None or score < best_score:
                best, best_score = (m, n, k, G, L, w), score
            if score[:3] == (False, 0.0, 0.0):
                break
        m, n, k, G, L, w = best
        if w != w_t or abs(G - G_t) > fill_tol * C or abs(L - L_t) > l_tol * L_t or (G, L) in seen:
            continue
        seen.add((G, L))
        plan.append({"m": m, "n": n, "k": k, "G": G, "L": L, "w": w,
                     "target_G": G_t, "target_L": L_t, "fill": fill})  # fmt: skip
    return plan


# ----------------------------------------------------------------------------------------------------
# Second stage: micro parameters
# ----------------------------------------------------------------------------------------------------

RASTERS = ("heuristic", "along_m", "along_n")
SWIZZLES = (1, 2, 4, 8)
DEFAULT_MICRO = ("heuristic", 1)


def choose_micro(
    samples: Iterable[tuple[int, str, int, float]], threshold: float = 0.02
) -> list[tuple[int, str, int]]:
    """Micro rules ``(min_wave, raster, max_swizzle)`` for one config, as table ``micro`` records.

    ``samples`` are ``(w, raster, max_swizzle, us)`` measurements of the config at a few wave counts,
    each with several micro options; every measured wave must include the default
    ``("heuristic", 1)``. Repeated measurements of one option at one wave are reduced to their median.

    For each measured wave (ascending), the fastest option (ties: the first in raster order
    heuristic, along_m, along_n, then by swizzle) is chosen only if it beats the default by more than
    ``threshold`` (2%: ``best < (1 - threshold) * default``); otherwise the default is. The rule takes
    effect from that wave on (``min_wave = w``), until the next measured wave that differs. Consecutive
    equal rules are compressed to the first, and default rules before the first non-default rule are
    omitted (a wave without an applicable record uses the default anyway), so the result is the
    shortest list with the same meaning under the lookup rule "largest min_wave <= w applies".
    """
    table: dict[int, dict[tuple[str, int], list[float]]] = {}
    for sample in samples:
        try:
            w, raster, swizzle, us = sample
        except (TypeError, ValueError):
            raise ValueError(f"a micro sample must be (w, raster, max_swizzle, us), got {sample!r}") from None
        if isinstance(w, bool) or int(w) != w or w < 1:
            raise ValueError(f"micro sample {sample!r}: wave count must be an integer >= 1")
        if raster not in RASTERS:
            raise ValueError(f"micro sample {sample!r}: raster must be one of {', '.join(RASTERS)}")
        if isinstance(swizzle, bool) or swizzle not in SWIZZLES:
            raise ValueError(f"micro sample {sample!r}: max_swizzle must be one of 1, 2, 4, 8")
        if not (math.isfinite(us) and us > 0):
            raise ValueError(f"micro sample {sample!r}: time must be a positive finite number")
        table.setdefault(int(w), {}).setdefault((raster, int(swizzle)), []).append(float(us))

    rules: list[tuple[int, str, int]] = []
    current = DEFAULT_MICRO
    for w in sorted(table):
        options = {opt: float(np.median(times)) for opt, times in table[w].items()}
        if DEFAULT_MICRO not in options:
            raise ValueError(f"wave {w}: no measurement of the default micro option ('heuristic', 1)")
        base = options[DEFAULT_MICRO]
        best = min(options, key=lambda opt: (options[opt], RASTERS.index(opt[0]), opt[1]))
        choice = best if options[best] < (1.0 - threshold) * base else DEFAULT_MICRO
        if choice != current:
            rules.append((w, choice[0], choice[1]))
            current = choice
    return rules


# ----------------------------------------------------------------------------------------------------
# Reports
# ----------------------------------------------------------------------------------------------------


def accuracy(pred, meas) -> dict:
    """Absolute relative error ``|pred - meas| / meas``: ``{n, median, p90, mean, max}``.

    p90 is numpy's default (linear) 90th percentile.
    """
    p = _as_float_vector("pred", pred)
    m = _as_float_vector("meas", meas)
    if p.size != m.size:
        raise ValueError(f"pred and meas must have the same length (got {p.size} and {m.size})")
    if m.size == 0:
        raise ValueError("no points")
    if np.any(m <= 0):
        raise ValueError("measured latencies must be > 0")
    err = np.abs(p - m) / m
    return {
        "n": int(err.size),
        "median": float(np.median(err)),
        "p90": float(np.percentile(err, 90)),
        "mean": float(err.mean()),
        "max": float(err.max()),
    }

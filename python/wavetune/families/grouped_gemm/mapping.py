"""The grouped-GEMM mapping in Python: a mirror of csrc/include/wavetune/grouped_mapping.h (tests check
that the two agree), plus the exact tile count for per-expert row counts known on the host (benchmarks).

Standard library only; every function takes the variant's shape as in ``wavetune.KernelConfig``:
``tile`` (M, N, K), ``cluster`` (M, N) and ``swap_ab``.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple


class Coordinates(NamedTuple):
    grid: int  # G: output tiles of all experts
    k_iters: int  # L: K steps per tile
    capacity: int  # C: CTAs resident at once
    waves: int  # ceil(G / C)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def expert_tiles(tile: tuple[int, int, int], cluster: tuple[int, int], swap_ab: bool, rows: int, n: int) -> int:
    """Output tiles of one expert with ``rows`` rows, its tile grid padded to whole clusters."""
    if rows <= 0:
        return 0
    kernel_m, kernel_n = (n, rows) if swap_ab else (rows, n)
    return (_ceil_div(_ceil_div(kernel_m, tile[0]), cluster[0]) * cluster[0]
            * _ceil_div(_ceil_div(kernel_n, tile[1]), cluster[1]) * cluster[1])


def coordinates(tile, cluster, tiles: int, k: int, sm_count: int) -> Coordinates:
    """The coordinates of a launch whose experts have ``tiles`` output tiles in all."""
    size = cluster[0] * cluster[1]
    capacity = max(size, sm_count // size * size)
    return Coordinates(tiles, max(1, _ceil_div(k, tile[2])), capacity, _ceil_div(tiles, capacity))


def balanced_groups(rows: int, experts: int) -> tuple[int, int]:
    """(busy experts, rows each): ``rows`` spread evenly over min(experts, rows) experts (0, 0 for no rows)."""
    busy = min(experts, rows)
    return busy, _ceil_div(rows, busy) if busy > 0 else 0


def balanced(tile, cluster, swap_ab: bool, rows: int, experts: int, n: int, k: int, sm_count: int) -> Coordinates:
    """What the run-time choice sees: ``rows`` spread evenly over min(experts, rows) experts."""
    busy, rows_each = balanced_groups(rows, experts)
    tiles = busy * expert_tiles(tile, cluster, swap_ab, rows_each, n)
    return coordinates(tile, cluster, tiles, k, sm_count)


def routed(tile, cluster, swap_ab: bool, rows_per_expert: Iterable[int], n: int, k: int, sm_count: int) -> Coordinates:
    """The exact coordinates for known rows per expert (the GPU's view; the host does not have them)."""
    tiles = sum(expert_tiles(tile, cluster, swap_ab, rows, n) for rows in rows_per_expert)
    return coordinates(tile, cluster, tiles, k, sm_count)

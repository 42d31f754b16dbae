"""The grouped-GEMM mapping (csrc/include/wavetune/grouped_mapping.h, through the bindings), plus the exact
coordinates for per-expert row counts known on the host (benchmarks).

Every function takes the variant's shape as in ``wavetune.KernelConfig``: ``tile`` (M, N, K), ``cluster`` (M, N)
and ``swap_ab``; the coordinates also its CTAs resident per SM (``ctas_per_sm``: 1 for the Hopper variants, the
kernel's occupancy for the Ampere-style ones, ``_C.grouped_ctas_per_sm``), which multiply the capacity.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

from ...runtime.native import _C


class Coordinates(NamedTuple):
    grid: int  # G: output tiles of all experts
    k_iters: int  # L: K steps per tile
    capacity: int  # C: CTAs resident at once
    waves: int  # ceil(G / C)


def expert_tiles(tile: tuple[int, int, int], cluster: tuple[int, int], swap_ab: bool, rows: int, n: int) -> int:
    """Output tiles of one expert with ``rows`` rows, its tile grid padded to whole clusters."""
    return _C.grouped_expert_tiles((tile, cluster, swap_ab), rows, n)


def balanced_groups(rows: int, experts: int) -> tuple[int, int]:
    """(busy experts, rows each): ``rows`` spread evenly over min(experts, rows) experts (0, 0 for no rows)."""
    return _C.balanced_groups(rows, experts)


def balanced(tile, cluster, swap_ab: bool, rows: int, experts: int, n: int, k: int, sm_count: int,
             ctas_per_sm: int = 1) -> Coordinates:
    """What the run-time choice sees: ``rows`` spread evenly over min(experts, rows) experts."""
    return Coordinates(*_C.map_grouped_balanced((tile, cluster, swap_ab), rows, experts, n, k, sm_count, ctas_per_sm))


def routed(tile, cluster, swap_ab: bool, rows_per_expert: Iterable[int], n: int, k: int, sm_count: int,
           ctas_per_sm: int = 1) -> Coordinates:
    """The exact coordinates for known rows per expert (the GPU's view; the host does not have them)."""
    tiles = sum(expert_tiles(tile, cluster, swap_ab, rows, n) for rows in rows_per_expert)
    return Coordinates(*_C.grouped_coordinates((tile, cluster, swap_ab), tiles, k, sm_count, ctas_per_sm))

// The mapping for grouped GEMM (mixture-of-experts, docs/grouped.md): one GEMM per expert, all in one
// persistent launch, in the coordinates of mapping.h:
//
//   G  the sum over experts of their output tiles, each expert's tile grid padded to whole clusters (what
//      CUTLASS's grouped tile scheduler walks; an expert with no rows has no tiles)
//   L  K steps per tile (every expert has the same K)
//   C  CTAs resident at once, w = ceil(G / C): as for dense
//
// The rows of each expert live on the GPU (the offsets), so the run-time choice, which must not wait for
// the GPU, cannot read them. The host knows the total rows and the expert count: `map_grouped_balanced`
// assumes the rows are spread evenly over min(experts, rows) experts. Header-only, no CUDA.
#pragma once

#include <algorithm>
#include <cstdint>

#include "wavetune/mapping.h"

namespace wavetune {

// What the host knows of a grouped problem: out[rows, n] = x[rows, k] @ w[e].T per expert e.
struct GroupedShape {
  int64_t rows;     // all experts' rows together (tokens times top-k for an MoE layer)
  int64_t experts;  // groups, including those that get no rows
  int64_t n, k;
};

// Output tiles of one expert's GEMM with `rows` rows (swap-AB: its tile M runs over N, tile N over rows).
inline int64_t expert_tiles(const TileShape& t, int64_t rows, int64_t n) {
  if (rows <= 0) return 0;
  return t.swap_ab ? cluster_padded_tiles(t, n, rows) : cluster_padded_tiles(t, rows, n);
}

// Coordinates of a launch whose experts have `tiles` output tiles in all.
inline Coordinates grouped_coordinates(const TileShape& t, int64_t tiles, int64_t k, int32_t sm_count) {
  const int64_t capacity = resident_capacity(t, sm_count);
  return {tiles, std::max<int64_t>(1, detail::ceil_div(k, t.tile_k)), capacity, detail::ceil_div(tiles, capacity)};
}

// The host's picture of `rows` rows over `groups` groups: min(groups, rows) of them get rows, ceil(rows /
// that) each (none when rows is 0). Shared by the mapping below, the lookup's memory floor and its priors.
struct BalancedGroups {
  int64_t busy, rows_each;
};

inline BalancedGroups balanced_groups(int64_t rows, int64_t groups) {
  const int64_t busy = std::min(groups, rows);
  return {busy, busy > 0 ? detail::ceil_div(rows, busy) : 0};
}

// NOTES: with top-k routing, `rows` rows touch at most `rows` experts, so a decode step of one token on a
// 128-expert layer at top-8 has 8 busy experts, not 128 experts with 1/16 row each. Skewed routing can
// need fewer tiles (rows gathered on fewer experts fill their tiles) or more (a hot expert beside many
// experts with a row or two, each a partial tile); benchmarks/grouped.py reports both routings.
inline Coordinates map_grouped_balanced(const TileShape& t, const GroupedShape& p, int32_t sm_count) {
  const BalancedGroups spread = balanced_groups(p.rows, p.experts);
  const int64_t tiles = spread.busy * expert_tiles(t, spread.rows_each, p.n);
  return grouped_coordinates(t, tiles, p.k, sm_count);
}

}  // namespace wavetune

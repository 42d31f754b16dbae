// The built-in choice of a grouped variant (docs/grouped.md): from host-known sizes only (the total rows,
// the expert count, N, K and the SM count), so a serving call never waits for the GPU to learn how many
// rows each expert got. A first guess until the family has tuned tables. Header-only, no CUDA.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "wavetune/grouped_mapping.h"

namespace wavetune {

// NOTES: in the style of DeepGEMM's block choice (whole waves of tiles over the SMs, as few partial tiles
// and waves as possible), with a cost per tile so that tiles of different sizes compare: a CTA's K step
// takes the longer of its MMAs and its operand loads (a cluster multicasts A across its N CTAs and B across
// its M CTAs), a tile ends with its store, and a launch takes w = ceil(G / C) waves of tiles. The rates are
// per SM and cycle, round H100 figures (989 dense bf16 TFLOP/s over 132 SMs at 1.83 GHz is 2048 FMA; 64
// bytes is of the order of its L2 bandwidth per SM); only their ratio matters for the choice. The model
// ignores DRAM (the weights are read once whatever the tile) and the ping-pong schedule's overlap of one
// tile's store with the next tile's MMAs: tables, measured, will replace it.
constexpr double kGroupedFmaPerCycle = 2048;
constexpr double kGroupedL2BytesPerCycle = 64;

// Predicted SM cycles of a launch under tile shape `t` (2-byte elements), for comparison between shapes.
inline double grouped_cost_cycles(const TileShape& t, const GroupedShape& p, int32_t sm_count) {
  const Coordinates c = map_grouped_balanced(t, p, sm_count);
  const double mma = double(t.tile_m) * t.tile_n * t.tile_k / kGroupedFmaPerCycle;
  const double load = (double(t.tile_m) / t.cluster_n + double(t.tile_n) / t.cluster_m) * t.tile_k * 2 /
                      kGroupedL2BytesPerCycle;
  const double store = double(t.tile_m) * t.tile_n * 2 / kGroupedL2BytesPerCycle;
  return double(c.waves) * (double(c.k_iters) * std::max(mma, load) + store);
}

// The index of the cheapest candidate (the first of equals); candidates must not be empty.
inline size_t choose_grouped(const std::vector<TileShape>& candidates, const GroupedShape& p, int32_t sm_count) {
  size_t best = 0;
  double best_cost = grouped_cost_cycles(candidates[0], p, sm_count);
  for (size_t i = 1; i < candidates.size(); ++i) {
    const double cost = grouped_cost_cycles(candidates[i], p, sm_count);
    if (cost < best_cost) {
      best = i;
      best_cost = cost;
    }
  }
  return best;
}

}  // namespace wavetune

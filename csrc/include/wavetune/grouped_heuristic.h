// The built-in choice of a grouped variant (docs/grouped.md): from host-known sizes only (the total rows,
// the expert count, N, K and the SM count), so a serving call never waits for the GPU to learn how many
// rows each expert got. It decides where no grouped table serves the GPU and dtype. Header-only, no CUDA.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "wavetune/grouped_mapping.h"

namespace wavetune {

// NOTES: in the style of DeepGEMM's block choice (whole waves of tiles over the SMs, as few partial tiles
// and waves as possible), with a cost per tile so that tiles of different sizes compare: a CTA's K step
// takes the longer of its MMAs and its operand loads into shared memory, a tile ends with its store, and a
// launch takes w = ceil(G / C) waves of tiles. The two rates, per SM and cycle, are fitted by hand to the
// dense variants' timings at M = 1024 and 8192 in docs/results.md#bench_variants_h200.json: 64x128 tiles ran at
// about 46% of the bf16 peak, 128x128 and 128x256 tiles at about 70%, and 2x1 clusters no faster than 1x1
// (so multicast is not credited). Only their ratio matters for the choice. The model ignores DRAM (the
// weights are read once whatever the tile, to first order) and the ping-pong schedule's overlap of a
// tile's store with the next tile's MMAs: a tuned grouped table, measured, replaces it where there is one.
constexpr double kGroupedFmaPerCycle = 0.7 * 2048;  // sustained, of 2048 dense bf16 FMA per SM and cycle
constexpr double kGroupedLoadBytesPerCycle = 44;

// Predicted SM cycles of a launch under tile shape `t` with operands of `operand_bytes` per element (2:
// bf16/fp16; 1: e4m3, whose tensor cores run twice the FMAs per cycle) and a 2-byte output, for comparison
// between shapes.
inline double grouped_cost_cycles(const TileShape& t, const GroupedShape& p, int32_t sm_count,
                                  int32_t operand_bytes = 2) {
  const Coordinates c = map_grouped_balanced(t, p, sm_count);
  const double fma_per_cycle = kGroupedFmaPerCycle * 2 / operand_bytes;
  const double mma = double(t.tile_m) * t.tile_n * t.tile_k / fma_per_cycle;
  const double load = double(t.tile_m + t.tile_n) * t.tile_k * operand_bytes / kGroupedLoadBytesPerCycle;
  const double store = double(t.tile_m) * t.tile_n * 2 / kGroupedLoadBytesPerCycle;
  return double(c.waves) * (double(c.k_iters) * std::max(mma, load) + store);
}

// The index of the cheapest candidate (the first of equals); candidates must not be empty.
inline size_t choose_grouped(const std::vector<TileShape>& candidates, const GroupedShape& p, int32_t sm_count,
                             int32_t operand_bytes = 2) {
  size_t best = 0;
  double best_cost = grouped_cost_cycles(candidates[0], p, sm_count, operand_bytes);
  for (size_t i = 1; i < candidates.size(); ++i) {
    const double cost = grouped_cost_cycles(candidates[i], p, sm_count, operand_bytes);
    if (cost < best_cost) {
      best = i;
      best_cost = cost;
    }
  }
  return best;
}

}  // namespace wavetune

// The unified mapping: a problem (M, N, K) under a config -> the physical coordinates the latency model
// works in. One definition, used by the lookup engine (C++), and by Python through the bindings.
//
//   G  grid size: CTAs' worth of work (output tiles times K splits)
//   L  inner-loop iterations: K steps (tile_k each) per unit of work
//   C  concurrent capacity: CTAs resident at once
//   w  waves: ceil(G / C)
//
// Header-only, no CUDA: the lookup engine and C++ callers need no GPU to evaluate it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "wavetune/types.h"

namespace wavetune {

// The compile-time shape of a variant that the mapping needs.
struct TileShape {
  int32_t tile_m, tile_n, tile_k;
  int32_t cluster_m, cluster_n;
  bool swap_ab;
  // CTAs resident per SM: 1 for the persistent kernels; a non-persistent kernel's from its registers and shared
  // memory on the GPU (a table's `occupancy` record, the kernel library's gemm_ctas_per_sm).
  int32_t ctas_per_sm = 1;
};

inline TileShape tile_shape(const VariantInfo& v) {
  return {v.tile_m, v.tile_n, v.tile_k, v.cluster_m, v.cluster_n, v.swap_ab};
}

struct Coordinates {
  int64_t grid;      // G
  int64_t k_iters;   // L
  int64_t capacity;  // C
  int64_t waves;     // w
};

namespace detail {
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
}  // namespace detail

// NOTES: the persistent variants' mainloop stages are sized to fill shared memory (StageCountAutoCarveout), so one
// CTA is resident per SM, and clusters are placed whole: C = floor(SMs / cluster size) * cluster size. A
// non-persistent kernel (the multistage ones) has as many CTAs per SM as its registers and shared memory allow,
// and a wave is that many per SM: C = SMs * CTAs per SM.
inline int64_t resident_capacity(const TileShape& t, int32_t sm_count) {
  const int64_t cluster = int64_t(t.cluster_m) * t.cluster_n;
  return std::max<int64_t>(cluster, sm_count / cluster * cluster) * std::max(1, t.ctas_per_sm);
}

// Output tiles of the kernel's own (M, N), the tile grid padded to whole clusters as CUTLASS's schedulers do.
inline int64_t cluster_padded_tiles(const TileShape& t, int64_t kernel_m, int64_t kernel_n) {
  return detail::round_up(detail::ceil_div(kernel_m, t.tile_m), t.cluster_m) *
         detail::round_up(detail::ceil_div(kernel_n, t.tile_n), t.cluster_n);
}

// CUTLASS's persistent scheduler launches min(G, C) CTAs that loop over the work, so a wave is one pass.
inline Coordinates map_problem(const TileShape& t, int64_t m, int64_t n, int64_t k, Decomposition decomposition,
                               int32_t splits, int32_t sm_count) {
  const int64_t rows = t.swap_ab ? n : m;  // the kernel's own M and N
  const int64_t cols = t.swap_ab ? m : n;
  const int64_t tiles = cluster_padded_tiles(t, rows, cols);
  const int64_t k_iters = std::max<int64_t>(1, detail::ceil_div(k, t.tile_k));
  const int64_t capacity = resident_capacity(t, sm_count);

  int64_t grid = tiles, steps = k_iters;
  if (decomposition == Decomposition::split_k) {
    const int64_t s = std::clamp<int64_t>(splits, 1, k_iters);
    grid = tiles * s;
    steps = detail::ceil_div(k_iters, s);
  } else if (decomposition == Decomposition::stream_k) {
    // Stream-K spreads all tiles*k_iters K steps evenly over the resident CTAs: one wave by construction.
    const int64_t units = tiles * k_iters;
    grid = std::min(capacity, units);
    steps = detail::ceil_div(units, grid);
  }
  return {grid, steps, capacity, detail::ceil_div(grid, capacity)};
}

// NOTES: the stream-K configs' model covers only launches that run as stream-K, and only where the
// partial tiles' fixup stays short; elsewhere the lookup does not choose them.
// - CUTLASS's stream-K scheduler (tile_scheduler_params.h, DecompositionMode::StreamK) runs a launch
//   data-parallel when each tile has at most kStreamKMinSteps K steps (its min_iters_per_sk_unit_) or
//   the tiles fill whole waves. That launch is the tile's data-parallel config, whose anchors measure it;
//   the stream-K anchors (one wave, G = C) do not.
// - Over few tiles, stream-K hands each tile to many CTAs (ceil(K / tile_k) / L of them), and the
//   deterministic fixup adds their partial tiles one after another: a serial cost that (G, L) does not
//   see. On the generic calibration shapes the model under-predicted such launches up to 3.5x (M = 4,
//   N = 384, K = 22400: 44 CTAs per tile).
// Both rules together lifted the tables' choices on those shapes from 0.942 / 0.947 to 0.977 / 0.970 of
// the best (H100 / H200) and left the LLM shape splits unchanged (docs/model.md, section 7).
constexpr int64_t kStreamKMinSteps = 8;
constexpr int64_t kStreamKMaxPeers = 8;

// Whether the lookup may choose a stream-K launch over `tiles` output tiles of `k_iters` K steps each,
// mapped to `x`.
inline bool stream_k_modeled(int64_t tiles, int64_t k_iters, const Coordinates& x) {
  const bool runs_data_parallel = k_iters <= kStreamKMinSteps || tiles % x.capacity == 0;
  return !runs_data_parallel && k_iters <= kStreamKMaxPeers * x.k_iters;
}

}  // namespace wavetune

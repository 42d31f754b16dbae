// The attention family's (G, L) mapping and its built-in choice of tile and KV splits (docs/attention.md).
// Plain C++17, no CUDA: the runtime, the bindings and C++ programs share it.
//
// How the runtime lays a problem onto CUTLASS's FMHA grid (csrc/families/attention/launch.cu follows fmha_grid):
//   decode (seqlen_q == 1): the heads_q / heads_kv query heads of a KV head are the rows of one tile, so
//     K and V are read once per KV head, not once per query head; splits cut the keys into chunks that
//     run side by side in the same grid;
//   prefill: one sequence's queries are the rows; grouped-query heads become a batch mode of stride 0 in
//     K and V. With batch > 1 that takes both of CUTLASS's batch modes, so it runs one launch per sequence,
//     unless those launches would be short (expand_kv_heads): then K and V are first copied out to one
//     head per query head and a single launch runs them all.
// G = launches x B x H x ceil(rows / tile_m) CTAs; L = KV tiles a CTA walks (tile_n keys each), averaged
// over the query tiles under a causal mask (a query tile sees the keys up to its diagonal).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "wavetune/lookup.h"

namespace wavetune {

struct AttentionShape {
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv;
  bool causal;
};

// An attention problem as the lookup takes it (lookup.h): M, N, K = seqlen_q, seqlen_k, head_dim, groups = the
// batch, B layout col, and the family's key (the fields its table family names, in this order): heads_q,
// heads_kv, causal.
inline Problem attention_lookup_problem(DType dtype, const AttentionShape& s, int64_t head_dim) {
  return {dtype, BLayout::col, s.seqlen_q, s.seqlen_k, head_dim, s.batch, {s.heads_q, s.heads_kv, s.causal}};
}
inline AttentionShape attention_shape(const Problem& p) {
  return {p.groups, p.m, p.n, p.key[0], p.key[1], p.key[2] != 0};
}

struct AttentionTile {
  int32_t block_q, block_kv, head_dim;  // query rows x KV rows x head dim (the variant's tile_m, tile_n, tile_k)
};

// One FMHA launch's problem: `launches` of them run back to back.
struct FmhaGrid {
  int64_t launches, b, h, rows, keys;
};

// NOTES: splits cut the keys into chunks of floor(seqlen_k / splits) (the few keys left over are merged by
// the combine kernel), so every chunk holds at least one full KV tile: splits <= seqlen_k / block_kv.
constexpr int32_t kMaxAttentionSplits = 128;

// NOTES: one launch per sequence leaves the GPU idle at each launch's tail (a causal launch's last CTAs
// are its longest); below four waves of a 132-SM GPU per launch, copying K and V out to the query heads
// (read heads_kv, write heads_q heads per key: a few percent of a prefill's time at these sizes) and
// running one launch is faster.
constexpr int64_t kExpandKvBelowCtas = 4 * 132;

inline bool expand_kv_heads(const AttentionShape& s) {
  const int64_t per_sequence_ctas = s.heads_q * ((s.seqlen_q + 127) / 128);
  return s.seqlen_q > 1 && s.batch > 1 && s.heads_q != s.heads_kv && per_sequence_ctas < kExpandKvBelowCtas;
}

inline int32_t max_attention_splits(const AttentionShape& s, const AttentionTile& t, int32_t limit = kMaxAttentionSplits) {
  if (s.seqlen_q != 1) return 1;
  return int32_t(std::clamp<int64_t>(s.seqlen_k / t.block_kv, 1, std::min(limit, kMaxAttentionSplits)));
}

inline FmhaGrid fmha_grid(const AttentionShape& s, int32_t splits) {
  const int64_t group = s.heads_q / s.heads_kv;
  if (s.seqlen_q == 1) return {1, s.batch, s.heads_kv * splits, group, s.seqlen_k / splits};
  if (group == 1 || expand_kv_heads(s)) return {1, s.batch, s.heads_q, s.seqlen_q, s.seqlen_k};
  return {s.batch, group, s.heads_kv, s.seqlen_q, s.seqlen_k};
}

// KV tiles per CTA: (the average over the query tiles, the most any walks). Exact: a causal query tile m
// walks the tiles up to its last row's diagonal, m = 0 .. tiles - 1.
inline std::pair<double, int64_t> kv_tiles_per_cta(const FmhaGrid& g, const AttentionTile& t, bool causal) {
  const int64_t kv_tiles = (g.keys + t.block_kv - 1) / t.block_kv;
  if (!causal) return {double(kv_tiles), kv_tiles};
  const int64_t q_tiles = (g.rows + t.block_q - 1) / t.block_q;
  int64_t sum = 0, most = 0;
  for (int64_t m = 0; m < q_tiles; ++m) {
    const int64_t seen = (m + 1) * t.block_q + g.keys - g.rows;
    const int64_t walked = std::min(kv_tiles, (std::max<int64_t>(seen, 0) + t.block_kv - 1) / t.block_kv);
    sum += walked, most = std::max(most, walked);
  }
  return {double(sum) / double(q_tiles), most};
}

inline int64_t fmha_ctas(const FmhaGrid& g, const AttentionTile& t) {
  return g.launches * g.b * g.h * ((g.rows + t.block_q - 1) / t.block_q);
}

// NOTES: the built-in cost in microseconds: the choice where no attention table serves, and the prior a
// table must beat. Its constants were read off the H100 (benchmarks/attention.py --suite named,
// 2026-11-24: per variant, latency against waves and KV tiles per CTA): a 128-row x 128-key step at head
// dim 128 takes 1.6 us (a 128 x 64 one 1.0 us: its fixed part does not halve; time grows as (keys x head
// dim)^0.6), each wave of CTAs (one per SM: the kernels hold most of an SM's shared memory) adds 3 us (Q
// load, epilogue) and each launch 4 us. Decode of many sequences is bound by reading K and V instead
// (3 TB/s): the larger of the two counts, plus a tenth of the smaller (they overlap imperfectly; it also
// ranks configs the floor ties). Splits add the combine (a launch, the partials and 0.05 us per split:
// its loop over them), batch > 1 splits the query repeat, and expanded KV heads their copy.
struct AttentionCostModel {
  static constexpr double kStepUs = 1.6;          // 128 x 128 step at head dim 128
  static constexpr double kStepExponent = 0.6;    // of (keys x head dim) / (128 x 128)
  static constexpr double kWaveUs = 3.0;
  static constexpr double kLaunchUs = 4.0;
  static constexpr double kBytesPerUs = 3.0e6;    // DRAM reads and writes
  static constexpr double kOverlap = 0.1;         // of the smaller of compute and memory time
  static constexpr double kPerSplitUs = 0.05;
};

inline double attention_cost_us(const AttentionShape& s, const AttentionTile& t, int32_t splits, int32_t sm_count) {
  using M = AttentionCostModel;
  const FmhaGrid g = fmha_grid(s, splits);
  const double ctas_per_launch = double(fmha_ctas(g, t)) / double(g.launches);
  const double waves = std::ceil(ctas_per_launch / double(std::max(sm_count, 1)));
  const auto [tiles, most_tiles] = kv_tiles_per_cta(g, t, s.causal);
  const double step = M::kStepUs * std::pow(double(t.block_kv) * t.head_dim / (128.0 * 128.0), M::kStepExponent);
  // A launch ends with its longest CTA: under a causal mask, with few waves, that bounds it.
  const double launch = std::max(waves * (M::kWaveUs + tiles * step), M::kWaveUs + double(most_tiles) * step);
  const double bytes = 2.0 * 2.0 * double(s.batch) * double(s.seqlen_k) * double(s.heads_kv) * t.head_dim;
  const double compute = double(g.launches) * (launch + M::kLaunchUs), memory = bytes / M::kBytesPerUs;
  double us = std::max(compute, memory) + M::kOverlap * std::min(compute, memory);
  const double split_bytes = 2.0 * 2.0 * double(s.batch) * splits * double(s.heads_q) * t.head_dim;
  if (splits > 1) {
    us += M::kLaunchUs + split_bytes / M::kBytesPerUs + M::kPerSplitUs * splits + (s.batch > 1 ? M::kLaunchUs : 0.0);
  }
  if (expand_kv_heads(s)) {
    us += 2 * M::kLaunchUs + bytes * double(s.heads_q + s.heads_kv) / double(s.heads_kv) / M::kBytesPerUs;
  }
  return us;
}

// FlashAttention's split rule (its num_splits_heuristic, written from its description): no split when the
// unsplit grid fills at least 80% of the SMs; else, over the split counts that change the KV tiles per
// split, the smallest whose wave efficiency (CTAs / (waves x SMs)) reaches 85% of the best.
inline int32_t flash_attention_splits(int64_t ctas, int64_t kv_tiles, int32_t sm_count, int32_t max_splits) {
  if (ctas >= int64_t(0.8 * sm_count)) return 1;
  max_splits = int32_t(std::min<int64_t>({max_splits, sm_count, kv_tiles}));
  auto efficiency = [&](int32_t n) {
    const double waves = double(ctas * n) / sm_count;
    return waves / std::ceil(waves);
  };
  auto useful = [&](int32_t n) {
    return n == 1 || (kv_tiles + n - 1) / n != (kv_tiles + n - 2) / (n - 1);
  };
  double best = 0.0;
  for (int32_t n = 1; n <= max_splits; ++n) {
    if (useful(n)) best = std::max(best, efficiency(n));
  }
  for (int32_t n = 1; n <= max_splits; ++n) {
    if (useful(n) && efficiency(n) >= 0.85 * best) return n;
  }
  return 1;
}

struct AttentionChoice {
  size_t index;  // into the candidate tiles
  int32_t splits;
};

// NOTES: the split counts the choice considers: powers of two and the midpoints between them (1, 2, 3, 4,
// 6, 8, 12, ... 128), 14 of the 128, each within 1.33x of any count, so a cold choice evaluates the model
// a hundred-odd times rather than a thousand.
constexpr int32_t kAttentionSplitCandidates[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128};

// The candidate and split count (up to split_limit) of least attention_cost_us; ties keep the earlier
// candidate and fewer splits.
inline AttentionChoice choose_attention(const std::vector<AttentionTile>& tiles, const AttentionShape& s,
                                        int32_t sm_count, int32_t split_limit = kMaxAttentionSplits) {
  AttentionChoice best{0, 1};
  double best_cost = INFINITY;
  for (size_t i = 0; i < tiles.size(); ++i) {
    const int32_t most = max_attention_splits(s, tiles[i], split_limit);
    for (int32_t n : kAttentionSplitCandidates) {
      if (n > most) break;
      const double cost = attention_cost_us(s, tiles[i], n, sm_count);
      if (cost < best_cost) best_cost = cost, best = {i, n};
    }
  }
  return best;
}

}  // namespace wavetune

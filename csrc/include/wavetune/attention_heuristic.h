// The attention family's (G, L) mapping and its built-in choice of tile and KV splits (docs/attention.md).
// Plain C++17, no CUDA: the runtime, the bindings and C++ programs share it.
//
// How the runtime lays a problem onto CUTLASS's FMHA grid (attention_launch.cu follows fmha_grid):
//   decode (seqlen_q == 1): the heads_q / heads_kv query heads of a KV head are the rows of one tile, so
//     K and V are read once per KV head, not once per query head; splits cut the keys into chunks that
//     run side by side in the same grid;
//   prefill: one sequence's queries are the rows; grouped-query heads become a batch mode of stride 0 in
//     K and V (one launch per sequence when batch > 1, since CUTLASS's kernel has two batch modes).
// G = launches x B x H x ceil(rows / tile_m) CTAs; L = KV tiles a CTA walks (tile_n keys each), averaged
// over the query tiles under a causal mask (a query tile sees the keys up to its diagonal).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace wavetune {

struct AttentionShape {
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv;
  bool causal;
};

struct AttentionTile {
  int32_t block_q, block_kv;  // query rows and KV rows of a tile (the variant's tile_m, tile_n)
};

// One FMHA launch's problem: `launches` of them run back to back.
struct FmhaGrid {
  int64_t launches, b, h, rows, keys;
};

// NOTES: splits cut the keys into chunks of floor(seqlen_k / splits) (the few keys left over are merged by
// the combine kernel), so every chunk holds at least one full KV tile: splits <= seqlen_k / block_kv.
constexpr int32_t kMaxAttentionSplits = 64;

inline int32_t max_attention_splits(const AttentionShape& s, const AttentionTile& t, int32_t limit = kMaxAttentionSplits) {
  if (s.seqlen_q != 1) return 1;
  return int32_t(std::clamp<int64_t>(s.seqlen_k / t.block_kv, 1, std::min(limit, kMaxAttentionSplits)));
}

inline FmhaGrid fmha_grid(const AttentionShape& s, int32_t splits) {
  const int64_t group = s.heads_q / s.heads_kv;
  if (s.seqlen_q == 1) return {1, s.batch, s.heads_kv * splits, group, s.seqlen_k / splits};
  if (group == 1) return {1, s.batch, s.heads_q, s.seqlen_q, s.seqlen_k};
  return {s.batch, group, s.heads_kv, s.seqlen_q, s.seqlen_k};
}

// KV tiles per CTA, averaged over the query tiles (exact: a causal query tile m walks the tiles up to its
// last row's diagonal, m = 0 .. tiles - 1).
inline double kv_tiles_per_cta(const FmhaGrid& g, const AttentionTile& t, bool causal) {
  const int64_t kv_tiles = (g.keys + t.block_kv - 1) / t.block_kv;
  if (!causal) return double(kv_tiles);
  const int64_t q_tiles = (g.rows + t.block_q - 1) / t.block_q;
  int64_t sum = 0;
  for (int64_t m = 0; m < q_tiles; ++m) {
    const int64_t seen = (m + 1) * t.block_q + g.keys - g.rows;
    sum += std::min(kv_tiles, (std::max<int64_t>(seen, 0) + t.block_kv - 1) / t.block_kv);
  }
  return double(sum) / double(q_tiles);
}

inline int64_t fmha_ctas(const FmhaGrid& g, const AttentionTile& t) {
  return g.launches * g.b * g.h * ((g.rows + t.block_q - 1) / t.block_q);
}

// NOTES: the built-in cost, in KV-tile times, until the family has tuned tables: CTAs run in waves of one
// per SM (the kernels hold ~200 KB of shared memory), each walks L tiles after a fixed start (Q load,
// epilogue: about two tiles), each launch costs about a tile more, and splits add the combine kernel (a
// launch plus reading the partial outputs). A step over 64 keys costs 0.55 of one over 128 (its fixed part
// does not halve).
inline double attention_cost(const AttentionShape& s, const AttentionTile& t, int32_t splits, int32_t sm_count) {
  const FmhaGrid g = fmha_grid(s, splits);
  const double waves = std::ceil(double(fmha_ctas(g, t)) / double(std::max(sm_count, 1)));
  const double tile_cost = t.block_kv >= 128 ? 1.0 : 0.55;
  const double per_cta = (kv_tiles_per_cta(g, t, s.causal) + 2.0) * tile_cost;
  return double(g.launches) * (waves * per_cta + 1.0) + (splits > 1 ? 1.0 + 0.02 * splits : 0.0);
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

// The candidate and split count (up to split_limit) of least attention_cost; ties keep the earlier
// candidate and fewer splits.
inline AttentionChoice choose_attention(const std::vector<AttentionTile>& tiles, const AttentionShape& s,
                                        int32_t sm_count, int32_t split_limit = kMaxAttentionSplits) {
  AttentionChoice best{0, 1};
  double best_cost = INFINITY;
  for (size_t i = 0; i < tiles.size(); ++i) {
    for (int32_t n = 1; n <= max_attention_splits(s, tiles[i], split_limit); ++n) {
      const double cost = attention_cost(s, tiles[i], n, sm_count);
      if (cost < best_cost) best_cost = cost, best = {i, n};
    }
  }
  return best;
}

}  // namespace wavetune

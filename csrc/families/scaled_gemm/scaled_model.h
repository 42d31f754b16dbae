// The scaled GEMM's built-in wave models, which its choice (launch.cu) runs without a table, as functions of a
// variant's shape, the problem and the GPU's size: host-only, no CUDA, so the bindings give the Python replays
// (wavetune.families.scaled_gemm.replay) these same functions. Their constants are the family's model data, the
// [model] table of cutlass_configs/sm90_scaled_gemm.toml, generated into ScaledGemmModel (scaled_gemm_model_data.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "scaled_gemm_model_data.h"
#include "wavetune/scaled_gemm.h"
#include "wavetune/types.h"

namespace wavetune::detail {

// What the decode wave model reads of a decode variant: its tile of rows x tokens, its K per loop step, its
// scheduler and its resident CTAs per SM on the GPU.
struct DecodeTile {
  int64_t rows, tokens, tile_k;
  bool persistent;
  int32_t resident;
};

// NOTES: the wave model of a decode launch, the paper's (G, L) without a table. G CTAs (row tiles x token tiles x
// K splits) run in waves of the kernel's resident CTAs on every SM; in a wave each CTA's warps walk L loop
// steps (their share of K), each step streaming the next weights of all their row tiles at once, so a wave
// lasts about L steps, whatever the rows per warp, plus decode_wave_steps of start, reduction and store. A
// persistent CTA walks its G / slots tiles one after another, without a tail wave. Each K split past the first
// adds decode_split_steps (the cluster's sum). The fewest predicted steps choose the split count of a variant and
// then the variant (ties: fewer splits). Both constants were set by replaying the choice (benchmarks/
// scaled_gemm.py --replay) on sweeps of every decode variant at 1-8 splits and 1-16 tokens: the design split's
// (H100, H200) and a held-out sample with 128-block scales (H200, seed 5); judged on other held-out runs it picks
// 0.975-0.995 of the best variant and split with per-row scales and 0.95-0.98 with 128-block scales
// (docs/scaled_gemm.md).
inline double predicted_steps(const DecodeTile& t, const ScaledGemmProblem& p, int32_t splits, int32_t sm_count,
                              const ScaledGemmModel& model) {
  const double tiles = double((p.n + t.rows - 1) / t.rows) * double((p.m + t.tokens - 1) / t.tokens);
  const double slots = double(t.resident) * sm_count, steps = std::ceil(double(p.k) / double(t.tile_k * splits));
  const double waves = t.persistent ? std::max(tiles / slots, 1.0) : std::ceil(tiles * splits / slots);
  return waves * (steps + model.decode_wave_steps) + model.decode_split_steps * (splits - 1);
}

// The split count of the model's split counts that it predicts the fewest steps for (ties: fewer); 1 for a
// persistent variant, which does not split K.
inline int32_t decode_splits(const DecodeTile& t, const ScaledGemmProblem& p, int32_t sm_count,
                             const ScaledGemmModel& model) {
  if (t.persistent) return 1;
  int32_t best = 1;
  double best_steps = std::numeric_limits<double>::infinity();
  for (const int64_t s : model.decode_split_counts) {
    const double predicted = predicted_steps(t, p, int32_t(s), sm_count, model);
    if (predicted < best_steps) best = int32_t(s), best_steps = predicted;
  }
  return best;
}

// NOTES: the CUTLASS variants' wave model, the paper's (G, L): G output tiles of the kernel's own problem
// (weight rows x tokens, or tokens x weight rows) run on one persistent CTA per SM in ceil(G / SMs) waves,
// each walking L = ceil(K / tile K) k-blocks. A k-block of a wave costs the larger of what its CTAs stream
// from HBM and one CTA's tensor-core time; each wave adds a fixed start and epilogue. The CTAs of a wave take
// token tiles fastest, so a weight tile is read from HBM once per wave for all token tiles beside it, and the
// token tiles once per weight tile. The tensor-core peak is an H100 SXM's per SM; the efficiencies and the wave
// term were set by replaying the model on benchmarks/scaled_gemm.py's sweep of every variant on the design split
// (it picks 0.994 of the best swapped variant's speed at 9-64 tokens, H200).
// NOTES: a ping-pong kernel runs its two consumer warpgroups' mainloops one after the other, and with block scales
// each k-block's promotion (an FMA per accumulator) holds up the tensor cores; the cooperative tiles overlap one
// warpgroup's promotion with the other's MMAs. Past 64 tokens the block-scaled ping-pong 64x128 tile ran 1.4-1.7x
// the cooperative 128x128 tile's time on the design split's large layers (H100); efficiencies of 0.4-0.5 pick the
// best unswapped variant on all 16 design problems (0.7: 0.944).
inline double cutlass_cost_us(const VariantInfo& v, const ScaledGemmProblem& p, int32_t sm_count,
                              double memory_bytes_per_us, const ScaledGemmModel& model) {
  const int64_t weight_tile = v.swap_ab ? v.tile_m : v.tile_n, token_tile = v.swap_ab ? v.tile_n : v.tile_m;
  const int64_t weight_tiles = (p.n + weight_tile - 1) / weight_tile, token_tiles = (p.m + token_tile - 1) / token_tile;
  const int64_t tiles = weight_tiles * token_tiles, active = std::min<int64_t>(tiles, sm_count);
  const double waves = std::ceil(double(tiles) / sm_count), blocks = std::ceil(double(p.k) / v.tile_k);
  const double token_rows = double(std::min(token_tiles, active) * std::min<int64_t>(token_tile, p.m));
  const double weight_rows = double((active + token_tiles - 1) / token_tiles * weight_tile);
  const double hbm_us = (weight_rows + token_rows) * v.tile_k / (model.hbm_efficiency * memory_bytes_per_us);
  const bool block_pingpong = p.scale_a_kind == ScaleKind::block128 && v.schedule == Schedule::pingpong;
  const double efficiency = block_pingpong ? model.block_pingpong_tensor_efficiency : model.tensor_efficiency;
  const double flops_per_us_per_sm = model.fp8_tensor_flops_per_us / double(model.fp8_tensor_sms);
  const double mma_us = 2.0 * v.tile_m * v.tile_n * v.tile_k / (efficiency * flops_per_us_per_sm);
  return waves * (blocks * std::max(hbm_us, mma_us) + model.cutlass_wave_us);
}

// NOTES: the wave model does not see clusters; among variants of one tile, a pair of CTAs along the longer side of
// the kernel's output first (rank 0), then the other pair (1), then none (2). Past 64 tokens with block scales the
// pair along the longer side ran within 2% of the best of the three on all 16 design problems (H100), and up to
// 1.41x faster than the CTAs without a cluster.
inline int32_t cluster_rank(const VariantInfo& v, const ScaledGemmProblem& p) {
  if (v.cluster_m * v.cluster_n == 1) return 2;
  const int64_t kernel_m = v.swap_ab ? p.n : p.m, kernel_n = v.swap_ab ? p.m : p.n;
  return (v.cluster_m > 1) == (kernel_m > kernel_n) ? 0 : 1;
}

// Whether weight tiles of `tile_rows` rows, times token tiles of `tokens` for M (0: no decode variant takes p),
// occupy 1 / share of the SMs.
inline bool tiles_occupy(int64_t tile_rows, int32_t tokens, const ScaledGemmProblem& p, int64_t share,
                         int32_t sm_count) {
  if (tokens == 0) return true;
  return share * ((p.n + tile_rows - 1) / tile_rows) * ((p.m + tokens - 1) / tokens) >= sm_count;
}

// NOTES: up to kScaledGemmDecodeTokens tokens, a swapped CUTLASS variant streams its weight tile through a deep
// TMA pipeline, one CTA per SM, and with a third of the SMs busy it read the design split's layers faster than
// the decode kernels, which pay for their K splits' reduction (M 1-8: 0.77-0.96 of their time from N = 3072
// at 64 rows a tile); narrower layers leave it too few CTAs, and the decode kernels' K splits fill the GPU.
// Each further token tile of the decode kernels reads the weights again (from L2) and takes as long, so the
// CUTLASS variant wins once its weight tiles, times the decode kernels' token tiles, occupy a third of the SMs:
// at 9-16 tokens a layer of under 22 of its 64-row tiles (N < 1,344) still goes to the decode kernels, which
// ran 1.09-1.41x the CUTLASS variants on such layers (qkv projections at TP 4-8; design and held-out rows).
// NOTES: with 128-block scales the decode variants apply the scales per K block, and the CUTLASS variants won from
// a fifth of the SMs. Replayed (benchmarks/scaled_gemm.py --replay) on an H100 design-split run (28 problems at
// 1-16 tokens) the fifth picked 0.996 of the best variant where the third picked 0.981; on held-out runs 1.000
// (H100, 27 problems) and 1.000 (H200, 28) where the third gave 0.984 and 1.000. On per-row runs the third stays
// ahead (0.996 against 0.991 on the design split, H200).
// Whether a CUTLASS variant of `tile_rows`-row weight tiles takes p from the decode variants of `tokens`-token tiles.
inline bool cutlass_fills_the_gpu(int64_t tile_rows, int32_t tokens, const ScaledGemmProblem& p, int32_t sm_count,
                                  const ScaledGemmModel& model) {
  const bool blocks = p.scale_a_kind == ScaleKind::block128;
  const int64_t share = blocks ? model.cutlass_fill_share_block128 : model.cutlass_fill_share_row;
  return tiles_occupy(tile_rows, tokens, p, share, sm_count);
}

}  // namespace wavetune::detail

// The paged attention kernels' built-in wave model, which their choice (paged_launch.cu) runs without a table: the
// splits a launch runs, its predicted time on a kernel of the GPU's resident CTAs, whether its splits merge in the
// kernel's clusters, the kernels the choice weighs and how it breaks ties. Host-only, no CUDA, so the bindings give
// the Python replay (wavetune.families.attention.paged_replay) these same functions. Their constants are the
// family's model data, the paged_ entries of the [model] table of cutlass_configs/sm90_attention.toml
// (AttentionModel, attention_model_data.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "attention_model_data.h"
#include "paged_shape.h"
#include "wavetune/attention.h"

namespace wavetune::detail {

// Rows of q and out.
inline int32_t paged_query_tokens(const PagedAttentionProblem& p) { return p.q_tokens > 0 ? p.q_tokens : p.batch; }

// The keys each split takes (whole CTA steps of the kernel, VariantInfo::tile_n keys) and so the splits a
// launch really runs, from the requested count; what the launch and the workspace size agree on.
struct PagedSplits {
  int32_t splits, split_keys;
};
inline PagedSplits paged_splits(const PagedAttentionProblem& p, int32_t step_keys, int32_t requested) {
  const int32_t steps = std::max(1, (p.max_seq_len + step_keys - 1) / step_keys);
  const int32_t per_split = (steps + std::clamp(requested, 1, steps) - 1) / std::clamp(requested, 1, steps);
  return {(steps + per_split - 1) / per_split, per_split * step_keys};
}

// The row blocks of `block_rows` that one sequence's (token, query head) rows of a KV head take.
inline int64_t row_blocks(const PagedAttentionProblem& p, int64_t block_rows) {
  return (int64_t(p.max_q_len) * (p.heads_q / p.heads_kv) + block_rows - 1) / block_rows;
}

// The CTAs of a launch: sequences x KV heads x row blocks x splits.
inline int64_t grid_ctas(const PagedAttentionProblem& p, int64_t block_rows, const PagedSplits& s) {
  return int64_t(p.batch) * p.heads_kv * row_blocks(p, block_rows) * s.splits;
}

// NOTES: the splits of a row block merge in the cluster they form (paged::merge_cluster_rows) where they fit one
// and every cluster of the grid is resident at once (`cluster_ctas`: the kernel's resident CTAs in clusters of
// that size). Past one wave a cluster would hold the slots of its splits that end early (a short sequence's have
// no keys) until its last one ends, and the merge kernel runs instead.
inline bool merges_in_clusters(const PagedAttentionProblem& p, int64_t block_rows, const PagedSplits& s,
                               int64_t cluster_ctas) {
  return s.splits > 1 && s.splits <= kPagedAttentionMaxClusterSplits && grid_ctas(p, block_rows, s) <= cluster_ctas;
}

// Causal prompts: no sequence has cached keys before its queries.
inline bool causal_prompts(const PagedAttentionProblem& p) { return p.causal && p.max_seq_len <= p.max_q_len; }

// NOTES: the wave model of a launch, without a table. G = CTAs (sequences x KV heads x row blocks x splits)
// of a kernel with C resident CTAs per SM run in waves of C x SMs; a wave lasts paged_wave_us plus the longest of
// four times for its CTAs: their K and V bytes at each CTA's own rate (its warps' cp.async pipelines, ~2 tiles
// each in flight: paged_warp_bytes_per_us per warp, a latency-bound rate, paged_l2_speedup times faster for the
// share of reads that L2 serves); the same bytes at the wave's share of paged_hbm_fraction of the device's peak
// bandwidth (the row blocks of one sequence and KV head read the same keys, so HBM sees them once and L2 serves
// the rest); one warp's chain of dependent mma.sync tiles (16 rows by its keys, paged_warp_flops_per_us); and the
// tile math of the SM's CTAs at paged_sm_flops_per_us (a tile does all 16 rows' work however few are queries); a
// rows_split warp's chain also pays paged_rows_step_us per softmax step (its CTA-wide barrier and the rescale), so
// a kernel of longer steps runs the same keys in fewer of them. With the causal mask a CTA reads on average the
// keys of its middle query. In a batch of mixed lengths (total_keys) only the batch's share of the CTAs has keys,
// and they no longer fill whole waves: the waves are counted as a fraction. Past causal prompts, only the row
// blocks that q's rows fill (at most one partial block per sequence) have rows, as though query and key counts
// were independent; a prompt's keys are its queries, so there they are not. Splits add the merge: paged_merge_us
// (its launch and its wait for the splits), and the partial outputs written and read once (what many queries'
// merge costs); its thread groups read the splits side by side, so their count adds nothing the sweeps could see.
// The constants are the replay optimum (benchmarks/paged_attention.py --fit) of kernel and split sweeps: the
// bandwidth share, warp rate, wave and merge on decode design cases (attention.py's named models' heads; H100,
// 2026-11-28), whose choices ran at 0.973 of the best there and at 0.977 on 59 held-out cases; the two tile-math
// rates, the L2 speed-up and the rows step on several-query cases of benchmarks/varlen_attention.py (36 design
// cases, H100, 2026-11-28), whose choices replayed at 0.954 of the best there and at 0.930 on 30 held-out cases.
// The warp-specialized kernels (schedule cooperative; steps of 64 or 128 keys, four copying warps) run their tile
// math with wgmma: both math terms are paged_wgmma_speedup times faster for them. The factor, 2, is the replay
// optimum of their sweeps with the others as shipped (33 design cases, H100, 2026-11-28: 0.961 of the best there,
// 0.934 on 29 held-out cases), within the 1.1-2.2x those kernels measured over the mma.sync kernels on math-bound
// cases.
// NOTES: their copying warps only copy, so each streams K and V paged_ws_copy_speedup times faster than a warp that
// also computes: the 64-row kernel, whose pipeline matches a 4-warp rows_split kernel's but ran 1.1-1.4x faster on
// speculative steps, is priced alike without it. The factor and paged_rows_step_us are the joint replay optimum,
// the others as shipped, on the design logs with the 64-row kernel of both GPUs (benchmarks/varlen_attention.py,
// seed 23, H200 and H100, 2026-11-28): 0.942 of the best at (0.5, 1.25), 0.948 at (0.2, 1.5); held-out (seed 101)
// 0.922 and 0.932 (H200), 0.955 and 0.966 (H100). Measured with them (H200): 0.943 of the sweep's best on the
// design cases, 0.910 held-out (0.933 and 0.907 at (0.5, 1.25)).
// NOTES: a keys_split kernel on a KV head's query rows past one 16-row tile (speculative steps, chunks, prompts)
// runs one CTA per 16 rows, each reading the keys the others read and writing its rows element by element; the
// terms above price that about 20% low, so paged_keys_split_rows_factor scales its time. The factor is the replay
// optimum on the several-query sweeps with the warp-specialized kernels: on three H100 design logs 0.951 of the best
// with it and without; on eight others (H100 held-out and FlashInfer cases, builds of 2026-11-28) 0.932 without,
// 0.950 with; H200 FlashInfer cases 0.902 and 0.947 (docs/results.md, varlen_attention_*).
// NOTES: a merge in the attention kernel's clusters costs its two cluster barriers and a read of each split's staged
// rows from distributed shared memory: paged_cluster_merge_us and paged_cluster_split_us per split, the replay
// optimum (benchmarks/paged_attention.py) on nine H200 logs of two builds that merged up to 16 splits in clusters,
// replayed with clusters of up to 8 (2026-11-28: several-query design and held-out cases, held-out decode, four
// FlashInfer runs), 0.948 of the best on their geomean. At the same kernel and split count, the merge in clusters
// ran 0.90-1.00x the time of the merge kernel (per-case geomeans of 7 small steps and decode cases, interleaved,
// H200). Clusters of 9-16 CTAs (not portable) are left out: for kernels of one CTA an SM they ran slower than the
// merge kernel (across runs).
inline double predicted_us(const PagedAttentionProblem& p, const VariantInfo& v, const PagedSplits& s,
                           int64_t sm_count, int64_t slots, double memory_bytes_per_us, bool in_clusters,
                           const AttentionModel& model) {
  const double hbm_bytes_per_us = model.paged_hbm_fraction * memory_bytes_per_us;
  const int64_t group = p.heads_q / p.heads_kv, rows = int64_t(p.max_q_len) * group;
  const int64_t row_blocks = detail::row_blocks(p, v.tile_m), head_blocks = (group + v.tile_m - 1) / v.tile_m;
  const double key_fill = p.total_keys > 0 && p.max_seq_len > 0
                              ? std::clamp(double(p.total_keys) / (double(p.batch) * p.max_seq_len), 1.0 / p.batch, 1.0)
                              : 1.0;
  const int64_t all_blocks = int64_t(p.batch) * row_blocks;
  const int64_t query_blocks =
      causal_prompts(p)
          ? all_blocks
          : std::min(all_blocks, (int64_t(paged_query_tokens(p)) * group + v.tile_m - 1) / v.tile_m + p.batch - 1);
  const double fill = key_fill * (double(query_blocks) / double(all_blocks));
  const int64_t one_sequence = int64_t(p.heads_kv) * row_blocks * s.splits;
  const int64_t ctas = std::max(one_sequence, int64_t(std::ceil(double(p.batch) * one_sequence * fill)));
  const bool wgmma = v.schedule == Schedule::cooperative;
  const int64_t warps = wgmma ? paged::kWsCopyWarps : v.tile_n / paged::kTileKeys;  // warps that copy K and V
  const double causal_share =
      p.causal && p.max_q_len > 1 && p.max_seq_len > 0
          ? std::max(1.0, p.max_seq_len - 0.5 * p.max_q_len) / p.max_seq_len
          : 1.0;
  const double keys_per_cta = s.split_keys * causal_share;
  const bool rows_split = v.tile_m > paged::kRows;
  const double keys_per_warp = rows_split ? keys_per_cta : keys_per_cta / warps;
  const double bytes_per_cta = 2.0 * keys_per_cta * p.head_dim * 2;
  const double math = wgmma ? model.paged_wgmma_speedup : 1.0;
  const double warp_us = (rows_split ? keys_per_cta / v.tile_n * model.paged_rows_step_us : 0.0) +
                         4.0 * paged::kRows * keys_per_warp * p.head_dim / (model.paged_warp_flops_per_us * math);
  const double flops_per_cta = 4.0 * v.tile_m * keys_per_cta * p.head_dim;
  const double sharing = double(std::max<int64_t>(1, row_blocks / head_blocks));
  const double cta_rate = model.paged_warp_bytes_per_us * (wgmma ? model.paged_ws_copy_speedup : 1.0) * warps *
                          (1.0 + (model.paged_l2_speedup - 1.0) * (1.0 - 1.0 / sharing));
  auto wave_us = [&](int64_t running) {
    const double per_sm = double((running + sm_count - 1) / sm_count);
    return model.paged_wave_us + std::max({bytes_per_cta * running / (sharing * hbm_bytes_per_us),
                                           bytes_per_cta / cta_rate, warp_us,
                                           per_sm * flops_per_cta / (model.paged_sm_flops_per_us * math)});
  };
  double us = fill < 1.0 ? wave_us(std::min(ctas, slots)) * std::max(1.0, double(ctas) / slots)
                         : double(ctas / slots) * wave_us(slots) + (ctas % slots ? wave_us(ctas % slots) : 0.0);
  if (in_clusters) {
    us += model.paged_cluster_merge_us + model.paged_cluster_split_us * s.splits;
  } else if (s.splits > 1) {
    const double queries = double(p.batch) * p.max_q_len;  // at most; the sizes alone set the choice
    us += model.paged_merge_us + 2.0 * queries * p.heads_q * s.splits * p.head_dim * 4 / hbm_bytes_per_us;
  }
  const bool keys_split = !rows_split && !wgmma;
  return keys_split && rows > paged::kRows ? model.paged_keys_split_rows_factor * us : us;
}

// The predicted time of kernel v at a requested split count: the splits it runs, merged in its clusters where they
// hold the grid (cluster_ctas(n): the kernel's resident CTAs in clusters of n).
template <class ClusterCtas>
double predicted_launch_us(const PagedAttentionProblem& p, const VariantInfo& v, int32_t requested,
                           int64_t sm_count, int64_t slots, double memory_bytes_per_us,
                           const ClusterCtas& cluster_ctas, const AttentionModel& model) {
  const PagedSplits s = paged_splits(p, v.tile_n, requested);
  const bool in_clusters = merges_in_clusters(p, v.tile_m, s, cluster_ctas(s.splits));
  return predicted_us(p, v, s, sm_count, slots, memory_bytes_per_us, in_clusters, model);
}

// The least predicted split count of one kernel, and its prediction. NOTES: splits cut every (sequence, KV head)
// at the same keys. Equal shares of all sequences' keys laid end to end ran 0.85x the best split count on 59
// held-out decode cases (H200, docs/results.md#paged_balanced_ab_h200.md): a CTA restarts its pipeline for each
// sequence its share reaches, and every sequence then needs the merge.
template <class ClusterCtas>
std::pair<int32_t, double> best_splits(const PagedAttentionProblem& p, const VariantInfo& v, int64_t sm_count,
                                       int64_t slots, double memory_bytes_per_us, const ClusterCtas& cluster_ctas,
                                       const AttentionModel& model) {
  const int32_t steps = (p.max_seq_len + v.tile_n - 1) / v.tile_n;
  std::pair<int32_t, double> best{
      1, predicted_launch_us(p, v, 1, sm_count, slots, memory_bytes_per_us, cluster_ctas, model)};
  for (int32_t splits = 2; splits <= std::min(steps, kPagedAttentionMaxSplits); ++splits) {
    if (paged_splits(p, v.tile_n, splits).splits != splits) continue;  // the same keys per split as a smaller count
    const double us = predicted_launch_us(p, v, splits, sm_count, slots, memory_bytes_per_us, cluster_ctas, model);
    if (us < best.second) best = {splits, us};
  }
  return best;
}

// NOTES: the sequences run longest first (order_sequences_kernel, then the CTAs of grid z run the z-th longest)
// where that can shorten the launch's tail: their lengths differ, CTAs wait for a slot (more of them than fit on
// the GPU at once), and the launch is long enough (paged_order_min_us) to repay the ordering kernel (about 1.2 us
// on an H100). Not for causal prompts (no cached keys): each sequence's first CTAs are already its longest, and
// ordering ran them 0.986-0.992x on the geomean of two samples (docs/results.md#paged_order_merge_h100.md).
inline bool orders_sequences(const PagedAttentionProblem& p, const VariantInfo& v, const PagedSplits& s, int64_t ctas,
                             int64_t slots, int64_t sm_count, double memory_bytes_per_us, const AttentionModel& model) {
  const bool lengths_differ = p.seq_lens || p.key_starts;
  return lengths_differ && !causal_prompts(p) && ctas > slots &&
         predicted_us(p, v, s, sm_count, slots, memory_bytes_per_us, false, model) >= model.paged_order_min_us;
}

// NOTES: where a KV head's query rows fit one 16-row tile (decode; a few tokens of a small group), a rows_split
// kernel's warps each compute a tile of 16 rows of which at most the first holds queries, and all wait on one
// shared pipeline; its wave model sees neither. On every decode case swept with both kinds (15 held-out cases,
// H100, results/paged_decode_heldout_h100_varlen_build) it ran 1-150% slower than the best keys_split kernel.
// The warp-specialized kernel of one computing warpgroup wastes rows too, but its copying warpgroup streams K and
// V beside the math, two CTAs to an SM: it was the fastest on 24 of 58 design and 25 of 57 held-out decode cases
// (H200, 2026-11-28, results/paged_decode_*_h200_ws_w8), and the model's choice with it ran 0.971 and 0.970 of
// the best (0.947 and 0.940 without; 0.963 and 0.961 with the 128-row kernels as well, whose second warpgroup
// has no rows). So such problems take the keys_split kernels and that one.
inline bool one_row_tile_kernel(const VariantInfo& v) {
  return v.tile_m <= paged::kRows || (v.schedule == Schedule::cooperative && v.tile_m == paged::kWarpgroupRows);
}

// Whether the choice weighs kernel v for p: every kernel, but only the one_row_tile_kernel ones where a KV head's
// query rows fit one 16-row tile.
inline bool weighs_kernel(const PagedAttentionProblem& p, const VariantInfo& v) {
  const bool one_row_tile = int64_t(p.max_q_len) * (p.heads_q / p.heads_kv) <= paged::kRows;
  return !one_row_tile || one_row_tile_kernel(v);
}

// NOTES: the model prices the 64-row and 128-row warp-specialized kernels alike where the same term bounds both
// (a prompt, a chunk or a step of at most 64 rows per KV head), but two CTAs on an SM run one's start and end
// beside the other's math. So a tie (within paged_tie_relative) goes to the kernel of more resident CTAs: replayed
// on the H200 logs with the 64-row kernel (2026-11-28), 0.945 -> 0.955 of the best on 29 held-out several-query
// cases and 0.931-0.941 -> 0.941-0.950 on three FlashInfer runs, the others unchanged; on eight logs without that
// kernel, unchanged. On the FlashInfer cases of two seeds read after (31 and 37): 0.923 -> 0.942 and 0.946 ->
// 0.949 replayed; measured with it, 0.955 and 0.974 of the sweep's best.
// Whether a kernel predicted `us` with `resident` CTAs per SM beats the best so far.
inline bool beats(double us, int32_t resident, double best_us, int32_t best_resident, const AttentionModel& model) {
  if (std::abs(us - best_us) <= model.paged_tie_relative * best_us) return resident > best_resident;
  return us < best_us;
}

}  // namespace wavetune::detail

// The paged attention kernels (one per dtype and head dim), the wave model that picks their KV splits, and
// their launch (attention.h, paged_attention).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "paged_ops.h"
#include "programmatic_launch.cuh"
#include "paged_variants.h"
#include "sm90_paged_attention.cuh"
#include "sm90_paged_attention_ws.cuh"
#include "wavetune/errors.h"
#include "wavetune/kernels.h"

namespace wavetune {
namespace detail {
namespace {

// Output rows from which the split merge runs a warp per row (merge below).
constexpr int64_t kMergeRowsPerWarp = 1024;
// The least predicted time of a launch whose sequences are ordered longest first (orders_sequences below).
constexpr double kOrderMinUs = 30.0;
constexpr double kHbmFraction = 0.98;
double predicted_us(const PagedAttentionProblem& p, const VariantInfo& v, const PagedSplits& s, int64_t sm_count,
                    int64_t slots, double hbm_bytes_per_us, bool in_clusters);
static_assert(paged::kMaxClusterSplits == kPagedAttentionMaxClusterSplits);

// The row blocks of `block_rows` that one sequence's (token, query head) rows of a KV head take.
int64_t row_blocks(const PagedAttentionProblem& p, int64_t block_rows) {
  return (int64_t(p.max_q_len) * (p.heads_q / p.heads_kv) + block_rows - 1) / block_rows;
}

// The CTAs of a launch: sequences x KV heads x row blocks x splits.
int64_t grid_ctas(const PagedAttentionProblem& p, int64_t block_rows, const PagedSplits& s) {
  return int64_t(p.batch) * p.heads_kv * row_blocks(p, block_rows) * s.splits;
}

// NOTES: the splits of a row block merge in the cluster they form (paged::merge_cluster_rows) where they fit one
// and every cluster of the grid is resident at once (`cluster_ctas`: the kernel's resident CTAs in clusters of
// that size). Past one wave a cluster would hold the slots of its splits that end early (a short sequence's have
// no keys) until its last one ends, and the merge kernel runs instead.
bool merges_in_clusters(const PagedAttentionProblem& p, int64_t block_rows, const PagedSplits& s,
                        int64_t cluster_ctas) {
  return s.splits > 1 && s.splits <= kPagedAttentionMaxClusterSplits && grid_ctas(p, block_rows, s) <= cluster_ctas;
}

// Causal prompts: no sequence has cached keys before its queries.
bool causal_prompts(const PagedAttentionProblem& p) { return p.causal && p.max_seq_len <= p.max_q_len; }

// NOTES: the sequences run longest first (order_sequences_kernel, then the CTAs of grid z run the z-th longest)
// where that can shorten the launch's tail: their lengths differ, CTAs wait for a slot (more of them than fit on
// the GPU at once), and the launch is long enough to repay the ordering kernel (about 1.2 us on an H100). Not
// for causal prompts (no cached keys): each sequence's first CTAs are already its longest, and ordering ran them
// 0.986-0.992x on the geomean of two samples (docs/results.md#paged_order_merge_h100.md).
bool orders_sequences(const PagedAttentionProblem& p, const VariantInfo& v, const PagedSplits& s, int64_t ctas,
                      int64_t slots, const DeviceInfo& dev) {
  const bool lengths_differ = p.seq_lens || p.key_starts;
  return lengths_differ && !causal_prompts(p) && ctas > slots &&
         predicted_us(p, v, s, dev.sm_count, slots, kHbmFraction * dev.memory_bytes_per_us, false) >= kOrderMinUs;
}

template <DType kDType, int kHeadDim, int kWarps, paged::WarpSplit kSplit, int kStepKeys>
struct PagedVariant {
  using T = std::conditional_t<kDType == DType::bf16, __nv_bfloat16, __half>;
  static constexpr bool kSpecialized = kSplit == paged::WarpSplit::specialized;
  static constexpr int kGroups = kSpecialized ? kWarps / 4 - 1 : 1;  // the computing warpgroups of a specialized one
  static_assert(kSpecialized ? 32 * kWarps == paged::WsShape<kGroups>::kThreads
                             : kStepKeys == kWarps * paged::kTileKeys);
  static constexpr size_t kShared = kSpecialized ? paged::ws_shared_bytes<kHeadDim, kStepKeys, kGroups>()
                                                 : paged::shared_bytes<kHeadDim, kWarps, kSplit>();
  static constexpr int kBlockRows = kSplit == paged::WarpSplit::keys ? paged::kRows
                                    : kSpecialized                   ? paged::WsShape<kGroups>::kBlockRows
                                                                     : paged::kRows * kWarps;
  static constexpr auto kKernel = [] {
    if constexpr (kSpecialized) return paged::paged_attention_ws_kernel<T, kHeadDim, kStepKeys, kGroups>;
    else return paged::paged_attention_kernel<T, kHeadDim, kWarps, kSplit>;
  }();

  // The shared-memory limit raised and the occupancy read once per device.
  static int32_t ctas_per_sm(const DeviceInfo& dev) {
    static std::array<std::once_flag, kMaxDevices> done;
    static std::array<int32_t, kMaxDevices> resident{};
    std::call_once(done.at(dev.device), [&] {
      const void* kernel = reinterpret_cast<const void*>(kKernel);
      int count = 0;
      if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kShared)) != cudaSuccess ||
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&count, kernel, 32 * kWarps, kShared) != cudaSuccess) {
        cudaGetLastError();
      }
      resident[dev.device] = count;
    });
    if (resident[dev.device] < 1) {
      WAVETUNE_FAIL("the paged attention kernel (head dim ", kHeadDim, ") cannot run with ", kShared,
                    " bytes of shared memory on this device");
    }
    return resident[dev.device];
  }

  static int64_t cluster_ctas(const DeviceInfo& dev, int32_t cluster) {
    static std::array<std::once_flag, kMaxDevices> done;
    static std::array<std::array<int64_t, kPagedAttentionMaxClusterSplits + 1>, kMaxDevices> resident{};
    if (cluster < 2 || cluster > kPagedAttentionMaxClusterSplits) return 0;
    ctas_per_sm(dev);  // the shared-memory limit raised
    std::call_once(done.at(dev.device), [&] {
      for (int32_t n = 2; n <= kPagedAttentionMaxClusterSplits; ++n) {
        cudaLaunchConfig_t config{};
        config.gridDim = dim3(unsigned(n)), config.blockDim = dim3(32 * kWarps), config.dynamicSmemBytes = kShared;
        cudaLaunchAttribute attribute;
        attribute.id = cudaLaunchAttributeClusterDimension;
        attribute.val.clusterDim.x = unsigned(n), attribute.val.clusterDim.y = 1, attribute.val.clusterDim.z = 1;
        config.attrs = &attribute, config.numAttrs = 1;
        int clusters = 0;
        if (cudaOccupancyMaxActiveClusters(&clusters, reinterpret_cast<const void*>(kKernel), &config) != cudaSuccess) {
          cudaGetLastError();
          clusters = 0;  // no clusters of n: the merge kernel runs
        }
        resident[dev.device][n] = int64_t(clusters) * n;
      }
    });
    return resident[dev.device][cluster];
  }

  static paged::Params params(const PagedAttentionProblem& p, const PagedSplits& s, bool in_clusters,
                              void* workspace) {
    const int32_t group = p.heads_q / p.heads_kv;
    paged::Params params{p.q, p.q_batch_stride, p.q_head_stride, p.k_cache, p.v_cache, p.page_stride, p.row_stride,
                         p.head_stride, p.page_size, p.block_table, p.table_stride, p.key_starts, p.seq_lens,
                         p.max_seq_len, p.q_starts, p.batch, p.max_q_len, p.causal, p.heads_kv, group,
                         int32_t(row_blocks(p, kBlockRows)), s.splits, s.split_keys, p.scale * float(M_LOG2E),
                         p.out, p.out_batch_stride, p.out_head_stride, nullptr, nullptr, nullptr, in_clusters};
    if (s.splits > 1 && !in_clusters) {
      params.partial = static_cast<float*>(workspace);
      params.lse = params.partial + size_t(paged_query_tokens(p)) * p.heads_q * s.splits * kHeadDim;
    }
    return params;
  }

  static void run(const PagedAttentionProblem& p, int32_t requested, void* workspace, const DeviceInfo& dev,
                  Stream stream) {
    const int64_t slots = int64_t(ctas_per_sm(dev)) * dev.sm_count;
    const PagedSplits s = paged_splits(p, kStepKeys, requested);
    const bool in_clusters = merges_in_clusters(p, kBlockRows, s, cluster_ctas(dev, s.splits));
    paged::Params params = PagedVariant::params(p, s, in_clusters, workspace);
    const dim3 grid(unsigned(params.row_blocks * s.splits), unsigned(p.heads_kv), unsigned(p.batch));
    cudaError_t status = cudaSuccess;
    const PagedWorkspace layout = paged_workspace(p, s);
    if (layout.bytes > layout.order && !in_clusters &&
        orders_sequences(p, info(-1, ""), s, int64_t(grid.x) * grid.y * grid.z, slots, dev)) {
      params.order = reinterpret_cast<int32_t*>(static_cast<char*>(workspace) + layout.order);
      void* order_args[] = {&params, &params.order};
      status = launch_programmatic(reinterpret_cast<const void*>(paged::order_sequences_kernel), dim3(1),
                                   dim3(unsigned(std::min(p.batch, kMaxOrderedBatch))), p.batch * sizeof(int), stream,
                                   order_args);
    }
    void* args[] = {&params};
    if (status == cudaSuccess) {
      status = launch_programmatic(reinterpret_cast<const void*>(kKernel), grid, dim3(32 * kWarps), kShared, stream,
                                   args, in_clusters ? unsigned(s.splits) : 1u);
    }
    if (status == cudaSuccess && s.splits > 1 && !in_clusters) status = merge(p, s, params, stream);
    if (status != cudaSuccess) {
      cudaGetLastError();
      WAVETUNE_FAIL("paged attention launch failed: ", cudaGetErrorString(status), " (batch=", p.batch,
                    " heads=", p.heads_q, "/", p.heads_kv, " max_q_len=", p.max_q_len, " max_seq_len=",
                    p.max_seq_len, ", ", s.splits, " splits)");
    }
  }

  // NOTES: a CTA per output row lets a decode step's few rows read many splits side by side; from
  // kMergeRowsPerWarp rows, CTA launches and barriers cost more than the reads, and a warp per row does.
  static cudaError_t merge(const PagedAttentionProblem& p, const PagedSplits& s, paged::Params& params,
                           Stream stream) {
    int64_t rows = int64_t(paged_query_tokens(p)) * p.heads_q;
    if (rows >= kMergeRowsPerWarp) {
      void* args[] = {&params, &rows};
      return launch_programmatic(reinterpret_cast<const void*>(paged::merge_rows_kernel<T, kHeadDim>),
                                 dim3(unsigned((rows + paged::kMergeWarps - 1) / paged::kMergeWarps)),
                                 dim3(32 * paged::kMergeWarps), 0, stream, args);
    }
    int head_dim = kHeadDim;
    void* args[] = {&params, &head_dim};
    const int groups = paged::merge_groups(kHeadDim, s.splits);
    return launch_programmatic(reinterpret_cast<const void*>(paged::merge_splits_kernel<T>), dim3(unsigned(rows)),
                               dim3(unsigned(groups * kHeadDim)), 3 * groups * kHeadDim * sizeof(float), stream, args);
  }

  static constexpr PagedVariantOps kOps{&ctas_per_sm, &cluster_ctas, &run};

  static VariantInfo info(int32_t id, const char* name) {
    // The warp-specialized kernels' schedule is "cooperative" (their computing warpgroups each take 64 of the
    // tile's rows, as CUTLASS's): the wave model reads it as "computes with wgmma".
    return {id, name, kDType, BLayout::col, false, kSpecialized ? Schedule::cooperative : Schedule::decode, kBlockRows,
            kStepKeys, kHeadDim, 1, 1, TileScheduler::data_parallel};
  }

  static VariantRegistry<PagedVariantOps>::Entry entry(int32_t id, const char* name) { return {info(id, name), &kOps}; }
};

// NOTES: the wave model of a launch, without a table. G = CTAs (sequences x KV heads x row blocks x splits)
// of a kernel with C resident CTAs per SM run in waves of C x SMs; a wave lasts kWaveUs plus the longest of
// four times for its CTAs: their K and V bytes at each CTA's own rate (its warps' cp.async pipelines, ~2
// tiles each in flight: kWarpBytesPerUs per warp, a latency-bound rate, kL2Speedup times faster for the
// share of reads that L2 serves); the same bytes at the wave's share of kHbmFraction of the device's peak
// bandwidth (the row blocks of one sequence and KV head read the same keys, so HBM sees them once and L2
// serves the rest); one warp's chain of dependent mma.sync tiles (16 rows by its keys, kWarpFlopsPerUs);
// and the tile math of the SM's CTAs at kSmFlopsPerUs (a tile does all 16 rows' work however few are
// queries); a rows_split warp's chain also pays kRowsStepUs per softmax step (its CTA-wide barrier and
// the rescale), so a kernel of longer steps runs the same keys in fewer of them. With the causal mask a CTA
// reads on average the keys of its middle query. In a batch of mixed lengths (total_keys) only the batch's
// share of the CTAs has keys, and they no longer fill whole waves: the waves are counted as a fraction. Past
// causal prompts, only the row blocks that q's rows fill (at most one partial block per sequence) have rows,
// as though query and key counts were independent; a prompt's keys are its queries, so there they are not.
// Splits add the merge: kMergeUs (its launch and its wait for the splits), and the partial outputs written
// and read once (what many queries' merge costs); its thread groups read the splits side by side, so their
// count adds nothing the sweeps could see. The constants are the replay optimum (benchmarks/paged_attention.py
// --fit) of kernel and split sweeps: the first four on decode design cases (attention.py's named models'
// heads; H100, 2026-11-28), whose choices ran at 0.973 of the best there and at 0.977 on 59 held-out cases;
// the other four on several-query cases of benchmarks/varlen_attention.py (36 design cases, H100, 2026-11-28),
// whose choices replayed at 0.954 of the best there and at 0.930 on 30 held-out cases. The warp-specialized
// kernels (schedule cooperative; steps of 64 or 128 keys, four copying warps) run their tile math with wgmma:
// both math terms are kWgmmaSpeedup times faster for them. The factor, 2, is the replay optimum of their sweeps
// with the others as shipped (33 design cases, H100, 2026-11-28: 0.961 of the best there, 0.934 on 29
// held-out cases), within the 1.1-2.2x those kernels measured over the mma.sync kernels on math-bound cases.
constexpr double kWarpBytesPerUs = 3.75e3;
constexpr double kWaveUs = 4.0;
constexpr double kMergeUs = 5.0;
constexpr double kWarpFlopsPerUs = 4.0e5;
constexpr double kSmFlopsPerUs = 4.0e6;
constexpr double kL2Speedup = 2.0;
constexpr double kRowsStepUs = 0.2;
constexpr double kWgmmaSpeedup = 2.0;
// NOTES: their copying warps only copy, so each streams K and V kWsCopySpeedup times faster than a warp that also
// computes: the 64-row kernel, whose pipeline matches a 4-warp rows_split kernel's but ran 1.1-1.4x faster on
// speculative steps, is priced alike without it. The factor and kRowsStepUs are the joint replay optimum, the
// others as shipped, on the design logs with the 64-row kernel of both GPUs (benchmarks/varlen_attention.py, seed
// 23, H200 and H100, 2026-11-28): 0.942 of the best at (0.5, 1.25), 0.948 at (0.2, 1.5); held-out (seed 101)
// 0.922 and 0.932 (H200), 0.955 and 0.966 (H100). Measured with them (H200): 0.943 of the sweep's best on the
// design cases, 0.910 held-out (0.933 and 0.907 at (0.5, 1.25)).
constexpr double kWsCopySpeedup = 1.5;
// NOTES: a keys_split kernel on a KV head's query rows past one 16-row tile (speculative steps, chunks, prompts)
// runs one CTA per 16 rows, each reading the keys the others read and writing its rows element by element; the
// terms above price that about 20% low. The factor is the replay optimum on the several-query sweeps with the
// warp-specialized kernels: on three H100 design logs 0.951 of the best with it and without; on eight others
// (H100 held-out and FlashInfer cases, builds of 2026-11-28) 0.932 without, 0.950 with; H200 FlashInfer
// cases 0.902 and 0.947 (docs/results.md, varlen_attention_*).
constexpr double kKeysSplitRowsFactor = 1.2;

// NOTES: a merge in the attention kernel's clusters costs its two cluster barriers and a read of each split's staged
// rows from distributed shared memory: kClusterMergeUs and kClusterSplitUs per split, the replay optimum
// (benchmarks/paged_attention.py) on nine H200 logs of two builds that merged up to 16 splits in clusters, replayed
// with clusters of up to 8 (2026-11-28: several-query design and held-out cases, held-out decode, four FlashInfer
// runs), 0.948 of the best on their geomean. At the same kernel and split count, the merge in clusters ran 0.90-1.00x
// the time of the merge kernel (per-case geomeans of 7 small steps and decode cases, interleaved, H200). Clusters of
// 9-16 CTAs (not portable) are left out: for kernels of one CTA an SM they ran slower than the merge kernel (across
// runs).
constexpr double kClusterMergeUs = 3.0;
constexpr double kClusterSplitUs = 0.2;

double predicted_us(const PagedAttentionProblem& p, const VariantInfo& v, const PagedSplits& s, int64_t sm_count,
                    int64_t slots, double hbm_bytes_per_us, bool in_clusters) {
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
  const double math = wgmma ? kWgmmaSpeedup : 1.0;
  const double warp_us = (rows_split ? keys_per_cta / v.tile_n * kRowsStepUs : 0.0) +
                         4.0 * paged::kRows * keys_per_warp * p.head_dim / (kWarpFlopsPerUs * math);
  const double flops_per_cta = 4.0 * v.tile_m * keys_per_cta * p.head_dim;
  const double sharing = double(std::max<int64_t>(1, row_blocks / head_blocks));
  const double cta_rate = kWarpBytesPerUs * (wgmma ? kWsCopySpeedup : 1.0) * warps *
                          (1.0 + (kL2Speedup - 1.0) * (1.0 - 1.0 / sharing));
  auto wave_us = [&](int64_t running) {
    const double per_sm = double((running + sm_count - 1) / sm_count);
    return kWaveUs + std::max({bytes_per_cta * running / (sharing * hbm_bytes_per_us), bytes_per_cta / cta_rate,
                               warp_us, per_sm * flops_per_cta / (kSmFlopsPerUs * math)});
  };
  double us = fill < 1.0 ? wave_us(std::min(ctas, slots)) * std::max(1.0, double(ctas) / slots)
                         : double(ctas / slots) * wave_us(slots) + (ctas % slots ? wave_us(ctas % slots) : 0.0);
  if (in_clusters) {
    us += kClusterMergeUs + kClusterSplitUs * s.splits;
  } else if (s.splits > 1) {
    const double queries = double(p.batch) * p.max_q_len;  // at most; the sizes alone set the choice
    us += kMergeUs + 2.0 * queries * p.heads_q * s.splits * p.head_dim * 4 / hbm_bytes_per_us;
  }
  const bool keys_split = !rows_split && !wgmma;
  return keys_split && rows > paged::kRows ? kKeysSplitRowsFactor * us : us;
}

// The least predicted split count of one kernel, and its prediction. NOTES: splits cut every (sequence, KV head)
// at the same keys. Equal shares of all sequences' keys laid end to end ran 0.85x the best split count on 59
// held-out decode cases (H200, docs/results.md#paged_balanced_ab_h200.md): a CTA restarts its pipeline for each
// sequence its share reaches, and every sequence then needs the merge.
std::pair<int32_t, double> best_splits(const PagedAttentionProblem& p, const VariantInfo& v,
                                       const PagedVariantOps& ops, const DeviceInfo& dev, int64_t slots, double hbm) {
  const int32_t steps = (p.max_seq_len + v.tile_n - 1) / v.tile_n;
  std::pair<int32_t, double> best{1, predicted_us(p, v, paged_splits(p, v.tile_n, 1), dev.sm_count, slots, hbm, false)};
  for (int32_t splits = 2; splits <= std::min(steps, kPagedAttentionMaxSplits); ++splits) {
    const PagedSplits s = paged_splits(p, v.tile_n, splits);
    if (s.splits != splits) continue;  // the same keys per split as a smaller count
    const bool in_clusters = merges_in_clusters(p, v.tile_m, s, ops.cluster_ctas(dev, splits));
    const double us = predicted_us(p, v, s, dev.sm_count, slots, hbm, in_clusters);
    if (us < best.second) best = {splits, us};
  }
  return best;
}

}  // namespace

std::vector<VariantRegistry<PagedVariantOps>::Entry> paged_variant_entries() {
  std::vector<VariantRegistry<PagedVariantOps>::Entry> out;
#define WAVETUNE_PAGED_ENTRY(DTYPE, HEAD_DIM, WARPS, SPLIT, STEP_KEYS, NAME)                     \
  out.push_back(PagedVariant<DType::DTYPE, HEAD_DIM, WARPS, paged::WarpSplit::SPLIT, STEP_KEYS>::entry( \
      int32_t(out.size()), NAME));
  WAVETUNE_PAGED_VARIANTS(WAVETUNE_PAGED_ENTRY)
#undef WAVETUNE_PAGED_ENTRY
  return out;
}

}  // namespace detail

// NOTES: where a KV head's query rows fit one 16-row tile (decode; a few tokens of a small group), a rows_split
// kernel's warps each compute a tile of 16 rows of which at most the first holds queries, and all wait on one
// shared pipeline; its wave model sees neither. On every decode case swept with both kinds (15 held-out cases,
// H100, results/paged_decode_heldout_h100_varlen_build) it ran 1-150% slower than the best keys_split kernel.
// The warp-specialized kernel of one computing warpgroup wastes rows too, but its copying warpgroup streams K and
// V beside the math, two CTAs to an SM: it was the fastest on 24 of 58 design and 25 of 57 held-out decode cases
// (H200, 2026-11-28, results/paged_decode_*_h200_ws_w8), and the model's choice with it ran 0.971 and 0.970 of
// the best (0.947 and 0.940 without; 0.963 and 0.961 with the 128-row kernels as well, whose second warpgroup
// has no rows). So such problems take the keys_split kernels and that one.
namespace {
bool one_row_tile_kernel(const VariantInfo& v) {
  return v.tile_m <= detail::paged::kRows ||
         (v.schedule == Schedule::cooperative && v.tile_m == detail::paged::kWarpgroupRows);
}

// NOTES: the model prices the 64-row and 128-row warp-specialized kernels alike where the same term bounds both
// (a prompt, a chunk or a step of at most 64 rows per KV head), but two CTAs on an SM run one's start and end
// beside the other's math. So a tie goes to the kernel of more resident CTAs: replayed on the H200 logs with the
// 64-row kernel (2026-11-28), 0.945 -> 0.955 of the best on 29 held-out several-query cases and 0.931-0.941 ->
// 0.941-0.950 on three FlashInfer runs, the others unchanged; on eight logs without that kernel, unchanged. On the
// FlashInfer cases of two seeds read after (31 and 37): 0.923 -> 0.942 and 0.946 -> 0.949 replayed; measured with
// it, 0.955 and 0.974 of the sweep's best.
constexpr double kTieRelative = 1e-9;
bool beats(double us, int32_t resident, double best_us, int32_t best_resident) {
  if (std::abs(us - best_us) <= kTieRelative * best_us) return resident > best_resident;
  return us < best_us;
}
}  // namespace

PagedAttentionLaunch paged_attention_choice(const PagedAttentionProblem& p) {
  const std::string error = paged_attention_problem_error(p);
  if (!error.empty()) WAVETUNE_INVALID(error);
  const detail::DeviceInfo& dev = detail::current_device_info();
  const bool one_row_tile = int64_t(p.max_q_len) * (p.heads_q / p.heads_kv) <= detail::paged::kRows;
  PagedAttentionLaunch best{-1, 1};
  double best_us = 0;
  int32_t best_resident = 0;
  for (const VariantInfo& v : paged_attention_variants()) {
    if (v.dtype != p.dtype || v.tile_k != p.head_dim || (one_row_tile && !one_row_tile_kernel(v))) continue;
    const auto& ops = *detail::paged_variant(v.id)->ops;
    const int32_t resident = ops.ctas_per_sm(dev);
    const auto [splits, us] = detail::best_splits(p, v, ops, dev, int64_t(dev.sm_count) * resident,
                                                  detail::kHbmFraction * dev.memory_bytes_per_us);
    if (best.variant < 0 || beats(us, resident, best_us, best_resident)) {
      best = {v.id, splits}, best_us = us, best_resident = resident;
    }
  }
  if (best.variant < 0) {
    WAVETUNE_INVALID("no paged attention kernel for ", to_string(p.dtype), " head dim ", p.head_dim, " in this build");
  }
  return best;
}

int32_t paged_attention_resident_ctas(int32_t variant) {
  const auto* entry = detail::paged_variant(variant);
  if (!entry) WAVETUNE_INVALID("no paged attention kernel of id ", variant, " in this build");
  return entry->ops->ctas_per_sm(detail::current_device_info());
}

int64_t paged_attention_cluster_ctas(int32_t variant, int32_t cluster) {
  const auto* entry = detail::paged_variant(variant);
  if (!entry) WAVETUNE_INVALID("no paged attention kernel of id ", variant, " in this build");
  return entry->ops->cluster_ctas(detail::current_device_info(), cluster);
}

void paged_attention(const PagedAttentionProblem& p, const PagedAttentionLaunch& how, void* workspace,
                     size_t workspace_bytes, Stream stream) {
  std::string error = paged_attention_problem_error(p);
  if (error.empty()) error = paged_attention_launch_error(p, how);
  if (!error.empty()) WAVETUNE_INVALID(error);
  detail::require_workspace(paged_attention_workspace_bytes(p, how), workspace, workspace_bytes);
  if (const char* device_error = detail::current_device_error()) WAVETUNE_INVALID(device_error);
  detail::paged_variant(how.variant)->ops->run(p, how.splits, workspace, detail::current_device_info(), stream);
}

}  // namespace wavetune

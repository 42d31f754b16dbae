// The paged attention kernels (one per dtype and head dim), their choice by the wave model (paged_model.h) of a
// kernel and KV split count, and their launch (attention.h, paged_attention).
// wavetune: portable (also built as compute_80 PTX: CMakeLists.txt, WAVETUNE_PORTABLE_SOURCES)
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
// The wave model's constants (the paged_ entries of sm90_attention.toml's [model] table).
constexpr AttentionModel kModel{};
static_assert(paged::kMaxClusterSplits == kPagedAttentionMaxClusterSplits);

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
    // Thread-block clusters need compute capability 9.0: a GPU served as an older one merges with the kernel.
    if (cluster < 2 || cluster > kPagedAttentionMaxClusterSplits || dev.compute_capability < 90) return 0;
    ctas_per_sm(dev);  // the shared-memory limit raised
    std::call_once(done.at(dev.device), [&] {
      // Code run from its compute_80 PTX has no cluster merge: no clusters, the merge kernel runs.
      if (ptx_jit_forced()) return;
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
        orders_sequences(p, info(-1, ""), s, int64_t(grid.x) * grid.y * grid.z, slots, dev.sm_count,
                         dev.memory_bytes_per_us, kModel)) {
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
            kStepKeys, kHeadDim, 1, 1, TileScheduler::data_parallel, kSpecialized ? arch::sm90a : arch::sm80};
  }

  static VariantRegistry<PagedVariantOps>::Entry entry(int32_t id, const char* name) { return {info(id, name), &kOps}; }
};

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

Launch paged_choice(const PagedAttentionProblem& p) {
  const std::string error = paged_attention_problem_error(p);
  if (!error.empty()) WAVETUNE_INVALID(error);
  return paged_model_choice(p);
}

Launch paged_model_choice(const PagedAttentionProblem& p) {
  const DeviceInfo& dev = current_device_info();
  int32_t best_id = -1, best_split_count = 1;
  double best_us = 0;
  int32_t best_resident = 0;
  for (const VariantInfo& v : paged_attention_variants()) {
    if (v.dtype != p.dtype || v.tile_k != p.head_dim || !runs_on(v, dev.compute_capability) || !weighs_kernel(p, v)) {
      continue;
    }
    const auto& ops = *paged_variant(v.id)->ops;
    const int32_t resident = ops.ctas_per_sm(dev);
    const auto [splits, us] =
        best_splits(p, v, dev.sm_count, int64_t(dev.sm_count) * resident, dev.memory_bytes_per_us,
                    [&](int32_t n) { return ops.cluster_ctas(dev, n); }, kModel);
    if (best_id < 0 || beats(us, resident, best_us, best_resident, kModel)) {
      best_id = v.id, best_split_count = splits, best_us = us, best_resident = resident;
    }
  }
  if (best_id < 0) {
    WAVETUNE_INVALID("no paged attention kernel for ", to_string(p.dtype), " head dim ", p.head_dim, " in this build");
  }
  return kv_split_launch(best_id, best_split_count);
}

}  // namespace detail

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

void paged_attention(const PagedAttentionProblem& p, const Launch& how, void* workspace, size_t workspace_bytes,
                     Stream stream) {
  std::string error = paged_attention_problem_error(p);
  if (error.empty()) error = paged_attention_launch_error(p, how);
  if (!error.empty()) WAVETUNE_INVALID(error);
  detail::require_workspace(paged_attention_workspace_bytes(p, how), workspace, workspace_bytes);
  if (const char* device_error = detail::current_device_error()) WAVETUNE_INVALID(device_error);
  detail::paged_variant(how.variant)->ops->run(p, how.micro.splits, workspace, detail::current_device_info(), stream);
}

}  // namespace wavetune

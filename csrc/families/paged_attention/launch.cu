// The paged attention kernels (one per dtype and head dim), the wave model that picks their KV splits, and
// their launch (paged_attention.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <type_traits>
#include <vector>

#include "paged_ops.h"
#include "sm90_paged_decode.cuh"
#include "wavetune/errors.h"
#include "wavetune/kernels.h"

namespace wavetune {
namespace detail {
namespace {

// The catalog: (dtype, head dim, name).
#define WAVETUNE_PAGED_VARIANTS(X)        \
  X(bf16, 64, "paged_bf16_d64")           \
  X(bf16, 128, "paged_bf16_d128")         \
  X(bf16, 256, "paged_bf16_d256")         \
  X(fp16, 64, "paged_fp16_d64")           \
  X(fp16, 128, "paged_fp16_d128")         \
  X(fp16, 256, "paged_fp16_d256")

cudaError_t launch_kernel(const void* kernel, dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                          void** args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid, config.blockDim = block, config.dynamicSmemBytes = shared, config.stream = stream;
  cudaLaunchAttribute pdl;
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &pdl;
  config.numAttrs = programmatic_launch() ? 1 : 0;
  return cudaLaunchKernelExC(&config, kernel, args);
}

template <DType kDType, int kHeadDim>
struct PagedVariant {
  using T = std::conditional_t<kDType == DType::bf16, __nv_bfloat16, __half>;
  static constexpr size_t kShared = paged::shared_bytes<kHeadDim>();

  // The shared-memory limit raised and the occupancy read once per device.
  static int32_t ctas_per_sm(const DeviceInfo& dev) {
    static std::array<std::once_flag, kMaxDevices> done;
    static std::array<int32_t, kMaxDevices> resident{};
    std::call_once(done.at(dev.device), [&] {
      const void* kernel = reinterpret_cast<const void*>(paged::paged_decode_kernel<T, kHeadDim>);
      int count = 0;
      if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kShared)) != cudaSuccess ||
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&count, kernel, paged::threads<kHeadDim>(), kShared) != cudaSuccess) {
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

  static void run(const PagedAttentionProblem& p, int32_t requested, void* workspace, const DeviceInfo& dev,
                  Stream stream) {
    ctas_per_sm(dev);
    const PagedSplits s = paged_splits(p, requested);
    const int32_t group = p.heads_q / p.heads_kv;
    paged::Params params{p.q, p.q_batch_stride, p.q_head_stride, p.k_cache, p.v_cache, p.page_stride, p.row_stride,
                         p.head_stride, p.page_size, p.block_table, p.table_stride, p.seq_lens, p.max_seq_len,
                         p.heads_kv, group, (group + paged::kRows - 1) / paged::kRows, s.splits, s.split_keys,
                         p.scale * float(M_LOG2E), p.out, p.out_batch_stride, p.out_head_stride, nullptr, nullptr};
    if (s.splits > 1) {
      const size_t rows = size_t(p.batch) * p.heads_q * s.splits;
      params.partial = static_cast<float*>(workspace);
      params.lse = params.partial + rows * kHeadDim;
    }
    void* args[] = {&params};
    const dim3 grid(unsigned(params.head_blocks * s.splits), unsigned(p.heads_kv), unsigned(p.batch));
    cudaError_t status = launch_kernel(reinterpret_cast<const void*>(paged::paged_decode_kernel<T, kHeadDim>), grid,
                                       dim3(paged::threads<kHeadDim>()), kShared, stream, args);
    if (status == cudaSuccess && s.splits > 1) {
      int head_dim = kHeadDim;
      void* merge_args[] = {&params, &head_dim};
      status = launch_kernel(reinterpret_cast<const void*>(paged::merge_splits_kernel<T>),
                             dim3(unsigned(p.batch * p.heads_q)), dim3(kHeadDim), s.splits * sizeof(float), stream,
                             merge_args);
    }
    if (status != cudaSuccess) {
      cudaGetLastError();
      WAVETUNE_FAIL("paged attention launch failed: ", cudaGetErrorString(status), " (batch=", p.batch,
                    " heads=", p.heads_q, "/", p.heads_kv, " max_seq_len=", p.max_seq_len, ", ", s.splits, " splits)");
    }
  }

  static constexpr PagedVariantOps kOps{&ctas_per_sm, &run};

  static VariantRegistry<PagedVariantOps>::Entry entry(int32_t id, const char* name) {
    return {{id, name, kDType, BLayout::col, false, Schedule::decode, paged::kRows, paged::cta_step_keys<kHeadDim>(), kHeadDim, 1,
             1, TileScheduler::data_parallel},
            &kOps};
  }
};

// NOTES: the wave model of a launch, without a table. G = CTAs (sequences x KV heads x query-head blocks x
// splits), L = 64-key steps per CTA. CTAs run in waves of `slots` (SMs x resident CTAs); a wave lasts
// kWaveUs plus L steps, each moving its K and V bytes at the slower of the CTA's own rate (its cp.async
// pipeline: ~2 tiles per warp in flight) and its share of HBM. Splits add the merge: a launch and the
// partial outputs written and read once.
constexpr double kHbmBytesPerUs = 3.0e6;
constexpr double kCtaBytesPerUs = 5.0e4;
constexpr double kWaveUs = 1.5;
constexpr double kMergeUs = 2.0;

double predicted_us(const PagedAttentionProblem& p, const PagedSplits& s, int64_t slots) {
  const int64_t head_blocks = (p.heads_q / p.heads_kv + paged::kRows - 1) / paged::kRows;
  const int64_t ctas = int64_t(p.batch) * p.heads_kv * head_blocks * s.splits;
  const double bytes_per_cta = 2.0 * s.split_keys * p.head_dim * 2;
  double us = 0;
  for (int64_t left = ctas; left > 0; left -= slots) {
    const double running = double(std::min(left, slots));
    us += kWaveUs + bytes_per_cta * std::max(running / kHbmBytesPerUs, 1.0 / kCtaBytesPerUs);
  }
  if (s.splits > 1) us += kMergeUs + 2.0 * double(p.batch) * p.heads_q * s.splits * p.head_dim * 4 / kHbmBytesPerUs;
  return us;
}

}  // namespace

std::vector<VariantRegistry<PagedVariantOps>::Entry> paged_variant_entries() {
  std::vector<VariantRegistry<PagedVariantOps>::Entry> out;
#define WAVETUNE_PAGED_ENTRY(DTYPE, HEAD_DIM, NAME) \
  out.push_back(PagedVariant<DType::DTYPE, HEAD_DIM>::entry(int32_t(out.size()), NAME));
  WAVETUNE_PAGED_VARIANTS(WAVETUNE_PAGED_ENTRY)
#undef WAVETUNE_PAGED_ENTRY
  return out;
}

}  // namespace detail

int32_t paged_attention_splits(const PagedAttentionProblem& p) {
  const std::string error = paged_attention_problem_error(p);
  if (!error.empty()) WAVETUNE_INVALID(error);
  const auto* variant = detail::paged_variant_for(p);
  if (!variant) WAVETUNE_INVALID("no paged attention kernel for ", to_string(p.dtype), " head dim ", p.head_dim, " in this build");
  const detail::DeviceInfo& dev = detail::current_device_info();
  const int64_t slots = int64_t(dev.sm_count) * variant->ops->ctas_per_sm(dev);
  const int32_t step_keys = variant->info.tile_n;
  const int32_t steps = (p.max_seq_len + step_keys - 1) / step_keys;
  int32_t best = 1;
  double best_us = detail::predicted_us(p, detail::paged_splits(p, 1), slots);
  for (int32_t splits = 2; splits <= std::min(steps, kPagedAttentionMaxSplits); ++splits) {
    const detail::PagedSplits s = detail::paged_splits(p, splits);
    if (s.splits != splits) continue;  // the same keys per split as a smaller count
    const double us = detail::predicted_us(p, s, slots);
    if (us < best_us) best = splits, best_us = us;
  }
  return best;
}

void paged_attention(const PagedAttentionProblem& p, int32_t splits, void* workspace, size_t workspace_bytes,
                     Stream stream) {
  const std::string error = paged_attention_problem_error(p);
  if (!error.empty()) WAVETUNE_INVALID(error);
  if (splits < 1 || splits > kPagedAttentionMaxSplits) {
    WAVETUNE_INVALID("splits must be in [1, ", kPagedAttentionMaxSplits, "], got ", splits);
  }
  const auto* variant = detail::paged_variant_for(p);
  if (!variant) WAVETUNE_INVALID("no paged attention kernel for ", to_string(p.dtype), " head dim ", p.head_dim, " in this build");
  detail::require_workspace(paged_attention_workspace_bytes(p, splits), workspace, workspace_bytes);
  if (const char* device_error = detail::current_device_error()) WAVETUNE_INVALID(device_error);
  variant->ops->run(p, splits, workspace, detail::current_device_info(), stream);
}

}  // namespace wavetune

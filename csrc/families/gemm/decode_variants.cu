// The decode GEMM's variants (sm90_decode_gemm.cuh): one per dtype, token tile, warp layout and schedule,
// for column-major B (an nn.Linear weight). Each compiles in seconds, so every build has all of them;
// they are dense-table candidates beside the CUTLASS variants and cuBLAS (docs/kernels.md, "Decode GEMM").
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "sm90_decode_gemm.cuh"
#include "variant_ops.h"
#include "wavetune/errors.h"
#include "wavetune/kernels.h"
#include "wavetune/mapping.h"

namespace wavetune::detail {
namespace {

// The splits the heuristic launch aims for: enough CTAs to keep each SM streaming (several per SM
// resident), no more K splits than leave each worker a few loop steps.
constexpr int64_t kTargetCtasPerSm = 4;
constexpr int64_t kMinStepsPerSplit = 2;

// CTAs of `kernel` (kThreads each) resident per SM on the current device, read once per device.
template <class K>
int resident_ctas_per_sm(int device, const void* kernel) {
  static std::array<std::once_flag, kMaxDevices> done;
  static std::array<int, kMaxDevices> ctas{};
  std::call_once(done.at(device), [&] {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas[device], kernel, K::kThreads, 0) != cudaSuccess) {
      cudaGetLastError();
      ctas[device] = 1;
    }
  });
  return std::max(ctas[device], 1);
}

template <DType kDType, int kTokens, int kRowTiles, int kWarpsN, int kWarpsK, int kUnroll, TileScheduler kScheduler>
struct DecodeVariant {
  using Element = std::conditional_t<kDType == DType::bf16, __nv_bfloat16, __half>;
  using K = decode::Kernel<Element, kTokens, kRowTiles, kWarpsN, kWarpsK, kUnroll>;
  static constexpr bool kPersistent = kScheduler == TileScheduler::persistent;

  static TileShape shape() { return {K::kTileRows, kTokens, K::kTileK, 1, 1, true}; }

  static int32_t splits(const GemmProblem& p, const MicroParams& micro, const DeviceInfo& dev) {
    if (micro.decomposition == Decomposition::split_k) return micro.splits;
    if (kPersistent || micro.decomposition != Decomposition::heuristic) return 1;
    const int64_t tiles = cluster_padded_tiles(shape(), p.n, p.m);
    const int64_t steps = wavetune::detail::ceil_div(p.k, K::kTileK);
    int32_t s = 1;
    while (s < decode::kMaxSplits && tiles * s * 2 <= kTargetCtasPerSm * dev.sm_count &&
           steps >= kMinStepsPerSplit * s * 2) {
      s *= 2;
    }
    return s;
  }

  static std::string why_not(const GemmProblem& p, const MicroParams& micro, const DeviceInfo& dev) {
    if (micro.decomposition == Decomposition::stream_k) {
      return "the decode kernel runs data-parallel or split-K (its splits are one cluster), not stream-K";
    }
    const int32_t s = splits(p, micro, dev);
    if (s > decode::kMaxSplits) {
      return "the decode kernel sums its K splits within one cluster: at most " +
             std::to_string(decode::kMaxSplits) + " splits, got " + std::to_string(s);
    }
    if (p.lda % 8 != 0 || p.ldb % 8 != 0) return "the decode kernel loads A and B in 16-byte vectors";
    return {};
  }

  static size_t workspace_bytes(const GemmProblem&, const MicroParams&, const DeviceInfo&) { return 0; }

  static void run(const GemmProblem& p, const MicroParams& micro, const DeviceInfo& dev, void*, size_t,
                  Stream stream) {
    const std::string error = why_not(p, micro, dev);
    if (!error.empty()) WAVETUNE_INVALID(error, " (M=", p.m, " N=", p.n, " K=", p.k, ")");
    const int32_t s = splits(p, micro, dev);
    const int total_chunks = int(wavetune::detail::ceil_div(p.k, decode::kChunk));
    // Whole loop steps per worker, so that only the last worker has a partial step.
    const int per_worker =
        int(wavetune::detail::round_up(wavetune::detail::ceil_div(total_chunks, s * kWarpsK), kUnroll));
    const decode::Params params{p.a, p.b, p.d, p.bias, p.lda, p.ldb, p.ldd, p.m, p.n, p.k, per_worker};
    const int64_t row_tiles = wavetune::detail::ceil_div(p.n, K::kTileRows);
    const int64_t token_tiles = wavetune::detail::ceil_div(p.m, kTokens);

    cudaLaunchConfig_t config{};
    config.blockDim = dim3(K::kThreads);
    config.stream = stream;
    cudaLaunchAttribute attributes[2];
    attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[0].val.programmaticStreamSerializationAllowed = 1;
    attributes[1].id = cudaLaunchAttributeClusterDimension;
    attributes[1].val.clusterDim.x = 1;
    attributes[1].val.clusterDim.y = 1;
    attributes[1].val.clusterDim.z = unsigned(s);
    config.attrs = programmatic_launch() ? attributes : attributes + 1;
    config.numAttrs = (programmatic_launch() ? 1 : 0) + (kPersistent ? 0 : 1);
    cudaError_t status;
    if constexpr (kPersistent) {
      void (*const kernel)(decode::Params) = decode::persistent_decode_gemm_kernel<K>;
      const int64_t resident = int64_t(resident_ctas_per_sm<K>(dev.device, reinterpret_cast<const void*>(kernel))) *
                               dev.sm_count;
      config.gridDim = dim3(unsigned(std::min(row_tiles * token_tiles, resident)));
      status = cudaLaunchKernelEx(&config, kernel, params);
    } else {
      config.gridDim = dim3(unsigned(row_tiles), unsigned(token_tiles), unsigned(s));
      status = cudaLaunchKernelEx(&config, decode::decode_gemm_kernel<K>, params);
    }
    if (status != cudaSuccess) {
      cudaGetLastError();
      WAVETUNE_FAIL("decode kernel launch failed: ", cudaGetErrorString(status), " (M=", p.m, " N=", p.n, " K=",
                    p.k, ", ", s, " splits)");
    }
  }

  static constexpr VariantOps kOps{&why_not, &workspace_bytes, &run};

  static VariantRegistry<VariantOps>::Entry entry(int32_t id, const char* name) {
    return {{id, name, kDType, BLayout::col, true, Schedule::decode, K::kTileRows, kTokens, K::kTileK, 1, 1,
             kScheduler},
            &kOps};
  }
};

// The catalog, as data: (dtype, tokens per CTA, 16-row tiles per warp, warps along N, warps along K,
// K chunks per loop step, schedule). 4 warps per CTA, so that several CTAs share an SM; 16-row CTAs that
// split K over their warps for narrow layers; more rows per warp for wider token tiles
// (sm90_decode_gemm.cuh says why), with fewer chunks per step to stay within the registers; persistent
// CTAs, which stream one tile after another, for wide layers. Ids are positions here: append to keep them
// stable.
#define WAVETUNE_DECODE_VARIANTS(X)                                                         \
  X(bf16, 8, 1, 4, 1, 4, data_parallel, "bf16_bcol_decode_64x8_4x1")                        \
  X(bf16, 8, 2, 4, 1, 4, data_parallel, "bf16_bcol_decode_128x8_4x1")                       \
  X(bf16, 8, 1, 1, 4, 4, data_parallel, "bf16_bcol_decode_16x8_1x4")                        \
  X(bf16, 16, 1, 4, 1, 4, data_parallel, "bf16_bcol_decode_64x16_4x1")                      \
  X(bf16, 16, 2, 4, 1, 4, data_parallel, "bf16_bcol_decode_128x16_4x1")                     \
  X(bf16, 16, 1, 1, 4, 4, data_parallel, "bf16_bcol_decode_16x16_1x4")                      \
  X(bf16, 32, 2, 4, 1, 2, data_parallel, "bf16_bcol_decode_128x32_4x1")                     \
  X(bf16, 64, 2, 4, 1, 2, data_parallel, "bf16_bcol_decode_128x64_4x1")                     \
  X(fp16, 8, 1, 4, 1, 4, data_parallel, "fp16_bcol_decode_64x8_4x1")                        \
  X(fp16, 8, 2, 4, 1, 4, data_parallel, "fp16_bcol_decode_128x8_4x1")                       \
  X(fp16, 8, 1, 1, 4, 4, data_parallel, "fp16_bcol_decode_16x8_1x4")                        \
  X(fp16, 16, 1, 4, 1, 4, data_parallel, "fp16_bcol_decode_64x16_4x1")                      \
  X(fp16, 16, 2, 4, 1, 4, data_parallel, "fp16_bcol_decode_128x16_4x1")                     \
  X(fp16, 16, 1, 1, 4, 4, data_parallel, "fp16_bcol_decode_16x16_1x4")                      \
  X(fp16, 32, 2, 4, 1, 2, data_parallel, "fp16_bcol_decode_128x32_4x1")                     \
  X(fp16, 64, 2, 4, 1, 2, data_parallel, "fp16_bcol_decode_128x64_4x1")                     \
  X(bf16, 8, 1, 4, 1, 4, persistent, "bf16_bcol_decode_64x8_4x1_persistent")                \
  X(bf16, 8, 2, 4, 1, 4, persistent, "bf16_bcol_decode_128x8_4x1_persistent")               \
  X(bf16, 16, 2, 4, 1, 4, persistent, "bf16_bcol_decode_128x16_4x1_persistent")             \
  X(fp16, 8, 1, 4, 1, 4, persistent, "fp16_bcol_decode_64x8_4x1_persistent")                \
  X(fp16, 8, 2, 4, 1, 4, persistent, "fp16_bcol_decode_128x8_4x1_persistent")               \
  X(fp16, 16, 2, 4, 1, 4, persistent, "fp16_bcol_decode_128x16_4x1_persistent")

}  // namespace

std::vector<VariantRegistry<VariantOps>::Entry> decode_variants(int32_t first_id) {
  std::vector<VariantRegistry<VariantOps>::Entry> out;
#define WAVETUNE_DECODE_ENTRY(DT, TOKENS, ROW_TILES, WN, WK, UNROLL, SCHEDULER, NAME)                       \
  out.push_back(DecodeVariant<DType::DT, TOKENS, ROW_TILES, WN, WK, UNROLL, TileScheduler::SCHEDULER>::entry( \
      first_id + int32_t(out.size()), NAME));
  WAVETUNE_DECODE_VARIANTS(WAVETUNE_DECODE_ENTRY)
#undef WAVETUNE_DECODE_ENTRY
  return out;
}

}  // namespace wavetune::detail

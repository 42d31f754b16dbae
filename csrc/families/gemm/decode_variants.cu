// The decode GEMM's variants (sm90_decode_gemm.cuh): one per dtype, token tile, warp layout and schedule,
// for column-major B (an nn.Linear weight), each with every epilogue (types.h, Epilogue). Each compiles in seconds, so every build has all of them;
// they are dense-table candidates beside the CUTLASS variants and cuBLAS (docs/kernels.md, "Decode GEMM").
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "builtin_candidates.h"
#include "sm90_decode_gemm.cuh"
#include "variant_ops.h"
#include "wavetune/errors.h"
#include "wavetune/kernels.h"
#include "wavetune/mapping.h"

namespace wavetune::detail {
namespace {

template <DType kDType, int kTokens, int kRowTiles, int kWarpsN, int kWarpsK, int kUnroll, TileScheduler kScheduler>
struct DecodeVariant {
  using Element = std::conditional_t<kDType == DType::bf16, __nv_bfloat16, __half>;
  using K = decode::Kernel<Element, Element, kTokens, kRowTiles, kWarpsN, kWarpsK, kUnroll>;
  static constexpr bool kPersistent = kScheduler == TileScheduler::persistent;

  static TileShape shape() { return {K::kTileRows, kTokens, K::kTileK, 1, 1, true}; }

  static int32_t splits(const GemmProblem& p, const MicroParams& micro, const DeviceInfo& dev) {
    if (micro.decomposition == Decomposition::split_k) return micro.splits;
    if (kPersistent || micro.decomposition != Decomposition::heuristic) return 1;
    return decode::heuristic_splits<K>(p.m, p.n, p.k, dev.sm_count);
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
    decode::Params params{p.a, p.b, p.d, p.bias, p.lda, p.ldb, p.ldd, p.m, p.n, p.k, 0};
    params.epilogue = p.epilogue, params.residual = p.residual, params.ldr = p.ldr;
    const cudaError_t status =
        decode::launch<K, kPersistent>(params, s, dev.device, dev.sm_count, programmatic_launch(), stream);
    if (status != cudaSuccess) {
      cudaGetLastError();
      WAVETUNE_FAIL("decode kernel launch failed: ", cudaGetErrorString(status), " (M=", p.m, " N=", p.n, " K=",
                    p.k, ", ", s, " splits)");
    }
  }

  static constexpr VariantOps kOps{&why_not, &workspace_bytes, &run};

  static VariantRegistry<VariantOps>::Entry entry(int32_t id, const char* name) {
    return {{id, name, kDType, BLayout::col, true, Schedule::decode, K::kTileRows, kTokens, K::kTileK, 1, 1,
             kScheduler, arch::sm90a},
            &kOps};
  }
};

}  // namespace

std::vector<VariantRegistry<VariantOps>::Entry> decode_variants() {
  std::vector<VariantRegistry<VariantOps>::Entry> out;
#define WAVETUNE_DECODE_ENTRY(DT, TOKENS, ROW_TILES, WN, WK, UNROLL, SCHEDULER, NAME)                       \
  out.push_back(DecodeVariant<DType::DT, TOKENS, ROW_TILES, WN, WK, UNROLL, TileScheduler::SCHEDULER>::entry( \
      kDecodeVariantIds + int32_t(out.size()), NAME));
  WAVETUNE_DECODE_VARIANTS(WAVETUNE_DECODE_ENTRY)
#undef WAVETUNE_DECODE_ENTRY
  return out;
}

}  // namespace wavetune::detail

// The template behind the dense GEMM family's Ampere-style variants (cutlass_configs/sm90_gemm.toml, groups with
// arch = "sm80"): a CUTLASS 2.x multistage GEMM D = A @ B + bias (mma.sync with fp32 accumulation, a cp.async
// pipeline of kStages tiles, D in the input type), one CTA per output tile and K split. It runs on every GPU
// since Ampere: the build compiles it for its own target and to compute_80 PTX.
// NOTES: CUTLASS 2.x rather than CUTLASS 3's sm80 collectives: its GemmUniversal carries the serial split-K and
// the threadblock swizzle this family's run-time parameters need, and it is the kernel library NVIDIA tunes for
// Ampere and Ada (cuBLAS's own Ampere kernels are of this shape).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "cutlass/cutlass.h"
#include "cutlass/device_kernel.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/device/gemm_universal.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"
#include "residency.cuh"
#include "variant_ops.h"
#include "wavetune/errors.h"

namespace wavetune::detail {

template <DType kDType, BLayout kBLayout, int kTileM, int kTileN, int kTileK, int kStages, int kWarpsM, int kWarpsN>
struct Sm80Gemm {
  using Element = std::conditional_t<kDType == DType::bf16, cutlass::bfloat16_t, cutlass::half_t>;
  using LayoutB =
      std::conditional_t<kBLayout == BLayout::col, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  // 16-byte accesses (cp.async, the epilogue's stores): the checks in launch.cu keep K, N and the leading dimensions
  // multiples of 8 elements.
  static constexpr int kAlignment = 128 / cutlass::sizeof_bits<Element>::value;
  // NOTES: the bias is the epilogue's source C, read with a row stride of 0 (every row of D the same vector) and
  // added in fp32 before the one rounding to the output type (beta 1; beta 0 reads no C).
  using Epilogue = cutlass::epilogue::thread::LinearCombination<Element, kAlignment, float, float>;
  // NOTES: the swizzle type fixes only a default: its log2 tile count is a kernel parameter, set per launch from the
  // run-time max_swizzle (launch below), so one instantiation serves every swizzle.
  using Swizzle = cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>;
  using Device = cutlass::gemm::device::GemmUniversal<
      Element, cutlass::layout::RowMajor, Element, LayoutB, Element, cutlass::layout::RowMajor, float,
      cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80, cutlass::gemm::GemmShape<kTileM, kTileN, kTileK>,
      cutlass::gemm::GemmShape<kTileM / kWarpsM, kTileN / kWarpsN, kTileK>, cutlass::gemm::GemmShape<16, 8, 16>,
      Epilogue, Swizzle, kStages, kAlignment, kAlignment>;
  using Kernel = typename Device::GemmKernel;
  using Arguments = typename Device::Arguments;

  static const Residency& resident(const DeviceInfo& dev) {
    return residency<Kernel, cutlass::Kernel2<Kernel>>(dev.device);
  }

  // NOTES: split-K is serial (GemmUniversal's kGemm mode with batch_count = splits): the K splits of a tile run as
  // CTAs of one launch and add into D in turn, ordered by a semaphore per tile in the workspace, which the launch
  // zeroes on the stream. That is deterministic, needs one int per tile instead of an fp32 partial per split, and
  // one launch instead of a second reduction kernel; the price is that the running sum is rounded to the output
  // type between splits (splits - 1 extra roundings), so a split count stays small where precision matters.
  static Arguments arguments(const GemmProblem& p, const MicroParams& micro) {
    const int splits = micro.decomposition == Decomposition::split_k ? micro.splits : 1;
    typename Epilogue::Params epilogue(1.0f, p.bias ? 1.0f : 0.0f);
    return Arguments(cutlass::gemm::GemmUniversalMode::kGemm, {int(p.m), int(p.n), int(p.k)}, splits, epilogue, p.a,
                     p.b, p.bias, p.d, 0, 0, 0, 0, p.lda, p.ldb, 0, p.ldd);
  }

  // The launch's kernel parameters and grid, `max_swizzle` tiles along N per swizzle group.
  struct Plan {
    typename Kernel::Params params;
    dim3 grid;
  };

  static Plan plan(const Arguments& args, const MicroParams& micro, const DeviceInfo& dev, int ctas_per_sm) {
    Plan out{typename Kernel::Params(args, dev.sm_count, ctas_per_sm), {}};
    int log_tile = 0;
    while ((1 << log_tile) < micro.max_swizzle) ++log_tile;
    out.params.swizzle_log_tile = log_tile;
    const cutlass::gemm::GemmCoord tiles = out.params.grid_tiled_shape;
    out.grid = dim3(unsigned(tiles.m()) << log_tile, unsigned((tiles.n() + (1 << log_tile) - 1) >> log_tile),
                    unsigned(tiles.k()));
    return out;
  }

  // Empty with `*out` planned when the launch can run on the device, else why not.
  static std::string prepare(const GemmProblem& p, const MicroParams& micro, const DeviceInfo& dev, Plan* out) {
    const Residency& r = resident(dev);
    if (!r.error.empty()) return r.error;
    const Arguments args = arguments(p, micro);
    const cutlass::Status status = Kernel::can_implement(args);
    if (status != cutlass::Status::kSuccess) {
      return std::string("CUTLASS cannot implement it: ") + cutlassGetStatusString(status);
    }
    *out = plan(args, micro, dev, r.ctas_per_sm);
    const dim3 grid = out->grid;
    if (uint64_t(grid.x) > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
      return "its grid of " + std::to_string(grid.x) + " x " + std::to_string(grid.y) + " x " +
             std::to_string(grid.z) + " CTAs exceeds CUDA's limits (fewer splits or a larger swizzle)";
    }
    return {};
  }

  static std::string why_not(const GemmProblem& p, const MicroParams& micro, const DeviceInfo& dev) {
    Plan unused;
    return prepare(p, micro, dev, &unused);
  }

  static size_t workspace_bytes(const GemmProblem& p, const MicroParams& micro, const DeviceInfo& dev) {
    return plan(arguments(p, micro), micro, dev, 1).params.get_workspace_size();
  }

  static int ctas_per_sm(const DeviceInfo& dev) { return resident(dev).ctas_per_sm; }

  static void run(const GemmProblem& p, const MicroParams& micro, const DeviceInfo& dev, void* workspace,
                  size_t workspace_bytes, Stream stream) {
    Plan launch;
    const std::string error = prepare(p, micro, dev, &launch);
    if (!error.empty()) WAVETUNE_INVALID(error, " (", describe(p), ")");
    require_workspace(launch.params.get_workspace_size(), workspace, workspace_bytes);
    if (launch.params.init_workspace(workspace, stream) != cutlass::Status::kSuccess) {
      WAVETUNE_FAIL("zeroing the split-K semaphores failed: ", cudaGetErrorString(cudaGetLastError()), " (",
                    describe(p), ")");
    }
    constexpr int bytes = int(sizeof(typename Kernel::SharedStorage));
    cutlass::Kernel2<Kernel><<<launch.grid, Kernel::kThreadCount, bytes, stream>>>(launch.params);
    const cudaError_t error_launch = cudaGetLastError();
    if (error_launch != cudaSuccess) {
      WAVETUNE_FAIL("kernel launch failed: ", cudaGetErrorString(error_launch), " (", describe(p), ")");
    }
  }

  static constexpr VariantOps ops() { return {&why_not, &workspace_bytes, &run, &ctas_per_sm}; }
};

}  // namespace wavetune::detail

// Defines wavetune::detail::variant_<NAME>, which the registry lists. The Hopper axes (swap-AB, schedule,
// cluster, tile scheduler) are fixed for these variants: false, multistage, 1x1, data_parallel.
#define WAVETUNE_SM80_INSTANTIATE_VARIANT(NAME, DTYPE, B_LAYOUT, SWAP_AB, SCHEDULE, TM, TN, TK, CM, CN, SCHEDULER, \
                                          STAGES, WARPS_M, WARPS_N)                                                \
  namespace wavetune::detail {                                                                                   \
  static_assert(!SWAP_AB && Schedule::SCHEDULE == Schedule::multistage && CM == 1 && CN == 1 &&                  \
                    TileScheduler::SCHEDULER == TileScheduler::data_parallel,                                     \
                "an sm80 variant is a multistage kernel without swap-AB or clusters");                           \
  extern const VariantOps variant_##NAME;                                                                        \
  const VariantOps variant_##NAME =                                                                              \
      Sm80Gemm<DType::DTYPE, BLayout::B_LAYOUT, TM, TN, TK, STAGES, WARPS_M, WARPS_N>::ops();                     \
  }

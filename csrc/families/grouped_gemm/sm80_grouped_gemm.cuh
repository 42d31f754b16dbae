// The template behind the grouped family's Ampere-style variants (cutlass_configs/sm90_grouped_gemm.toml, groups
// with arch = "sm80"): CUTLASS 2.x's grouped GEMM (mma.sync with fp32 accumulation, a cp.async pipeline of
// kStages tiles) running out[rows of e] = x[rows of e] @ w[e].T for every expert e in one launch, x, w and out
// in one 16-bit type (scales mode none: these GPUs' tensor cores take no e4m3 before sm89). It runs on every GPU
// since Ampere: the build compiles it for its own target and to compute_80 PTX.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cutlass/cutlass.h"
#include "cutlass/device_kernel.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/kernel/default_gemm_grouped.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"
#include "grouped_experts.cuh"
#include "grouped_ops.h"
#include "residency.cuh"
#include "wavetune/errors.h"

namespace wavetune::detail {

template <DType kDType, int kTileM, int kTileN, int kTileK, int kStages, int kWarpsM, int kWarpsN>
struct Sm80GroupedGemm {
  using Input = Sixteen<kDType>;
  using Out = Input;
  // 16-byte accesses (cp.async, the epilogue's stores): the problem checks keep K and N multiples of 8 elements,
  // so every expert's rows start 16-byte aligned too.
  static constexpr int kAlignment = 128 / cutlass::sizeof_bits<Input>::value;
  // out = acc, rounded once to the output type; no source operand is read.
  using Epilogue = cutlass::epilogue::thread::LinearCombination<Out, kAlignment, float, float,
                                                                cutlass::epilogue::thread::ScaleType::Nothing>;
  // NOTES: kDeviceOnly: each CTA finds its tiles by scanning the experts' problem sizes on the GPU (a warp-wide
  // prefix sum over 32 experts at a time), where kHostPrecompute would need them on the host. An expert without
  // rows has no tiles. Tiles are visited in row-major order within an expert, so the swizzle is the identity.
  using Kernel = typename cutlass::gemm::kernel::DefaultGemmGrouped<
      Input, cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone, kAlignment,  // x[rows of e] [rows, K]
      Input, cutlass::layout::ColumnMajor, cutlass::ComplexTransform::kNone, kAlignment,  // w[e] [N, K] as [K, N]
      Out, cutlass::layout::RowMajor, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      cutlass::gemm::GemmShape<kTileM, kTileN, kTileK>,
      cutlass::gemm::GemmShape<kTileM / kWarpsM, kTileN / kWarpsN, kTileK>, cutlass::gemm::GemmShape<16, 8, 16>,
      Epilogue, cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<1>, kStages,
      cutlass::gemm::kernel::GroupScheduleMode::kDeviceOnly>::GemmKernel;
  using Arguments = typename Kernel::Arguments;

  // The per-expert arguments CUTLASS reads, written on the GPU by prepare_experts (grouped_experts.cuh). Its
  // pointer arrays are not const, though it only reads x and w.
  struct ExpertArrays {
    cutlass::gemm::GemmCoord* shapes;
    Input** a;
    Input** b;
    Out** d;
    int64_t* lda;
    int64_t* ldb;
    int64_t* ldd;
  };

  // Where each expert array starts in the workspace; CUTLASS needs no workspace of its own in kDeviceOnly mode.
  struct WorkspaceLayout : WorkspaceParts {
    size_t shapes, a, b, d, lda, ldb, ldd;

    explicit WorkspaceLayout(int32_t experts) {
      const size_t e = size_t(experts);
      shapes = take(e * sizeof(cutlass::gemm::GemmCoord));
      a = take(e * sizeof(Input*));
      b = take(e * sizeof(Input*));
      d = take(e * sizeof(Out*));
      lda = take(e * sizeof(int64_t));
      ldb = take(e * sizeof(int64_t));
      ldd = take(e * sizeof(int64_t));
    }
    ExpertArrays arrays(void* workspace) const {
      return {workspace_part<cutlass::gemm::GemmCoord>(workspace, shapes), workspace_part<Input*>(workspace, a),
              workspace_part<Input*>(workspace, b),   workspace_part<Out*>(workspace, d),
              workspace_part<int64_t>(workspace, lda), workspace_part<int64_t>(workspace, ldb),
              workspace_part<int64_t>(workspace, ldd)};
    }
  };

  static size_t workspace_bytes(int32_t experts, const DeviceInfo&) { return WorkspaceLayout(experts).total; }

  // Expert e's problem size, operand pointers and leading dimensions, as prepare_experts hands it over.
  __device__ static void write_expert(const GroupedGemmProblem& p, int e, const Expert<Input, Out>& expert,
                                      const ExpertArrays& arrays) {
    arrays.shapes[e] = cutlass::gemm::GemmCoord(expert.rows, p.n, p.k);
    arrays.a[e] = const_cast<Input*>(expert.x);
    arrays.b[e] = const_cast<Input*>(expert.w);
    arrays.d[e] = expert.out;
    arrays.lda[e] = p.k;
    arrays.ldb[e] = p.k;
    arrays.ldd[e] = p.n;
  }

  static const Residency& resident(const DeviceInfo& dev) {
    return residency<Kernel, cutlass::Kernel<Kernel>>(dev.device);
  }

  static int ctas_per_sm(const DeviceInfo& dev) { return resident(dev).ctas_per_sm; }

  // NOTES: the grid is the CTAs resident at once (SMs x CTAs per SM), each visiting every grid-th tile of all
  // experts, as CUTLASS's GemmGrouped::sufficient sizes it without the host's tile count (the rows per expert
  // are on the GPU). CTAs left without a tile stop after scanning the problem sizes.
  static void run(const GroupedGemmProblem& p, void* workspace, const DeviceInfo& dev, Stream stream) {
    const Residency& r = resident(dev);
    if (!r.error.empty()) WAVETUNE_INVALID(r.error, " (", describe(p), ")");
    const ExpertArrays arrays = WorkspaceLayout(p.experts).arrays(workspace);
    launch_prepare_experts<Sm80GroupedGemm>(p, arrays, stream);
    // The output doubles as the source C, which the epilogue (ScaleType::Nothing) never reads.
    const Arguments args(arrays.shapes, p.experts, dev.sm_count * r.ctas_per_sm, typename Epilogue::Params(),
                         arrays.a, arrays.b, arrays.d, arrays.d, arrays.lda, arrays.ldb, arrays.ldd, arrays.ldd);
    constexpr int bytes = int(sizeof(typename Kernel::SharedStorage));
    cutlass::Kernel<Kernel><<<args.threadblock_count, Kernel::kThreadCount, bytes, stream>>>(
        typename Kernel::Params(args));
    const cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess) {
      WAVETUNE_FAIL("kernel launch failed: ", cudaGetErrorString(error), " (", describe(p), ")");
    }
  }

  static constexpr GroupedVariantOps ops() { return {GroupedScales::none, &workspace_bytes, &run, &ctas_per_sm}; }
};

}  // namespace wavetune::detail

// Defines wavetune::detail::variant_<NAME>, which the grouped registry (registry.cpp) lists. The family's B layout
// (col) and scheduler (persistent: a grid of the resident CTAs) are fixed, and so are the Hopper axes (swap-AB,
// schedule, cluster): false, multistage, 1x1.
#define WAVETUNE_GROUPED_SM80_INSTANTIATE_VARIANT(NAME, DTYPE, B_LAYOUT, SWAP_AB, SCHEDULE, TM, TN, TK, CM, CN,        \
                                                  SCHEDULER, STAGES, WARPS_M, WARPS_N)                               \
  static_assert(wavetune::BLayout::B_LAYOUT == wavetune::BLayout::col && !SWAP_AB &&                                 \
                    wavetune::Schedule::SCHEDULE == wavetune::Schedule::multistage && CM == 1 && CN == 1 &&          \
                    wavetune::TileScheduler::SCHEDULER == wavetune::TileScheduler::persistent,                       \
                "an sm80 grouped variant is a multistage kernel of col B without swap-AB or clusters");             \
  namespace wavetune::detail { extern const GroupedVariantOps variant_##NAME; }                                    \
  const wavetune::detail::GroupedVariantOps wavetune::detail::variant_##NAME =                                      \
      wavetune::detail::Sm80GroupedGemm<wavetune::DType::DTYPE, TM, TN, TK, STAGES, WARPS_M, WARPS_N>::ops();

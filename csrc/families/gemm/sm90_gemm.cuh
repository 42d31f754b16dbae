// The one CUTLASS template behind every variant: a Hopper TMA warp-specialized GEMM
// D = A @ B + bias (fp32 accumulation, an optional per-N bias added in fp32, D in the input type, no C
// operand), parameterized by the macro axes of
// cutlass_configs/. Generated sources instantiate it once per translation unit with
// WAVETUNE_INSTANTIATE_VARIANT, because each instantiation takes tens of seconds to compile.
#pragma once

// NOTES: CUTLASS picks the widest wgmma atom whose N divides the tile's N. Without this switch its list
// stops at 8/16/24/32/64/96/128/192/256, and a tile N of 152 or 208 silently runs as 8-wide atoms; with
// it, every multiple of 8 has its own atom. Sm90Gemm checks that the atom spans the whole tile N.
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED

#include <cuda_runtime.h>

#include <string>
#include <type_traits>

// NOTES: programmatic dependent launch (kernels.h) needs the kernels' grid-dependency instructions
// (CUTLASS_ENABLE_GDC_FOR_SM90: wait before the first load, release dependents after the mainloop). CUTLASS
// 4.2's stream-K scheduler does not compile with them (sm90_tile_scheduler_stream_k.hpp, is_last_tile), so
// stream-K variants are built without (the generated source names its scheduler first) and wait before
// their first instruction instead (WaitsForPreviousGrid).
#ifndef WAVETUNE_VARIANT_SCHEDULER_stream_k
#define CUTLASS_ENABLE_GDC_FOR_SM90
#endif

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "cutlass_launch.cuh"
#include "variant_ops.h"
#include "wavetune/errors.h"

namespace wavetune::detail {

template <DType kDType, BLayout kBLayout, bool kSwapAB, Schedule kSchedule, int kTileM, int kTileN, int kTileK,
          int kClusterM, int kClusterN, TileScheduler kScheduler>
struct Sm90Gemm {
  // NOTES: swap-AB runs D^T[N,M] = W[N,K] @ x^T[K,M]. For B column-major (W[N,K] row-major) that is the
  // same operand layouts with W as the kernel's A and x as its B, and D written column-major.
  static_assert(!kSwapAB || kBLayout == BLayout::col, "swap-AB is generated for column-major B only");
  static constexpr bool kCooperative = kSchedule == Schedule::cooperative;
  static constexpr bool kStreamK = kScheduler == TileScheduler::stream_k;

  using Element = std::conditional_t<kDType == DType::bf16, cutlass::bfloat16_t, cutlass::half_t>;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB =
      std::conditional_t<kBLayout == BLayout::col, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using LayoutD = std::conditional_t<kSwapAB, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  // NOTES: TMA moves 16-byte rows, so every operand's contiguous extent is a multiple of 8 elements;
  // launch.cu checks this up front to give a precise message instead of CUTLASS's bare status.
  static constexpr int kAlignment = 128 / cutlass::sizeof_bits<Element>::value;

  using TileShape = cute::Shape<cute::Int<kTileM>, cute::Int<kTileN>, cute::Int<kTileK>>;
  using ClusterShape = cute::Shape<cute::Int<kClusterM>, cute::Int<kClusterN>, cute::_1>;
  using MainloopSchedule = Sm90MainloopSchedule<false, false, kCooperative>;
  using EpilogueSchedule = Sm90EpilogueSchedule<false, kCooperative>;
  using SchedulerTag = std::conditional_t<kStreamK, cutlass::gemm::StreamKScheduler, cutlass::gemm::PersistentScheduler>;

  // ElementC = void: D = A @ B with no source operand, so the epilogue neither loads C nor reserves
  // shared memory for it, which leaves more stages to the mainloop.
  // NOTES: the bias is one broadcast vector over the problem's N: per column of D, or per row of D^T under
  // swap-AB. It is converted to fp32 and added to the accumulator before the one rounding to the output
  // type, as cuBLAS's bias epilogue does (rounding the product first doubled the error of biased layers).
  // A null bias pointer reads as zeros and loads nothing, so one kernel serves layers with and without.
  // NOTES: the automatic epilogue tile is gcd(min(32, N), N) columns wide; config_space.py admits only
  // tile N = 8 or multiples of 16, so every tile but the 8-wide decode one stores at least 16 columns
  // per TMA store (a 104- or 152-wide tile would fall to 8).
  using BiasEpilogue = std::conditional_t<kSwapAB, cutlass::epilogue::fusion::LinCombPerRowBias<Element, float, Element>,
                                          cutlass::epilogue::fusion::LinCombPerColBias<Element, float, Element>>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignment, Element, LayoutD,
      kAlignment, EpilogueSchedule, BiasEpilogue>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA, kAlignment, Element, LayoutB, kAlignment,
      float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  static_assert(cute::tile_size<1>(typename Mainloop::TiledMma{}) == kTileN,
                "the wgmma atom does not span the tile's N: is CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED defined?");
  using Universal =
      cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue, SchedulerTag>;
  using Kernel = std::conditional_t<kStreamK, WaitsForPreviousGrid<Universal>, Universal>;
  using Adapter = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using Arguments = typename Adapter::Arguments;

  static Arguments arguments(const GemmProblem& p, const MicroParams& micro, const DeviceInfo& dev) {
    using StrideA = typename Kernel::StrideA;
    using StrideB = typename Kernel::StrideB;
    using StrideD = typename Kernel::StrideD;
    // The kernel's own problem: (M, N) and the A/B operands trade places under swap-AB.
    const int m = kSwapAB ? p.n : p.m, n = kSwapAB ? p.m : p.n;
    const void* a = kSwapAB ? p.b : p.a;
    const void* b = kSwapAB ? p.a : p.b;
    const int64_t lda = kSwapAB ? p.ldb : p.lda, ldb = kSwapAB ? p.lda : p.ldb;
    // Packed strides, then the caller's leading dimensions (rows of a larger tensor are allowed).
    StrideA stride_a = cutlass::make_cute_packed_stride(StrideA{}, {m, p.k, 1});
    StrideB stride_b = cutlass::make_cute_packed_stride(StrideB{}, {n, p.k, 1});
    StrideD stride_d = cutlass::make_cute_packed_stride(StrideD{}, {m, n, 1});
    cute::get<0>(stride_a) = lda;
    if constexpr (kBLayout == BLayout::col) {
      cute::get<0>(stride_b) = ldb;
    } else {
      cute::get<1>(stride_b) = ldb;
    }
    if constexpr (kSwapAB) {
      cute::get<1>(stride_d) = p.ldd;
    } else {
      cute::get<0>(stride_d) = p.ldd;
    }

    cutlass::KernelHardwareInfo hw_info;
    hw_info.device_id = dev.device;
    hw_info.sm_count = dev.sm_count;

    Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                   {m, n, p.k, 1},
                   {static_cast<const Element*>(a), stride_a, static_cast<const Element*>(b), stride_b},
                   {{}, nullptr, stride_d, static_cast<Element*>(p.d), stride_d},
                   hw_info};
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    args.epilogue.thread.bias_ptr = static_cast<const Element*>(p.bias);
    set_scheduler<kStreamK>(args.scheduler, micro);
    return args;
  }

  static std::string why_not(const GemmProblem& p, const MicroParams& micro, const DeviceInfo& dev) {
    cutlass::Status status = Adapter::can_implement(arguments(p, micro, dev));
    if (status == cutlass::Status::kSuccess) return {};
    return std::string("CUTLASS cannot implement it: ") + cutlassGetStatusString(status);
  }

  static size_t workspace_bytes(const GemmProblem& p, const MicroParams& micro, const DeviceInfo& dev) {
    return Adapter::get_workspace_size(arguments(p, micro, dev));
  }

  static void run(const GemmProblem& p, const MicroParams& micro, const DeviceInfo& dev, void* workspace,
                  size_t workspace_bytes, Stream stream) {
    launch_gemm_universal<Adapter>(arguments(p, micro, dev), dev, workspace, workspace_bytes,
                                   programmatic_launch(), stream, [&] { return describe(p); });
  }

  static constexpr VariantOps ops() { return {&why_not, &workspace_bytes, &run}; }
};

}  // namespace wavetune::detail

// Defines wavetune::detail::variant_<NAME>, which the registry (registry.cpp) lists.
#define WAVETUNE_INSTANTIATE_VARIANT(NAME, DTYPE, B_LAYOUT, SWAP_AB, SCHEDULE, TM, TN, TK, CM, CN, SCHEDULER) \
  namespace wavetune::detail {                                                                                \
  extern const VariantOps variant_##NAME;                                                                     \
  const VariantOps variant_##NAME = Sm90Gemm<DType::DTYPE, BLayout::B_LAYOUT, SWAP_AB, Schedule::SCHEDULE, TM, TN, \
                                             TK, CM, CN, TileScheduler::SCHEDULER>::ops();                    \
  }

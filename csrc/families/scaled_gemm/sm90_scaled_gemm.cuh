// The CUTLASS template behind the scaled GEMM's generated variants (cutlass_configs/sm90_scaled_gemm.toml): a
// Hopper TMA warp-specialized FP8 GEMM, D = sb * (sa * (A @ B^T)) (+ bias) with A, B in e4m3, fp32
// accumulation promoted from the tensor cores' every few k-blocks, scales per tensor or per row applied in
// the epilogue, and D in bf16 or fp16: scaled_gemm.h's problem for any number of tokens. Its block-scaled
// variants run CUTLASS's blockwise-scaling mainloop instead, which scales each 128-wide k-block's products by
// the 1x128 token and 128x128 weight scales as it promotes them to fp32. Generated sources instantiate it
// once per translation unit with WAVETUNE_SCALED_INSTANTIATE_VARIANT (WAVETUNE_SCALED_BLOCK128_... for
// block scales).
#pragma once

// NOTES: as in sm90_gemm.cuh: every multiple of 8 gets its own wgmma atom, and the kernels wait on the
// previous grid before their first load so that they can be launched early (programmatic dependent launch).
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#define CUTLASS_ENABLE_GDC_FOR_SM90

#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "cutlass_launch.cuh"
#include "scaled_ops.h"
#include "wavetune/errors.h"
#include "wavetune/kernels.h"

namespace wavetune::detail {

// NOTES: the weights' 128-block scales as CUTLASS's blockwise mainloop reads them: a layout over the weight's
// elements (rows x K, zero strides within a block), K-major as checkpoints store them ([ceil(N / 128),
// ceil(K / 128)]). The mainloop takes one scale per kGranularity rows of a tile and refuses tiles of fewer
// rows, so each 128-row block is described as 128 / kGranularity groups of kGranularity rows that share its
// scale (a zero stride): tiles of 64 weight rows then fill a layer with twice the CTAs of 128-row ones.
template <int kGranularity>
struct WeightBlockScales {
  static constexpr int kBlock = 128;
  static_assert(kBlock % kGranularity == 0);
  using Config = cutlass::detail::Sm90BlockwiseScaleConfig<kGranularity, 1, kBlock, cute::GMMA::Major::K,
                                                           cute::GMMA::Major::K>;
  using Layout = cute::Layout<
      cute::Shape<cute::Shape<cute::Int<kGranularity>, cute::Shape<cute::Int<kBlock / kGranularity>, int32_t>>,
                  cute::Shape<cute::Int<kBlock>, int32_t>, int32_t>,
      cute::Stride<cute::Stride<cute::_0, cute::Stride<cute::_0, int32_t>>, cute::Stride<cute::_0, cute::_1>, int32_t>>;

  static Layout of(int rows, int k) {
    const int32_t row_blocks = (rows + kBlock - 1) / kBlock, k_blocks = (k + kBlock - 1) / kBlock;
    return Layout{{{{}, {{}, row_blocks}}, {{}, k_blocks}, 1}, {{{}, {{}, k_blocks}}, {{}, {}}, row_blocks * k_blocks}};
  }
};

// The collective `Mainloop`, with its A operand's scale layout replaced by `LayoutSFA` if kReplace.
template <bool kReplace, class Mainloop, class LayoutSFA>
struct WithScaleLayoutA {
  using type = Mainloop;
};
template <class LayoutSFA, class Policy, class Tile, class ElementA, class StrideA, class OldSFA, class ElementB,
          class PairB, class... Rest>
struct WithScaleLayoutA<true,
                        cutlass::gemm::collective::CollectiveMma<Policy, Tile, ElementA, cute::tuple<StrideA, OldSFA>,
                                                                 ElementB, PairB, Rest...>,
                        LayoutSFA> {
  using type = cutlass::gemm::collective::CollectiveMma<Policy, Tile, ElementA, cute::tuple<StrideA, LayoutSFA>,
                                                        ElementB, PairB, Rest...>;
};

template <DType kOut, bool kSwapAB, Schedule kSchedule, int kTileM, int kTileN, int kTileK, int kClusterM,
          int kClusterN, bool kBlockScaled = false>
struct Sm90ScaledGemm {
  static constexpr bool kCooperative = kSchedule == Schedule::cooperative;
  using Input = cutlass::float_e4m3_t;
  using Out = std::conditional_t<kOut == DType::bf16, cutlass::bfloat16_t, cutlass::half_t>;
  // NOTES: e4m3 wgmma reads both operands K-major. A [m, k] row-major and an nn.Linear weight [n, k] are
  // both K-major; swap-AB runs D^T[n, m] = W @ x^T, so the weight is the kernel's A, the tokens run along
  // the tile's N (8 to 64 of them fill a wgmma instead of wasting 64 rows), and D^T is written column-major.
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD = std::conditional_t<kSwapAB, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  static constexpr int kInputAlignment = 16;  // elements of 16-byte TMA rows
  static constexpr int kOutAlignment = 8;

  using TileShape = cute::Shape<cute::Int<kTileM>, cute::Int<kTileN>, cute::Int<kTileK>>;
  using ClusterShape = cute::Shape<cute::Int<kClusterM>, cute::Int<kClusterN>, cute::_1>;
  using MainloopSchedule = Sm90MainloopSchedule<false, kBlockScaled, kCooperative>;
  using EpilogueSchedule = Sm90EpilogueSchedule<false, kCooperative>;

  // NOTES: the epilogue as a visitor tree: (scale_b * (scale_a * acc)) + bias in fp32, one rounding to the
  // output. A scale is a vector along the kernel's M (one value per row of its D) or along its N; its
  // stride's bool says per row (true) or one value broadcast (false, per tensor), so one kernel takes any
  // mix. The tokens' scale and the weight's scale and bias trade axes under swap-AB. A null bias reads 0.
  using AlongM = cute::Stride<bool, cute::_0, int64_t>;
  using AlongN = cute::Stride<cute::_0, bool, int64_t>;
  template <bool kAlongM, class Element, class Stride>
  using Vector = std::conditional_t<kAlongM, cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, Element, float, Stride>,
                                    cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, Element, float, Stride>>;
  using TokenScale = Vector<!kSwapAB, float, std::conditional_t<kSwapAB, AlongN, AlongM>>;
  using WeightScale = Vector<kSwapAB, float, std::conditional_t<kSwapAB, AlongM, AlongN>>;
  using Bias = Vector<kSwapAB, Out, std::conditional_t<kSwapAB, cute::Stride<cute::_1, cute::_0, int64_t>,
                                                       cute::Stride<cute::_0, cute::_1, int64_t>>>;
  using RoundStyle = cutlass::FloatRoundStyle;
  using TokenScaled = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float, RoundStyle::round_to_nearest>,
      TokenScale, cutlass::epilogue::fusion::Sm90AccFetch>;
  using Fusion = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, Out, float,
                                             RoundStyle::round_to_nearest>,
      WeightScale, TokenScaled, Bias>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kOutAlignment, Out, LayoutD,
      kOutAlignment, EpilogueSchedule, Fusion>::CollectiveOp;
  // Block scales, swapped: the builder sees the standard scale layouts of the tile's granularity, then the weights'
  // layout replaces A's (WeightBlockScales). Unswapped, the tokens are A, one scale per token and 128 k, and the
  // weights B, one per 128x128 block, both as stored (K-major): tile N spans whole weight blocks.
  using WeightScales = WeightBlockScales<(kTileM < 128 ? kTileM : 128)>;
  using TokenRowScales = cutlass::detail::Sm90BlockwiseScaleConfig<1, WeightScales::kBlock, WeightScales::kBlock,
                                                                   cute::GMMA::Major::K, cute::GMMA::Major::K>;
  using BlockScales = std::conditional_t<kSwapAB, typename WeightScales::Config, TokenRowScales>;
  static_assert(!kBlockScaled || kSwapAB || kTileN % WeightScales::kBlock == 0,
                "unswapped block-scaled tiles span whole 128-row weight blocks along N");
  using MainloopLayoutA =
      std::conditional_t<kBlockScaled, cute::tuple<LayoutA, typename BlockScales::LayoutSFA>, LayoutA>;
  using MainloopLayoutB =
      std::conditional_t<kBlockScaled, cute::tuple<LayoutB, typename BlockScales::LayoutSFB>, LayoutB>;
  using BuiltMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Input, MainloopLayoutA, kInputAlignment, Input,
      MainloopLayoutB, kInputAlignment, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  using Mainloop =
      typename WithScaleLayoutA<kBlockScaled && kSwapAB, BuiltMainloop, typename WeightScales::Layout>::type;
  static_assert(cute::tile_size<1>(typename Mainloop::TiledMma{}) == kTileN,
                "the wgmma atom does not span the tile's N: is CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED defined?");
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      cutlass::gemm::PersistentScheduler>;
  using Adapter = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using Arguments = typename Adapter::Arguments;

  static Arguments arguments(const ScaledGemmProblem& p, const DeviceInfo& dev) {
    using StrideA = typename Kernel::StrideA;
    using StrideB = typename Kernel::StrideB;
    using StrideD = typename Kernel::StrideD;
    const int m = kSwapAB ? p.n : p.m, n = kSwapAB ? p.m : p.n;
    StrideA stride_a = cutlass::make_cute_packed_stride(StrideA{}, {m, p.k, 1});
    StrideB stride_b = cutlass::make_cute_packed_stride(StrideB{}, {n, p.k, 1});
    StrideD stride_d = cutlass::make_cute_packed_stride(StrideD{}, {m, n, 1});
    cute::get<0>(stride_a) = kSwapAB ? p.ldb : p.lda;
    cute::get<0>(stride_b) = kSwapAB ? p.lda : p.ldb;
    cute::get<kSwapAB ? 1 : 0>(stride_d) = p.ldd;

    cutlass::KernelHardwareInfo hw_info;
    hw_info.device_id = dev.device;
    hw_info.sm_count = dev.sm_count;
    const auto* a = static_cast<const Input*>(kSwapAB ? p.b : p.a);
    const auto* b = static_cast<const Input*>(kSwapAB ? p.a : p.b);
    Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                   {m, n, p.k, 1},
                   mainloop_arguments(p, a, stride_a, b, stride_b),
                   {{}, nullptr, stride_d, static_cast<Out*>(p.d), stride_d},
                   hw_info};
    // Block scales were applied in the mainloop: the epilogue's scales read their null default, 1.
    const bool row_a = p.scale_a_kind == ScaleKind::row, row_b = p.scale_b_kind == ScaleKind::row;
    typename TokenScale::Arguments token_scale{kBlockScaled ? nullptr : p.scale_a, 1.0f,
                                               vector_stride<typename TokenScale::StrideMNL>(row_a)};
    typename WeightScale::Arguments weight_scale{kBlockScaled ? nullptr : p.scale_b, 1.0f,
                                                 vector_stride<typename WeightScale::StrideMNL>(row_b)};
    args.epilogue.thread = {weight_scale, {token_scale, {}, {}}, {static_cast<const Out*>(p.bias)}, {}};
    set_scheduler<false>(args.scheduler, MicroParams{});
    return args;
  }

  template <class StrideA, class StrideB>
  static typename Mainloop::Arguments mainloop_arguments(const ScaledGemmProblem& p, const Input* a, StrideA stride_a,
                                                         const Input* b, StrideB stride_b) {
    if constexpr (kBlockScaled && kSwapAB) {
      using TokenScales = typename WeightScales::Config;  // granularity 1 along the kernel's N: one token
      return {a,         stride_a,
              b,         stride_b,
              p.scale_b, WeightScales::of(p.n, p.k),
              p.scale_a, TokenScales::tile_atom_to_shape_SFB(cute::make_shape(p.n, p.m, p.k, 1))};
    } else if constexpr (kBlockScaled) {
      const auto shape = cute::make_shape(p.m, p.n, p.k, 1);
      return {a,         stride_a,
              b,         stride_b,
              p.scale_a, TokenRowScales::tile_atom_to_shape_SFA(shape),
              p.scale_b, TokenRowScales::tile_atom_to_shape_SFB(shape)};
    } else {
      return {a, stride_a, b, stride_b};
    }
  }

  // A scale vector's stride: one value per row of the operand, or one broadcast value.
  template <class Stride>
  static Stride vector_stride(bool per_row) {
    if constexpr (std::is_same_v<Stride, AlongM>) {
      return {per_row, {}, 0};
    } else {
      return {{}, per_row, 0};
    }
  }

  static int32_t splits(const ScaledGemmProblem&, int32_t, const DeviceInfo&) { return 1; }

  static std::string why_not(const ScaledGemmProblem& p, int32_t requested, const DeviceInfo& dev) {
    if (p.out_dtype != kOut) return std::string("the variant writes ") + to_string(kOut);
    if (kBlockScaled != (p.scale_a_kind == ScaleKind::block128)) {
      return kBlockScaled ? "the variant takes 128-block scales" : "the variant takes per-tensor or per-row scales";
    }
    if (requested > 1) return "a CUTLASS variant does not split K";
    if (p.n % kOutAlignment != 0 || p.ldd % kOutAlignment != 0) {
      return "the CUTLASS variants store 16-byte rows: N and the output's row stride must be multiples of 8";
    }
    const cutlass::Status status = Adapter::can_implement(arguments(p, dev));
    if (status == cutlass::Status::kSuccess) return {};
    return std::string("CUTLASS cannot implement it: ") + cutlassGetStatusString(status);
  }

  static size_t workspace_bytes(const ScaledGemmProblem&, int32_t, const DeviceInfo&) { return 0; }

  static void run(const ScaledGemmProblem& p, int32_t, const DeviceInfo& dev, void*, size_t, Stream stream) {
    launch_gemm_universal<Adapter>(arguments(p, dev), dev, nullptr, 0, programmatic_launch(), stream, [&] {
      return "M=" + std::to_string(p.m) + " N=" + std::to_string(p.n) + " K=" + std::to_string(p.k);
    });
  }

  static constexpr ScaledVariantOps ops() { return {&splits, &why_not, &workspace_bytes, &run}; }
};

}  // namespace wavetune::detail

// Defines wavetune::detail::variant_<NAME>, which the scaled GEMM's registry (registry.cpp) lists. The family's B
// layout (col) and scheduler (persistent) are fixed: config_space.py refuses other values.
#define WAVETUNE_SCALED_DEFINE_VARIANT(BLOCK_SCALED, NAME, DTYPE, B_LAYOUT, SWAP_AB, SCHEDULE, TM, TN, TK, CM, CN,    \
                                       SCHEDULER)                                                                  \
  namespace wavetune::detail {                                                                                      \
  static_assert(BLayout::B_LAYOUT == BLayout::col && TileScheduler::SCHEDULER == TileScheduler::persistent);        \
  extern const ScaledVariantOps variant_##NAME;                                                                     \
  const ScaledVariantOps variant_##NAME =                                                                           \
      Sm90ScaledGemm<DType::DTYPE, SWAP_AB, Schedule::SCHEDULE, TM, TN, TK, CM, CN, BLOCK_SCALED>::ops();          \
  }
#define WAVETUNE_SCALED_INSTANTIATE_VARIANT(...) WAVETUNE_SCALED_DEFINE_VARIANT(false, __VA_ARGS__)
#define WAVETUNE_SCALED_BLOCK128_INSTANTIATE_VARIANT(...) WAVETUNE_SCALED_DEFINE_VARIANT(true, __VA_ARGS__)

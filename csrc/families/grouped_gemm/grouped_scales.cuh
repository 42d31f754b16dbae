// The grouped family's scales modes (GroupedScales, csrc/include/wavetune/grouped.h) as its CUTLASS template
// (sm90_grouped_gemm.cuh) runs them: each mode's Operands policy (operand types, where the scales apply), and
// the macro a generated variant source of the mode instantiates the template with:
// WAVETUNE_GROUPED[_<MODE>]_INSTANTIATE_VARIANT (cutlass_configs/sm90_grouped_gemm.toml names it by the group's
// `scales`). Every generated grouped source includes this header.
// NOTES: adding a scales mode touches three files: grouped.h (its enumerator and its GroupedScalesLayout, from
// which the checks, the launch, the tables and Python take its scales), this header (its policy and macro) and
// the config space (its groups and the name fragment of [family] scales).
#pragma once

#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "sm90_grouped_gemm.cuh"

namespace wavetune::detail {

// The default epilogue (out = acc, rounded to Out), for the modes whose scales (if any) the mainloop applies.
template <class Out>
struct PlainEpilogue {
  template <class TileShape, bool kSwapAB>
  using Fusion = cutlass::epilogue::fusion::LinearCombination<Out, float, void, float>;

  template <class FusionArguments>
  static FusionArguments epilogue_arguments(const float* const*, const float* const*) {
    FusionArguments args{};
    args.alpha = 1.0f;
    args.beta = 0.0f;
    return args;
  }
};

template <GroupedScales kScales, DType kOut>
struct GroupedOperands;

// none: x, w and out in one 16-bit type.
template <DType kOut>
struct GroupedOperands<GroupedScales::none, kOut> : PlainEpilogue<Sixteen<kOut>> {
  using Input = Sixteen<kOut>;
  using Out = Input;
  static constexpr GroupedScales kScales = GroupedScales::none;
  static constexpr bool kMainloopScales = false;
};

// row: e4m3 x and w; the scales as an epilogue visitor tree.
template <DType kOut>
struct GroupedOperands<GroupedScales::row, kOut> {
  using Input = cutlass::float_e4m3_t;
  using Out = Sixteen<kOut>;
  static constexpr GroupedScales kScales = GroupedScales::row;
  static constexpr bool kMainloopScales = false;

  // NOTES: scale_w * (scale_x * acc) in fp32, one rounding to the output. Each expert's scales start at its
  // own address (its first row's token scale, its weight rows' channel scales), so both vectors are arrays
  // of per-expert pointers (the element type `float*`), which CUTLASS's broadcasts index by group. A scale
  // along the kernel's M is one value per row of its D (a column broadcast); along N one per column. Under
  // swap-AB the kernel's M runs over the weight's channels and its N over the tokens.
  template <bool kAlongM, class TileShape>
  using Vector = std::conditional_t<
      kAlongM, cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float*, float, cute::Stride<cute::_1, cute::_0, cute::_0>>,
      cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float*, float, cute::Stride<cute::_0, cute::_1, cute::_0>>>;
  template <class TileShape, bool kSwapAB>
  using TokenScale = Vector<!kSwapAB, TileShape>;
  template <class TileShape, bool kSwapAB>
  using ChannelScale = Vector<kSwapAB, TileShape>;
  template <class TileShape, bool kSwapAB>
  using Fusion = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, Out, float, cutlass::FloatRoundStyle::round_to_nearest>,
      ChannelScale<TileShape, kSwapAB>,
      cutlass::epilogue::fusion::Sm90EVT<
          cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float,
                                                 cutlass::FloatRoundStyle::round_to_nearest>,
          TokenScale<TileShape, kSwapAB>, cutlass::epilogue::fusion::Sm90AccFetch>>;

  // The visitor tree's arguments: the per-expert scale pointers prepare_experts writes.
  template <class FusionArguments>
  static FusionArguments epilogue_arguments(const float* const* scale_x, const float* const* scale_w) {
    return {{scale_w, 0.0f, {}}, {{scale_x, 0.0f, {}}, {}, {}}, {}};
  }
};

// block128: e4m3 x and w; CUTLASS's blockwise-scaling mainloop scales each k-block's products as it promotes
// them to fp32, the epilogue only rounds.
template <DType kOut>
struct GroupedOperands<GroupedScales::block128, kOut> : PlainEpilogue<Sixteen<kOut>> {
  using Input = cutlass::float_e4m3_t;
  using Out = Sixteen<kOut>;
  static constexpr GroupedScales kScales = GroupedScales::block128;
  static constexpr bool kMainloopScales = true;
};

// tensor: e4m3 x and w, one scale for all of x and one per expert (FP8 MoE checkpoints quantized per tensor):
// out = (scale_x * scale_w[e]) * acc in the epilogue.
template <DType kOut>
struct GroupedOperands<GroupedScales::tensor, kOut> {
  using Input = cutlass::float_e4m3_t;
  using Out = Sixteen<kOut>;
  static constexpr GroupedScales kScales = GroupedScales::tensor;
  static constexpr bool kMainloopScales = false;

  // NOTES: prepare_experts points every expert's scale_x at the one scale and its scale_w at the expert's; the
  // ptr-array scalar broadcast reads both for the group of each tile and multiplies them, in fp32, into one
  // factor of the accumulators.
  using Scale = cutlass::epilogue::fusion::Sm90ScalarBroadcastPtrArray<float, cute::Stride<cute::_0, cute::_0, int64_t>, 2>;
  template <class TileShape, bool kSwapAB>
  using Fusion = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, Out, float, cutlass::FloatRoundStyle::round_to_nearest>,
      Scale, cutlass::epilogue::fusion::Sm90AccFetch>;

  template <class FusionArguments>
  static FusionArguments epilogue_arguments(const float* const* scale_x, const float* const* scale_w) {
    return {{{1.0f, 1.0f}, {nullptr, nullptr}, {scale_x, scale_w}, {}}, {}, {}};
  }
};

}  // namespace wavetune::detail

// Defines wavetune::detail::variant_<NAME> of a scales mode, which the grouped registry (registry.cpp) lists. The
// family's B layout (col) and scheduler (persistent) are fixed: config_space.py refuses other values.
#define WAVETUNE_GROUPED_DEFINE_VARIANT(SCALES, NAME, DTYPE, B_LAYOUT, SWAP_AB, SCHEDULE, TM, TN, TK, CM, CN,         \
                                        SCHEDULER)                                                                  \
  static_assert(wavetune::BLayout::B_LAYOUT == wavetune::BLayout::col &&                                            \
                wavetune::TileScheduler::SCHEDULER == wavetune::TileScheduler::persistent);                         \
  namespace wavetune::detail { extern const GroupedVariantOps variant_##NAME; }                                    \
  const wavetune::detail::GroupedVariantOps wavetune::detail::variant_##NAME =                                      \
      wavetune::detail::Sm90GroupedGemm<wavetune::detail::GroupedOperands<wavetune::GroupedScales::SCALES,          \
                                                                          wavetune::DType::DTYPE>,                  \
                                        SWAP_AB, wavetune::Schedule::SCHEDULE, TM, TN, TK, CM, CN>::ops();
#define WAVETUNE_GROUPED_INSTANTIATE_VARIANT(...) WAVETUNE_GROUPED_DEFINE_VARIANT(none, __VA_ARGS__)
#define WAVETUNE_GROUPED_ROW_INSTANTIATE_VARIANT(...) WAVETUNE_GROUPED_DEFINE_VARIANT(row, __VA_ARGS__)
#define WAVETUNE_GROUPED_BLOCK128_INSTANTIATE_VARIANT(...) WAVETUNE_GROUPED_DEFINE_VARIANT(block128, __VA_ARGS__)
#define WAVETUNE_GROUPED_TENSOR_INSTANTIATE_VARIANT(...) WAVETUNE_GROUPED_DEFINE_VARIANT(tensor, __VA_ARGS__)

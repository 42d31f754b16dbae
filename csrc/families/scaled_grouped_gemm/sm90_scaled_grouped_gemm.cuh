// The CUTLASS template behind the FP8 grouped variants (cutlass_configs/sm90_scaled_grouped_gemm.toml): the
// grouped family's ptr-array kernel (sm90_grouped_gemm.cuh) with e4m3 operands, fp32 accumulation promoted
// from the tensor cores' every few k-blocks, and an epilogue that applies the per-token and per-channel scales:
// out[rows of e] = scale_x[rows of e] * (x[rows of e] @ w[e].T) * scale_w[e] in bf16 or fp16. Generated
// sources instantiate it once per translation unit with WAVETUNE_SCALED_GROUPED_INSTANTIATE_VARIANT.
#pragma once

#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "scaled_grouped_ops.h"
#include "sm90_grouped_gemm.cuh"

namespace wavetune::detail {

// e4m3 x and w, out in kOut; the scales as an epilogue visitor tree.
template <DType kOut>
struct ScaledGroupedOperands {
  using Problem = ScaledGroupedGemmProblem;
  using Input = cutlass::float_e4m3_t;
  using Out = std::conditional_t<kOut == DType::bf16, cutlass::bfloat16_t, cutlass::half_t>;
  static constexpr GroupedScales kScales = GroupedScales::per_row;
  CUTLASS_HOST_DEVICE static const GroupedGemmProblem& sizes(const Problem& p) { return p.gemm; }

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

}  // namespace wavetune::detail

// Defines wavetune::detail::variant_<NAME>, which the FP8 grouped registry (registry.cpp) lists. The family's B
// layout (col) and scheduler (persistent) are fixed: config_space.py refuses other values.
#define WAVETUNE_SCALED_GROUPED_INSTANTIATE_VARIANT(NAME, DTYPE, B_LAYOUT, SWAP_AB, SCHEDULE, TM, TN, TK, CM, CN,   \
                                                    SCHEDULER)                                                    \
  namespace wavetune::detail {                                                                                    \
  static_assert(BLayout::B_LAYOUT == BLayout::col && TileScheduler::SCHEDULER == TileScheduler::persistent);      \
  extern const ScaledGroupedVariantOps variant_##NAME;                                                            \
  const ScaledGroupedVariantOps variant_##NAME =                                                                  \
      Sm90GroupedGemm<ScaledGroupedOperands<DType::DTYPE>, SWAP_AB, Schedule::SCHEDULE, TM, TN, TK, CM, CN>::ops(); \
  }

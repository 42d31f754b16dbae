// The CUTLASS template behind the block-scaled FP8 grouped variants
// (cutlass_configs/sm90_block_scaled_grouped_gemm.toml): the grouped family's ptr-array kernel
// (sm90_grouped_gemm.cuh) with e4m3 operands and CUTLASS's blockwise-scaling mainloop, which scales each
// 128-wide k-block's products by the 1x128 token and 128x128 weight scales as it promotes them to fp32; the
// epilogue only rounds to bf16 or fp16. Generated sources instantiate it once per translation unit with
// WAVETUNE_BLOCK_SCALED_GROUPED_INSTANTIATE_VARIANT.
#pragma once

#include "block_scaled_grouped_ops.h"
#include "sm90_grouped_gemm.cuh"

namespace wavetune::detail {

// e4m3 x and w, out in kOut; scales per block, applied in the mainloop.
template <DType kOut>
struct BlockScaledGroupedOperands {
  using Problem = BlockScaledGroupedGemmProblem;
  using Input = cutlass::float_e4m3_t;
  using Out = std::conditional_t<kOut == DType::bf16, cutlass::bfloat16_t, cutlass::half_t>;
  static constexpr GroupedScales kScales = GroupedScales::per_block;
  template <class TileShape, bool kSwapAB>
  using Fusion = cutlass::epilogue::fusion::LinearCombination<Out, float, void, float>;
  CUTLASS_HOST_DEVICE static const GroupedGemmProblem& sizes(const Problem& p) { return p.gemm; }
};

}  // namespace wavetune::detail

// Defines wavetune::detail::variant_<NAME>, which the block-scaled grouped registry (registry.cpp) lists. The
// family's B layout (col) and scheduler (persistent) are fixed: config_space.py refuses other values.
#define WAVETUNE_BLOCK_SCALED_GROUPED_INSTANTIATE_VARIANT(NAME, DTYPE, B_LAYOUT, SWAP_AB, SCHEDULE, TM, TN, TK, CM, \
                                                          CN, SCHEDULER)                                           \
  namespace wavetune::detail {                                                                                     \
  static_assert(BLayout::B_LAYOUT == BLayout::col && TileScheduler::SCHEDULER == TileScheduler::persistent);       \
  static_assert(TK == kScaleBlock, "a k-tile is one scale block");                                                \
  extern const BlockScaledGroupedVariantOps variant_##NAME;                                                        \
  const BlockScaledGroupedVariantOps variant_##NAME =                                                              \
      Sm90GroupedGemm<BlockScaledGroupedOperands<DType::DTYPE>, SWAP_AB, Schedule::SCHEDULE, TM, TN, TK, CM,        \
                      CN>::ops();                                                                                  \
  }

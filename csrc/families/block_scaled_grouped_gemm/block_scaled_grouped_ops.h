// Internal interface between the block-scaled FP8 grouped runtime (registry.cpp, launch.cu) and its generated
// variant sources: the grouped family's ops, for the block-scaled problem.
#pragma once

#include "grouped_ops.h"
#include "wavetune/block_scaled_grouped.h"

namespace wavetune::detail {

using BlockScaledGroupedVariantOps = GroupedOps<BlockScaledGroupedGemmProblem>;

// Registry (registry.cpp): the ops of a compiled block-scaled grouped variant, nullptr when not compiled in.
const BlockScaledGroupedVariantOps* block_scaled_grouped_variant_ops(int32_t id);

}  // namespace wavetune::detail

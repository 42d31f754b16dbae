// Internal interface between the FP8 grouped runtime (registry.cpp, launch.cu) and its generated variant
// sources: the grouped family's ops, for the scaled problem.
#pragma once

#include "grouped_ops.h"
#include "wavetune/scaled_grouped.h"

namespace wavetune::detail {

using ScaledGroupedVariantOps = GroupedOps<ScaledGroupedGemmProblem>;

// Registry (registry.cpp): the ops of a compiled FP8 grouped variant, nullptr when not compiled in.
const ScaledGroupedVariantOps* scaled_grouped_variant_ops(int32_t id);

}  // namespace wavetune::detail

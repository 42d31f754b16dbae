// Internal interface between the grouped runtime (registry.cpp, launch.cu) and the
// generated grouped variant sources.
#pragma once

#include <cstddef>

#include "device.h"
#include "variant_registry.h"
#include "wavetune/grouped.h"

namespace wavetune::detail {

// What each generated grouped variant exports; the registry holds one per compiled variant. The FP8
// grouped family (scaled_grouped_gemm) exports the same for its own problem.
template <class Problem>
struct GroupedOps {
  // Workspace the variant needs for `experts` groups on a device (its layout: sm90_grouped_gemm.cuh).
  size_t (*workspace_bytes)(int32_t experts, const DeviceInfo&);
  // Launches on a problem already validated, with a workspace of at least workspace_bytes.
  void (*run)(const Problem&, void* workspace, const DeviceInfo&, Stream);
};
using GroupedVariantOps = GroupedOps<GroupedGemmProblem>;

// Registry (registry.cpp): the ops of a compiled grouped variant, nullptr when not compiled in.
const GroupedVariantOps* grouped_variant_ops(int32_t id);

}  // namespace wavetune::detail

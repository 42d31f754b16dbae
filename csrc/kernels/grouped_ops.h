// Internal interface between the grouped runtime (grouped_registry.cpp, grouped_launch.cu) and the
// generated grouped variant sources.
#pragma once

#include <cstddef>
#include <vector>

#include "variant_ops.h"
#include "wavetune/grouped.h"

namespace wavetune::detail {

// What each generated grouped variant exports; the registry holds one per compiled variant.
struct GroupedVariantOps {
  // Workspace the variant needs for `experts` groups on a device (its layout: sm90_grouped_gemm.cuh).
  size_t (*workspace_bytes)(int32_t experts, const DeviceInfo&);
  // Launches on a problem already validated, with a workspace of at least workspace_bytes.
  void (*run)(const GroupedGemmProblem&, void* workspace, const DeviceInfo&, Stream);
};

// Registry (grouped_registry.cpp): the ops of a compiled grouped variant, nullptr when not compiled in.
const GroupedVariantOps* grouped_variant_ops(int32_t id);
// Registers grouped variants of a variant library (variant_library.cpp); returns how many were new.
int32_t add_grouped_variants(const std::vector<VariantRegistry<GroupedVariantOps>::Entry>& entries);

}  // namespace wavetune::detail

// Internal interface between the grouped runtime (registry.cpp, launch.cu, choice.cpp) and the generated
// grouped variant sources (grouped_scales.cuh).
#pragma once

#include <cstddef>
#include <iterator>

#include "device.h"
#include "variant_registry.h"
#include "wavetune/errors.h"
#include "wavetune/grouped.h"

namespace wavetune::detail {

// What each generated grouped variant exports; the registry holds one per compiled variant.
struct GroupedVariantOps {
  GroupedScales scales;  // the mode it runs
  // Workspace the variant needs for `experts` groups on a device (its layout: its template's WorkspaceLayout).
  size_t (*workspace_bytes)(int32_t experts, const DeviceInfo&);
  // Launches on a problem already validated, with a workspace of at least workspace_bytes.
  void (*run)(const GroupedGemmProblem&, void* workspace, const DeviceInfo&, Stream);
  // CTAs of the kernel resident per SM of the device (0: none fit); null: one, a Hopper kernel's stages fill the
  // SM's shared memory.
  int (*ctas_per_sm)(const DeviceInfo&) = nullptr;
};

// The generated registry: the ops of a compiled grouped variant, nullptr when not compiled in.
const GroupedVariantOps* grouped_variant_ops(int32_t id);

// The mode's layout; InvalidArgument for a value no enumerator has.
inline const GroupedScalesLayout& checked_scales_layout(GroupedScales scales) {
  if (int32_t(scales) < 0 || int32_t(scales) >= int32_t(std::size(kGroupedScales))) {
    WAVETUNE_INVALID("unknown grouped scales mode ", int32_t(scales));
  }
  return grouped_scales_layout(scales);
}

// How messages name the variants of a mode: "grouped", "FP8 grouped (row scales)", ...
inline std::string grouped_kind(GroupedScales scales) {
  const GroupedScalesLayout& layout = grouped_scales_layout(scales);
  return layout.e4m3 ? std::string("FP8 grouped (") + layout.name + " scales)" : "grouped";
}

}  // namespace wavetune::detail

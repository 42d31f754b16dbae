// The launch steps both grouped families share (grouped_gemm, scaled_grouped_gemm): the workspace any variant
// needs, the built-in heuristic's choice, and a checked launch. Each family's launch.cu instantiates them
// with its registry and problem.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "device.h"
#include "grouped_ops.h"
#include "wavetune/errors.h"
#include "wavetune/grouped_heuristic.h"
#include "wavetune/mapping.h"

namespace wavetune::detail {

// What a grouped family gives these steps: its variants, their ops, and how its messages name it.
template <class Problem>
struct GroupedFamily {
  const std::vector<VariantInfo>& (*variants)();
  const VariantInfo* (*find)(int32_t id);  // nullptr: not compiled in
  const GroupedOps<Problem>* (*ops)(int32_t id);
  const char* name;          // "grouped", "FP8 grouped"
  const char* listing;       // the Python function listing its compiled variants
  const char* build_family;  // its name for python -m wavetune build --family
  const char* workspace;     // its workspace-size function
  int32_t operand_bytes;     // of x and w (the heuristic's cost model)
};

template <class Problem>
size_t grouped_family_workspace_bytes(const GroupedFamily<Problem>& family, int32_t experts) {
  if (experts < 1) WAVETUNE_INVALID("experts must be positive, got ", experts);
  const DeviceInfo& dev = current_device_info();
  size_t bytes = 0;
  for (const VariantInfo& v : family.variants()) bytes = std::max(bytes, family.ops(v.id)->workspace_bytes(experts, dev));
  return bytes;
}

// The heuristic's choice among the family's compiled variants that write `dtype`.
template <class Problem>
int32_t grouped_family_heuristic(const GroupedFamily<Problem>& family, const GroupedGemmProblem& p) {
  std::vector<TileShape> shapes;
  std::vector<int32_t> ids;
  for (const VariantInfo& v : family.variants()) {
    if (v.dtype != p.dtype) continue;
    shapes.push_back(tile_shape(v));
    ids.push_back(v.id);
  }
  if (ids.empty()) {
    WAVETUNE_INVALID("no compiled ", family.name, " variant takes ", to_string(p.dtype),
                     " in this build: compile some with python -m wavetune build "
                     "(--table PATH: what a table chooses; --family ", family.build_family, ": every variant)");
  }
  const GroupedShape shape{p.rows, p.experts, p.n, p.k};
  return ids[choose_grouped(shapes, shape, current_device_info().sm_count, family.operand_bytes)];
}

// Launches a validated problem (`sizes`: its sizes and pointers) on the variant, after checking the variant
// exists, writes the problem's dtype, and has its workspace.
template <class Problem>
void grouped_family_launch(const GroupedFamily<Problem>& family, const Problem& problem, const GroupedGemmProblem& sizes,
                           int32_t variant_id, void* workspace, size_t workspace_bytes, Stream stream) {
  const VariantInfo* v = family.find(variant_id);
  if (!v) {
    WAVETUNE_INVALID(family.name, " variant id ", variant_id, " is not compiled into this build; wavetune.",
                     family.listing, "() lists the compiled ones");
  }
  if (v->dtype != sizes.dtype) {
    WAVETUNE_INVALID(family.name, " variant ", v->name, " takes ", to_string(v->dtype), ", the problem is ",
                     to_string(sizes.dtype));
  }
  const DeviceInfo& dev = current_device_info();
  const GroupedOps<Problem>* ops = family.ops(variant_id);
  const size_t needed = ops->workspace_bytes(sizes.experts, dev);
  if (!workspace || workspace_bytes < needed) {
    WAVETUNE_INVALID("the ", family.name, " GEMM needs ", needed, " bytes of workspace, got ", workspace_bytes, " (",
                     family.workspace, "(experts) gives enough for any variant)");
  }
  if (sizes.rows == 0) return;
  ops->run(problem, workspace, dev, stream);
}

}  // namespace wavetune::detail

// The CUDA side of the grouped family: workspace size, the built-in choice and the launch entry point, for
// every scales mode.
#include <algorithm>
#include <string>
#include <vector>

#include "device.h"
#include "grouped_ops.h"
#include "wavetune/errors.h"
#include "wavetune/grouped.h"
#include "wavetune/grouped_heuristic.h"
#include "wavetune/kernels.h"
#include "wavetune/mapping.h"

namespace wavetune {

size_t grouped_workspace_bytes(int32_t experts) {
  if (experts < 1) WAVETUNE_INVALID("experts must be positive, got ", experts);
  const detail::DeviceInfo& dev = detail::current_device_info();
  size_t bytes = 0;
  for (const VariantInfo& v : grouped_variants()) {
    bytes = std::max(bytes, detail::grouped_variant_ops(v.id)->workspace_bytes(experts, dev));
  }
  return bytes;
}

int32_t grouped_default_variant(const GroupedGemmProblem& p) {
  const GroupedScalesLayout& layout = detail::checked_scales_layout(p.scales);
  std::vector<TileShape> shapes;
  std::vector<int32_t> ids;
  bool compiled = false;
  for (const VariantInfo& v : grouped_variants()) {
    if (v.dtype != p.dtype || detail::grouped_variant_ops(v.id)->scales != p.scales) continue;
    compiled = true;
    if (!runs_here(v)) continue;
    shapes.push_back(tile_shape(v));
    ids.push_back(v.id);
  }
  if (compiled && ids.empty()) return -1;  // none runs on this device: the caller runs PyTorch's grouped GEMM
  if (ids.empty()) {
    WAVETUNE_INVALID("no compiled ", detail::grouped_kind(p.scales), " variant takes ", to_string(p.dtype),
                     " in this build: compile some with python -m wavetune build (--table PATH: what a table "
                     "chooses; --family grouped_gemm: every variant)");
  }
  const GroupedShape shape{p.rows, p.experts, p.n, p.k};
  return ids[choose_grouped(shapes, shape, detail::current_device_info().sm_count, layout.e4m3 ? 1 : 2)];
}

void grouped_gemm(const GroupedGemmProblem& p, int32_t variant_id, void* workspace, size_t workspace_bytes,
                  Stream stream) {
  std::string error = grouped_problem_error(p);
  if (!error.empty()) WAVETUNE_INVALID(error);
  const VariantInfo* v = find_grouped_variant(variant_id);
  if (!v) {
    WAVETUNE_INVALID("grouped variant id ", variant_id, " is not compiled into this build; wavetune.grouped_configs(",
                     "scales) lists the compiled ones");
  }
  const detail::GroupedVariantOps* ops = detail::grouped_variant_ops(variant_id);
  if (ops->scales != p.scales) {
    WAVETUNE_INVALID("grouped variant ", v->name, " is ", detail::grouped_kind(ops->scales), ", the problem ",
                     detail::grouped_kind(p.scales));
  }
  if (v->dtype != p.dtype) {
    WAVETUNE_INVALID(detail::grouped_kind(p.scales), " variant ", v->name, " takes ", to_string(v->dtype),
                     ", the problem is ", to_string(p.dtype));
  }
  const detail::DeviceInfo& dev = detail::current_device_info();
  error = detail::arch_error(*v);
  if (!error.empty()) WAVETUNE_INVALID(error);
  const size_t needed = ops->workspace_bytes(p.experts, dev);
  if (!workspace || workspace_bytes < needed) {
    WAVETUNE_INVALID("the ", detail::grouped_kind(p.scales), " GEMM needs ", needed, " bytes of workspace, got ",
                     workspace_bytes, " (grouped_workspace_bytes(experts) gives enough for any variant)");
  }
  if (p.rows == 0) return;
  ops->run(p, workspace, dev, stream);
}

}  // namespace wavetune

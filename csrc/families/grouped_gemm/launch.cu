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

namespace {

const VariantInfo& compiled_variant(int32_t variant_id) {
  const VariantInfo* v = find_grouped_variant(variant_id);
  if (!v) {
    WAVETUNE_INVALID("grouped variant id ", variant_id, " is not compiled into this build; wavetune.grouped_configs(",
                     "scales) lists the compiled ones");
  }
  return *v;
}

int32_t resident_ctas(const detail::GroupedVariantOps& ops, const detail::DeviceInfo& dev) {
  return ops.ctas_per_sm ? ops.ctas_per_sm(dev) : 1;
}

// Whether a compiled variant runs the problem's dtype and scales mode.
bool takes(const VariantInfo& v, const GroupedGemmProblem& p) {
  return v.dtype == p.dtype && detail::grouped_variant_ops(v.id)->scales == p.scales;
}

}  // namespace

int32_t grouped_ctas_per_sm(int32_t variant_id) {
  const VariantInfo& v = compiled_variant(variant_id);
  if (const char* device_error = detail::current_device_error()) WAVETUNE_INVALID(device_error);
  const std::string error = detail::arch_error(v);
  if (!error.empty()) WAVETUNE_INVALID(error);
  return resident_ctas(*detail::grouped_variant_ops(variant_id), detail::current_device_info());
}

int32_t grouped_default_variant(const GroupedGemmProblem& p) {
  const GroupedScalesLayout& layout = detail::checked_scales_layout(p.scales);
  bool compiled = false;
  int32_t newest = 0;  // the newest architecture of the variants that take the problem and run here
  for (const VariantInfo& v : grouped_variants()) {
    if (!takes(v, p)) continue;
    compiled = true;
    if (runs_here(v)) newest = std::max(newest, v.arch.cc);
  }
  // NOTES: where the GPU runs variants of several architectures (a Hopper GPU: its own and the Ampere-style
  // ones), the heuristic takes its own architecture's: its rates are those of Hopper's wgmma kernels, which the
  // mma.sync kernels do not reach there.
  const detail::DeviceInfo& dev = detail::current_device_info();
  std::vector<TileShape> shapes;
  std::vector<int32_t> ids;
  for (const VariantInfo& v : grouped_variants()) {
    if (!takes(v, p) || !runs_here(v) || v.arch.cc != newest) continue;
    TileShape shape = tile_shape(v);
    shape.ctas_per_sm = resident_ctas(*detail::grouped_variant_ops(v.id), dev);
    if (shape.ctas_per_sm < 1) continue;  // its CTA does not fit this GPU's SM
    shapes.push_back(shape);
    ids.push_back(v.id);
  }
  if (compiled && ids.empty()) return -1;  // none runs on this device: the caller runs PyTorch's grouped GEMM
  if (ids.empty()) {
    WAVETUNE_INVALID("no compiled ", detail::grouped_kind(p.scales), " variant takes ", to_string(p.dtype),
                     " in this build: compile some with python -m wavetune build (--table PATH: what a table "
                     "chooses; --family grouped_gemm: every variant)");
  }
  const GroupedShape shape{p.rows, p.experts, p.n, p.k};
  return ids[choose_grouped(shapes, shape, dev.sm_count, layout.e4m3 ? 1 : 2)];
}

void grouped_gemm(const GroupedGemmProblem& p, int32_t variant_id, void* workspace, size_t workspace_bytes,
                  Stream stream) {
  std::string error = grouped_problem_error(p);
  if (!error.empty()) WAVETUNE_INVALID(error);
  const VariantInfo& v = compiled_variant(variant_id);
  const detail::GroupedVariantOps* ops = detail::grouped_variant_ops(variant_id);
  if (ops->scales != p.scales) {
    WAVETUNE_INVALID("grouped variant ", v.name, " is ", detail::grouped_kind(ops->scales), ", the problem ",
                     detail::grouped_kind(p.scales));
  }
  if (v.dtype != p.dtype) {
    WAVETUNE_INVALID(detail::grouped_kind(p.scales), " variant ", v.name, " takes ", to_string(v.dtype),
                     ", the problem is ", to_string(p.dtype));
  }
  const detail::DeviceInfo& dev = detail::current_device_info();
  error = detail::arch_error(v);
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

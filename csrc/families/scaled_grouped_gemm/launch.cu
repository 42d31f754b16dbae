// The CUDA side of the FP8 grouped family: workspace size, the built-in choice and the launch entry point.
#include "grouped_launch.h"
#include "scaled_grouped_ops.h"
#include "wavetune/errors.h"
#include "wavetune/scaled_grouped.h"

namespace wavetune {
namespace {
const detail::GroupedFamily<ScaledGroupedGemmProblem> kFamily{&scaled_grouped_variants,
                                                              &find_scaled_grouped_variant,
                                                              &detail::scaled_grouped_variant_ops,
                                                              "FP8 grouped",
                                                              "scaled_grouped_configs",
                                                              "scaled_grouped_gemm",
                                                              "scaled_grouped_workspace_bytes",
                                                              1};
}  // namespace

size_t scaled_grouped_workspace_bytes(int32_t experts) {
  return detail::grouped_family_workspace_bytes(kFamily, experts);
}

int32_t scaled_grouped_default_variant(const ScaledGroupedGemmProblem& p) {
  return detail::grouped_family_heuristic(kFamily, p.gemm);
}

void scaled_grouped_gemm(const ScaledGroupedGemmProblem& p, int32_t variant_id, void* workspace,
                         size_t workspace_bytes, Stream stream) {
  std::string error = scaled_grouped_problem_error(p);
  if (!error.empty()) WAVETUNE_INVALID(error);
  detail::grouped_family_launch(kFamily, p, p.gemm, variant_id, workspace, workspace_bytes, stream);
}

}  // namespace wavetune

// The CUDA side of the grouped family: workspace size, the built-in choice and the launch entry point.
#include "grouped_launch.h"
#include "grouped_ops.h"
#include "wavetune/errors.h"
#include "wavetune/grouped.h"

namespace wavetune {
namespace {
const detail::GroupedFamily<GroupedGemmProblem> kFamily{&grouped_variants,
                                                        &find_grouped_variant,
                                                        &detail::grouped_variant_ops,
                                                        "grouped",
                                                        "grouped_configs",
                                                        "grouped_gemm",
                                                        "grouped_workspace_bytes",
                                                        2};
}  // namespace

size_t grouped_workspace_bytes(int32_t experts) { return detail::grouped_family_workspace_bytes(kFamily, experts); }

int32_t grouped_default_variant(const GroupedGemmProblem& p) { return detail::grouped_family_heuristic(kFamily, p); }

void grouped_gemm(const GroupedGemmProblem& p, int32_t variant_id, void* workspace, size_t workspace_bytes,
                  Stream stream) {
  std::string error = grouped_problem_error(p);
  if (!error.empty()) WAVETUNE_INVALID(error);
  detail::grouped_family_launch(kFamily, p, p, variant_id, workspace, workspace_bytes, stream);
}

}  // namespace wavetune

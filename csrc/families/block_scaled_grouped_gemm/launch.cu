// The CUDA side of the block-scaled FP8 grouped family: workspace size, the built-in choice and the launch
// entry point.
#include "block_scaled_grouped_ops.h"
#include "grouped_launch.h"
#include "wavetune/block_scaled_grouped.h"
#include "wavetune/errors.h"

namespace wavetune {
namespace {
const detail::GroupedFamily<BlockScaledGroupedGemmProblem> kFamily{&block_scaled_grouped_variants,
                                                                   &find_block_scaled_grouped_variant,
                                                                   &detail::block_scaled_grouped_variant_ops,
                                                                   "block-scaled FP8 grouped",
                                                                   "block_scaled_grouped_configs",
                                                                   "block_scaled_grouped_gemm",
                                                                   "block_scaled_grouped_workspace_bytes",
                                                                   1};
}  // namespace

size_t block_scaled_grouped_workspace_bytes(int32_t experts) {
  return detail::grouped_family_workspace_bytes(kFamily, experts);
}

int32_t block_scaled_grouped_default_variant(const BlockScaledGroupedGemmProblem& p) {
  return detail::grouped_family_heuristic(kFamily, p.gemm);
}

void block_scaled_grouped_gemm(const BlockScaledGroupedGemmProblem& p, int32_t variant_id, void* workspace,
                               size_t workspace_bytes, Stream stream) {
  std::string error = block_scaled_grouped_problem_error(p);
  if (!error.empty()) WAVETUNE_INVALID(error);
  detail::grouped_family_launch(kFamily, p, p.gemm, variant_id, workspace, workspace_bytes, stream);
}

}  // namespace wavetune

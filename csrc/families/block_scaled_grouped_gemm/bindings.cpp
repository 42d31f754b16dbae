// Bindings of the block-scaled FP8 grouped family (csrc/include/wavetune/block_scaled_grouped.h):
// block_scaled_grouped_variants, ..., block_scaled_grouped_gemm, as both FP8 grouped families bind them
// (e4m3_grouped_bindings.h).
#include "e4m3_grouped_bindings.h"
#include "wavetune/block_scaled_grouped.h"

namespace wavetune::bindings {
namespace {

void bind(pybind11::module_& m);
FamilyBindings registration("block_scaled_grouped_gemm", &bind);

void bind(pybind11::module_& m) {
  bind_e4m3_grouped<BlockScaledGroupedGemmProblem>(
      m,
      {"block_scaled_grouped", "FP8 grouped (128-block scales)", &block_scaled_grouped_variants,
       &block_scaled_grouped_config_space_hash, &block_scaled_grouped_problem_error,
       &block_scaled_grouped_workspace_bytes, &block_scaled_grouped_choice, &block_scaled_grouped_gemm},
      registration);
}

}  // namespace
}  // namespace wavetune::bindings

// Bindings of the FP8 grouped family (csrc/include/wavetune/scaled_grouped.h): scaled_grouped_variants, ...,
// scaled_grouped_gemm, as both FP8 grouped families bind them (e4m3_grouped_bindings.h).
#include "e4m3_grouped_bindings.h"
#include "wavetune/scaled_grouped.h"

namespace wavetune::bindings {
namespace {

void bind(pybind11::module_& m);
FamilyBindings registration("scaled_grouped_gemm", &bind);

void bind(pybind11::module_& m) {
  bind_e4m3_grouped<ScaledGroupedGemmProblem>(
      m,
      {"scaled_grouped", "FP8 grouped (per-row scales)", &scaled_grouped_variants, &scaled_grouped_config_space_hash,
       &scaled_grouped_problem_error, &scaled_grouped_workspace_bytes, &scaled_grouped_choice, &scaled_grouped_gemm},
      registration);
}

}  // namespace
}  // namespace wavetune::bindings

// What the dense family's launch.cu answers without running a kernel, in a build without a CUDA compiler (the
// stubs of the launch functions are generated from cutlass_configs/sm90_gemm.toml's [family] table).
#include "unavailable.h"
#include "variant_ops.h"
#include "wavetune/kernels.h"

namespace wavetune {

using detail::kNoKernels;

BuildInfo build_info() { return {false, detail::kernel_set_name(), detail::config_space_hash(), 0, 0}; }

std::string why_not(const GemmProblem& p, int32_t, const MicroParams&) {
  std::string error = problem_error(p);
  return error.empty() ? kNoKernels : error;
}

}  // namespace wavetune

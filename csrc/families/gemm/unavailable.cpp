// Stands in for the dense family's launch.cu, profiler.cu, cublas_variant.cu and decode_variants.cu when the build found no
// CUDA compiler.
#include "unavailable.h"
#include "variant_ops.h"
#include "wavetune/errors.h"
#include "wavetune/kernels.h"

namespace wavetune {

namespace detail {
std::vector<VariantRegistry<VariantOps>::Entry> library_variants(int32_t) { return {}; }
std::vector<VariantRegistry<VariantOps>::Entry> decode_variants(int32_t) { return {}; }
}  // namespace detail

using detail::kNoKernels;

BuildInfo build_info() { return {false, detail::kernel_set_name(), detail::config_space_hash(), 0, 0}; }

std::string why_not(const GemmProblem& p, int32_t, const MicroParams&) {
  std::string error = problem_error(p);
  return error.empty() ? kNoKernels : error;
}

size_t gemm_workspace_bytes(const GemmProblem&, int32_t, const MicroParams&) { WAVETUNE_FAIL(kNoKernels); }

void gemm(const GemmProblem&, int32_t, const MicroParams&, void*, size_t, Stream) { WAVETUNE_FAIL(kNoKernels); }

std::vector<double> profile(int32_t, int32_t, int32_t, DType, BLayout, const std::vector<Launch>&,
                            const ProfileOptions&) {
  WAVETUNE_FAIL(kNoKernels);
}

}  // namespace wavetune

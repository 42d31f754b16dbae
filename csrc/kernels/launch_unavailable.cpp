// Stands in for launch.cu when the build found no CUDA compiler: the package still imports and lists
// (no) variants, and every launch says why it cannot run.
#include "variant_ops.h"
#include "wavetune/attention.h"
#include "wavetune/errors.h"
#include "wavetune/grouped.h"
#include "wavetune/kernels.h"

namespace wavetune {

namespace {
constexpr const char* kNoKernels =
    "this wavetune build has no GPU kernels: no CUDA compiler (nvcc) was found when it was built. Install a "
    "CUDA 12.x/13.x toolkit, make nvcc visible (PATH or CUDACXX) and reinstall with pip install .";
}

namespace detail {
std::vector<VariantRegistry<VariantOps>::Entry> library_variants(int32_t) { return {}; }
}  // namespace detail

BuildInfo build_info() { return {false, detail::kernel_set_name(), detail::config_space_hash(), 0, 0}; }

std::string why_not(const GemmProblem& p, int32_t, const MicroParams&) {
  std::string error = problem_error(p);
  return error.empty() ? kNoKernels : error;
}

size_t gemm_workspace_bytes(const GemmProblem&, int32_t, const MicroParams&) { WAVETUNE_FAIL(kNoKernels); }

void gemm(const GemmProblem&, int32_t, const MicroParams&, void*, size_t, Stream) { WAVETUNE_FAIL(kNoKernels); }

DeviceProperties device_properties() { WAVETUNE_FAIL(kNoKernels); }

std::string no_device_reason() { return kNoKernels; }

std::vector<double> profile(int32_t, int32_t, int32_t, DType, BLayout, const std::vector<Launch>&,
                            const ProfileOptions&) {
  WAVETUNE_FAIL(kNoKernels);
}

size_t grouped_workspace_bytes(int32_t) { WAVETUNE_FAIL(kNoKernels); }

int32_t grouped_default_variant(const GroupedGemmProblem&) { WAVETUNE_FAIL(kNoKernels); }

void grouped_gemm(const GroupedGemmProblem&, int32_t, void*, size_t, Stream) { WAVETUNE_FAIL(kNoKernels); }

AttentionLaunch attention_default_launch(const AttentionProblem&) { WAVETUNE_FAIL(kNoKernels); }

AttentionLaunch attention_choice(const AttentionProblem&, const Selector*) { WAVETUNE_FAIL(kNoKernels); }

void attention(const AttentionProblem&, const AttentionLaunch&, void*, size_t, Stream) { WAVETUNE_FAIL(kNoKernels); }

}  // namespace wavetune

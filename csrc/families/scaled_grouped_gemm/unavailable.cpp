// Stands in for the FP8 grouped family's launch.cu when the build found no CUDA compiler.
#include "unavailable.h"
#include "wavetune/errors.h"
#include "wavetune/scaled_grouped.h"

namespace wavetune {

using detail::kNoKernels;

size_t scaled_grouped_workspace_bytes(int32_t) { WAVETUNE_FAIL(kNoKernels); }

int32_t scaled_grouped_default_variant(const ScaledGroupedGemmProblem&) { WAVETUNE_FAIL(kNoKernels); }

void scaled_grouped_gemm(const ScaledGroupedGemmProblem&, int32_t, void*, size_t, Stream) { WAVETUNE_FAIL(kNoKernels); }

}  // namespace wavetune

// Stands in for the grouped family's launch.cu when the build found no CUDA compiler.
#include "unavailable.h"
#include "wavetune/errors.h"
#include "wavetune/grouped.h"

namespace wavetune {

using detail::kNoKernels;

size_t grouped_workspace_bytes(int32_t) { WAVETUNE_FAIL(kNoKernels); }

int32_t grouped_default_variant(const GroupedGemmProblem&) { WAVETUNE_FAIL(kNoKernels); }

void grouped_gemm(const GroupedGemmProblem&, int32_t, void*, size_t, Stream) { WAVETUNE_FAIL(kNoKernels); }

}  // namespace wavetune

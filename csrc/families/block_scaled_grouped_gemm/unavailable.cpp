// Stands in for the block-scaled FP8 grouped family's launch.cu when the build found no CUDA compiler.
#include "unavailable.h"
#include "wavetune/block_scaled_grouped.h"
#include "wavetune/errors.h"

namespace wavetune {

using detail::kNoKernels;

size_t block_scaled_grouped_workspace_bytes(int32_t) { WAVETUNE_FAIL(kNoKernels); }

int32_t block_scaled_grouped_default_variant(const BlockScaledGroupedGemmProblem&) { WAVETUNE_FAIL(kNoKernels); }

void block_scaled_grouped_gemm(const BlockScaledGroupedGemmProblem&, int32_t, void*, size_t, Stream) {
  WAVETUNE_FAIL(kNoKernels);
}

}  // namespace wavetune

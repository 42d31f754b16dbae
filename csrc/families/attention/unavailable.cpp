// Stands in for the attention family's launch.cu when the build found no CUDA compiler.
#include "unavailable.h"
#include "wavetune/attention.h"
#include "wavetune/errors.h"

namespace wavetune {

using detail::kNoKernels;

AttentionLaunch attention_default_launch(const AttentionProblem&) { WAVETUNE_FAIL(kNoKernels); }

void attention(const AttentionProblem&, const AttentionLaunch&, void*, size_t, Stream) { WAVETUNE_FAIL(kNoKernels); }

}  // namespace wavetune

// Stands in for the paged attention's launch.cu when the build found no CUDA compiler.
#include "paged_ops.h"
#include "unavailable.h"
#include "wavetune/errors.h"

namespace wavetune {

namespace detail {
std::vector<VariantRegistry<PagedVariantOps>::Entry> paged_variant_entries() { return {}; }
}  // namespace detail

int32_t paged_attention_splits(const PagedAttentionProblem&) { WAVETUNE_FAIL(detail::kNoKernels); }

void paged_attention(const PagedAttentionProblem&, int32_t, void*, size_t, Stream) { WAVETUNE_FAIL(detail::kNoKernels); }

}  // namespace wavetune

// Stands in for the paged attention's launch.cu when the build found no CUDA compiler.
#include "paged_ops.h"
#include "unavailable.h"
#include "wavetune/errors.h"

namespace wavetune {

namespace detail {
std::vector<VariantRegistry<PagedVariantOps>::Entry> paged_variant_entries() { return {}; }
}  // namespace detail

PagedAttentionLaunch paged_attention_choice(const PagedAttentionProblem&) { WAVETUNE_FAIL(detail::kNoKernels); }

int32_t paged_attention_resident_ctas(int32_t) { WAVETUNE_FAIL(detail::kNoKernels); }

int64_t paged_attention_cluster_ctas(int32_t, int32_t) { WAVETUNE_FAIL(detail::kNoKernels); }

void paged_attention(const PagedAttentionProblem&, const PagedAttentionLaunch&, void*, size_t, Stream) {
  WAVETUNE_FAIL(detail::kNoKernels);
}

}  // namespace wavetune

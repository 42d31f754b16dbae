// Stands in for the attention family's launch.cu and paged_launch.cu when the build found no CUDA compiler.
#include "paged_ops.h"
#include "unavailable.h"
#include "wavetune/attention.h"
#include "wavetune/errors.h"

namespace wavetune {

using detail::kNoKernels;

namespace detail {
std::vector<VariantRegistry<PagedVariantOps>::Entry> paged_variant_entries() { return {}; }
Launch paged_choice(const PagedAttentionProblem&) { WAVETUNE_FAIL(kNoKernels); }
}  // namespace detail

Launch attention_default_launch(const AttentionProblem&) { WAVETUNE_FAIL(kNoKernels); }

void attention(const AttentionProblem&, const Launch&, void*, size_t, Stream) { WAVETUNE_FAIL(kNoKernels); }

int32_t paged_attention_resident_ctas(int32_t) { WAVETUNE_FAIL(kNoKernels); }

int64_t paged_attention_cluster_ctas(int32_t, int32_t) { WAVETUNE_FAIL(kNoKernels); }

void paged_attention(const PagedAttentionProblem&, const Launch&, void*, size_t, Stream) {
  WAVETUNE_FAIL(kNoKernels);
}

}  // namespace wavetune

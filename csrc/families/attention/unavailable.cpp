// The paged kernels' catalog (none) and choice in a build without a CUDA compiler (the stubs of the launch
// functions are generated from cutlass_configs/sm90_attention.toml's [family] table).
#include "paged_ops.h"
#include "unavailable.h"
#include "wavetune/attention.h"
#include "wavetune/errors.h"

namespace wavetune::detail {

std::vector<VariantRegistry<PagedVariantOps>::Entry> paged_variant_entries() { return {}; }

Launch paged_choice(const PagedAttentionProblem&) { WAVETUNE_FAIL(kNoKernels); }
Launch paged_model_choice(const PagedAttentionProblem&) { WAVETUNE_FAIL(kNoKernels); }

}  // namespace wavetune::detail

// The block-scaled FP8 grouped family's run-time choice (block_scaled_grouped.h, block_scaled_grouped_choice):
// one policy for every caller.
#include "grouped_choice.h"
#include "wavetune/block_scaled_grouped.h"

namespace wavetune {

int32_t block_scaled_grouped_choice(const BlockScaledGroupedGemmProblem& p, const Selector* table) {
  return detail::grouped_family_choice(p.gemm, table, [&] { return block_scaled_grouped_default_variant(p); });
}

}  // namespace wavetune

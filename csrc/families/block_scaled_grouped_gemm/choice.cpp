// The block-scaled FP8 grouped family's run-time choice (block_scaled_grouped.h, block_scaled_grouped_choice):
// one policy for every caller.
#include "wavetune/block_scaled_grouped.h"
#include "wavetune/lookup.h"

namespace wavetune {

int32_t block_scaled_grouped_choice(const BlockScaledGroupedGemmProblem& p, const Selector* table) {
  const GroupedGemmProblem& g = p.gemm;
  if (table && g.rows > 0 && table->candidate_count(g.dtype, BLayout::col) > 0) {
    return table->select({g.dtype, BLayout::col, g.rows, g.n, g.k, g.experts}).variant;
  }
  return block_scaled_grouped_default_variant(p);
}

}  // namespace wavetune

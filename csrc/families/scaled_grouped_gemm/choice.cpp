// The FP8 grouped family's run-time choice (scaled_grouped.h, scaled_grouped_choice): one policy for every caller.
#include "wavetune/lookup.h"
#include "wavetune/scaled_grouped.h"

namespace wavetune {

int32_t scaled_grouped_choice(const ScaledGroupedGemmProblem& p, const Selector* table) {
  const GroupedGemmProblem& g = p.gemm;
  if (table && g.rows > 0 && table->candidate_count(g.dtype, BLayout::col) > 0) {
    return table->select({g.dtype, BLayout::col, g.rows, g.n, g.k, g.experts}).variant;
  }
  return scaled_grouped_default_variant(p);
}

}  // namespace wavetune

// The grouped-GEMM family's run-time choice (grouped.h, grouped_choice): one policy for every caller.
#include "wavetune/grouped.h"
#include "wavetune/lookup.h"

namespace wavetune {

int32_t grouped_choice(const GroupedGemmProblem& p, const Selector* table) {
  if (table && p.rows > 0 && table->candidate_count(p.dtype, BLayout::col) > 0) {
    return table->select({p.dtype, BLayout::col, p.rows, p.n, p.k, p.experts}).variant;
  }
  return grouped_default_variant(p);
}

}  // namespace wavetune

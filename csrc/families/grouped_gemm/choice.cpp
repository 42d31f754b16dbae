// The grouped-GEMM family's run-time choice (grouped.h, choose): one policy for every caller and
// scales mode. The table's, where there is one with a compiled config of the problem's dtype and rows to
// choose for; else the built-in heuristic's.
#include "grouped_ops.h"
#include "wavetune/errors.h"
#include "wavetune/grouped.h"
#include "wavetune/lookup.h"

namespace wavetune {

Launch choose(const GroupedGemmProblem& p, const Selector* table) {
  const GroupedScalesLayout& layout = detail::checked_scales_layout(p.scales);
  if (table && table->scales() != layout.name) {
    WAVETUNE_INVALID("a grouped table of scales '", table->scales(), "' chooses for the problems of those scales, ",
                     "not for a ", detail::grouped_kind(p.scales), " problem");
  }
  if (table && p.rows > 0 && table->candidate_count(p.dtype, BLayout::col) > 0) {
    return {table->select({p.dtype, BLayout::col, p.rows, p.n, p.k, p.experts}).variant, {}};
  }
  return {grouped_default_variant(p), {}};
}

}  // namespace wavetune

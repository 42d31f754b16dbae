// The grouped-GEMM family's run-time choice (grouped.h, choose): one policy for every caller and
// scales mode. The table's, where there is one with a compiled config of the problem's dtype and rows to
// choose for; else the built-in heuristic's.
#include <algorithm>
#include <climits>

#include "grouped_ops.h"
#include "wavetune/batch_invariance.h"
#include "wavetune/errors.h"
#include "wavetune/grouped.h"
#include "wavetune/lookup.h"

namespace wavetune {
namespace {

// The batch-invariant choice without a table (batch_invariance.h, invariant_heuristic_variant), the largest M being
// kInvariantReferenceRows rows per expert.
Launch invariant_default(const GroupedGemmProblem& p, BatchInvariance level) {
  GroupedGemmProblem largest = p;
  largest.rows = int32_t(std::min<int64_t>(INT_MAX, kInvariantReferenceRows * p.experts));
  const int32_t anchor_id = grouped_default_variant(largest), own_id = grouped_default_variant(p);
  const VariantInfo* anchor = anchor_id < 0 ? nullptr : find_grouped_variant(anchor_id);
  const VariantInfo* chosen = anchor ? invariant_heuristic_variant(*find_grouped_variant(own_id), *anchor, level)
                                     : nullptr;
  if (!chosen) {
    WAVETUNE_INVALID("no batch-invariant ", detail::grouped_kind(p.scales), " variant of ", to_string(p.dtype),
                     " runs on this device without a table");
  }
  return {chosen->id, {}};
}

}  // namespace

Launch choose(const GroupedGemmProblem& p, const Selector* table, const ChoiceOptions& options) {
  const GroupedScalesLayout& layout = detail::checked_scales_layout(p.scales);
  if (table && table->scales() != layout.name) {
    WAVETUNE_INVALID("a grouped table of scales '", table->scales(), "' chooses for the problems of those scales, ",
                     "not for a ", detail::grouped_kind(p.scales), " problem");
  }
  const BatchInvariance level = options.batch_invariance;
  if (table && p.rows > 0 && table->candidate_count(p.dtype, BLayout::col) > 0) {
    const Problem q{p.dtype, BLayout::col, p.rows, p.n, p.k, p.experts};
    return {(level == BatchInvariance::off ? table->select(q) : table->select_invariant(q, level)).variant, {}};
  }
  if (level != BatchInvariance::off && p.rows > 0) return invariant_default(p, level);
  return {grouped_default_variant(p), {}};
}

}  // namespace wavetune

// The run-time choice every grouped family makes (grouped_choice, scaled_grouped_choice,
// block_scaled_grouped_choice): the table's, where there is one with a compiled config of the problem's dtype
// and rows to choose for; else the family's built-in heuristic's.
#pragma once

#include "wavetune/grouped.h"
#include "wavetune/lookup.h"

namespace wavetune::detail {

template <class Heuristic>
int32_t grouped_family_choice(const GroupedGemmProblem& p, const Selector* table, Heuristic heuristic) {
  if (table && p.rows > 0 && table->candidate_count(p.dtype, BLayout::col) > 0) {
    return table->select({p.dtype, BLayout::col, p.rows, p.n, p.k, p.experts}).variant;
  }
  return heuristic();
}

}  // namespace wavetune::detail

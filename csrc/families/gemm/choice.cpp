// The dense GEMM family's run-time choice (kernels.h, choose): one policy for every caller.
#include <climits>

#include "wavetune/batch_invariance.h"
#include "wavetune/errors.h"
#include "wavetune/kernels.h"
#include "wavetune/lookup.h"

namespace wavetune {

Launch choose(const GemmProblem& p, const Selector* table, const ChoiceOptions& options) {
  const BatchInvariance level = options.batch_invariance;
  if (table && table->candidate_count(p.dtype, p.b_layout) > 0) {
    const Problem q{p.dtype, p.b_layout, p.m, p.n, p.k};
    const Choice c = level == BatchInvariance::off ? table->select(q) : table->select_invariant(q, level);
    return {c.variant, c.micro};
  }
  if (level == BatchInvariance::off) return {default_variant(p), MicroParams{}};
  GemmProblem largest = p;
  largest.m = INT_MAX;  // the heuristic reads M only
  const VariantInfo& anchor = *find_variant(default_variant(largest));
  const VariantInfo* chosen = invariant_heuristic_variant(*find_variant(default_variant(p)), anchor, level);
  if (!chosen) {
    WAVETUNE_INVALID("no batch-invariant GEMM of ", to_string(p.dtype), " with ", to_string(p.b_layout),
                     "-major B without a table's compiled configs: the built-in choice runs ", anchor.name, " (",
                     reduction_order(anchor, Decomposition::data_parallel, 1).condition,
                     "); compile the variants of the GPU's table with python -m wavetune build --table PATH");
  }
  return {chosen->id, {Decomposition::data_parallel, 1, Raster::heuristic, 1}};
}

}  // namespace wavetune

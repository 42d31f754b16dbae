// The dense GEMM family's run-time choice (kernels.h, choose): one policy for every caller.
#include <climits>
#include <string>

#include "variant_ops.h"
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
  largest.m = INT_MAX;  // the buckets read M only
  const VariantInfo* anchor = detail::bucket_variant(largest);
  const VariantInfo* chosen = anchor ? invariant_heuristic_variant(*detail::bucket_variant(p), *anchor, level)
                                     : nullptr;
  if (!chosen) {
    WAVETUNE_INVALID("no batch-invariant GEMM of ", to_string(p.dtype), " with ", to_string(p.b_layout),
                     "-major B without a table's compiled configs: ",
                     anchor ? std::string("the built-in buckets run ") + anchor->name + " (" +
                                  reduction_order(*anchor, Decomposition::data_parallel, 1).condition + ")"
                            : std::string("no CUTLASS variant is compiled"),
                     "; compile the variants of the GPU's table with python -m wavetune build --table PATH");
  }
  return {chosen->id, {Decomposition::data_parallel, 1, Raster::heuristic, 1}};
}

}  // namespace wavetune

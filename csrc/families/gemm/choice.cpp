// The dense GEMM family's run-time choice (kernels.h, choose): one policy for every caller.
#include "wavetune/kernels.h"
#include "wavetune/lookup.h"

namespace wavetune {

Launch choose(const GemmProblem& p, const Selector* table) {
  if (table && table->candidate_count(p.dtype, p.b_layout) > 0) {
    const Choice c = table->select({p.dtype, p.b_layout, p.m, p.n, p.k});
    return {c.variant, c.micro};
  }
  return {default_variant(p), MicroParams{}};
}

}  // namespace wavetune

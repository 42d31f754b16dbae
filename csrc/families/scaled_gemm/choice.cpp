// The scaled GEMM family's run-time choice (scaled_gemm.h, choose): its wave models, no tables.
#include "scaled_ops.h"
#include "wavetune/errors.h"
#include "wavetune/scaled_gemm.h"

namespace wavetune {

Launch choose(const ScaledGemmProblem& p, const Selector* table) {
  if (table) WAVETUNE_INVALID("the scaled GEMM has no tables: its choice takes none (pass nullptr)");
  return {detail::scaled_variant_choice(p), {}};
}

}  // namespace wavetune

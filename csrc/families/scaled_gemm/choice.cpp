// The scaled GEMM family's run-time choice (scaled_gemm.h, choose): its wave models, no tables.
#include "scaled_ops.h"
#include "wavetune/errors.h"
#include "wavetune/scaled_gemm.h"

namespace wavetune {

Launch choose(const ScaledGemmProblem& p, const Selector* table, const ChoiceOptions& options) {
  if (table) WAVETUNE_INVALID("the scaled GEMM has no tables: its choice takes none (pass nullptr)");
  if (options.batch_invariance != BatchInvariance::off) {
    WAVETUNE_INVALID("the scaled (FP8) GEMM has no batch-invariant choice: it moves between its decode kernels, ",
                     "CUTLASS and cuBLASLt by M, and no one of them serves every M");
  }
  return {detail::scaled_variant_choice(p), {}};
}

}  // namespace wavetune

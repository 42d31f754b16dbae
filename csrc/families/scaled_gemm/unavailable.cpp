// The scaled GEMM's choice in a build without a CUDA compiler (the stubs of its launch functions are generated
// from cutlass_configs/sm90_scaled_gemm.toml's [family] table).
#include "scaled_ops.h"
#include "unavailable.h"
#include "wavetune/errors.h"
#include "wavetune/scaled_gemm.h"

namespace wavetune::detail {

int32_t scaled_variant_choice(const ScaledGemmProblem& p) {
  // No variant is compiled: the calls the choice gives the CUTLASS variants or to other GEMMs get -1.
  const int32_t limit = p.scale_a_kind == ScaleKind::block128 ? kScaledGemmMaxBlockTokens : kScaledGemmMaxTokens;
  if (p.m > limit || (p.scale_a_kind == ScaleKind::tensor && p.scale_b_kind == ScaleKind::tensor)) return -1;
  WAVETUNE_FAIL(kNoKernels);
}

}  // namespace wavetune::detail

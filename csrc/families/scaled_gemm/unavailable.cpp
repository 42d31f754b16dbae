// Stands in for the scaled GEMM's launch.cu when the build found no CUDA compiler.
#include "scaled_ops.h"
#include "unavailable.h"
#include "wavetune/errors.h"

namespace wavetune {

namespace detail {
std::vector<VariantRegistry<ScaledVariantOps>::Entry> scaled_decode_variants(int32_t) { return {}; }
std::vector<VariantRegistry<ScaledVariantOps>::Entry> scaled_library_variants(int32_t) { return {}; }

int32_t scaled_variant_choice(const ScaledGemmProblem& p) {
  // No variant is compiled: the calls the choice gives the CUTLASS variants or to other GEMMs get -1.
  const int32_t limit = p.scale_a_kind == ScaleKind::block128 ? kScaledGemmMaxBlockTokens : kScaledGemmMaxTokens;
  if (p.m > limit || (p.scale_a_kind == ScaleKind::tensor && p.scale_b_kind == ScaleKind::tensor)) return -1;
  WAVETUNE_FAIL(kNoKernels);
}
}  // namespace detail

using detail::kNoKernels;

int32_t scaled_gemm_resident_ctas(int32_t) { WAVETUNE_FAIL(kNoKernels); }

size_t scaled_gemm_workspace_bytes(const ScaledGemmProblem&, int32_t, int32_t) { WAVETUNE_FAIL(kNoKernels); }

void scaled_gemm(const ScaledGemmProblem&, int32_t, int32_t, void*, size_t, Stream) { WAVETUNE_FAIL(kNoKernels); }

void quantize_fp8(const void*, int64_t, DType, int32_t, int32_t, int32_t, void*, float*, const float*, Stream) {
  WAVETUNE_FAIL(kNoKernels);
}

}  // namespace wavetune

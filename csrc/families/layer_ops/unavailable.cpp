// Stands in for the layer ops' launch.cu when the build found no CUDA compiler.
#include "unavailable.h"
#include "wavetune/errors.h"
#include "wavetune/layer_ops.h"

namespace wavetune {

void rms_norm(const void*, int64_t, const void*, void*, int64_t, int32_t, int32_t, float, DType, Stream) {
  WAVETUNE_FAIL(detail::kNoKernels);
}

void add_rms_norm(const void*, int64_t, const void*, int64_t, void*, int64_t, const void*, void*, int64_t, int32_t,
                  int32_t, float, DType, Stream) {
  WAVETUNE_FAIL(detail::kNoKernels);
}

void silu_and_mul(const void*, int64_t, void*, int64_t, int32_t, int32_t, DType, Stream) {
  WAVETUNE_FAIL(detail::kNoKernels);
}

void rotary_embedding(const RotaryProblem&, Stream) { WAVETUNE_FAIL(detail::kNoKernels); }

void rotary_cache_write(const RotaryProblem&, const StaticCacheWrite&, Stream) { WAVETUNE_FAIL(detail::kNoKernels); }

void moe_align(const MoeRouting&, int32_t*, int32_t*, Stream) { WAVETUNE_FAIL(detail::kNoKernels); }

void moe_gather(const void*, int64_t, const int32_t*, int32_t, int32_t, void*, int64_t, int32_t, DType, Stream) {
  WAVETUNE_FAIL(detail::kNoKernels);
}

void moe_combine(const void*, int64_t, const int32_t*, const MoeRouting&, const float*, void*, int64_t, int32_t, DType,
                 Stream) {
  WAVETUNE_FAIL(detail::kNoKernels);
}

}  // namespace wavetune

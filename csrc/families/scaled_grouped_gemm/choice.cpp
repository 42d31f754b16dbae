// The FP8 grouped family's run-time choice (scaled_grouped.h, scaled_grouped_choice): one policy for every caller.
#include "grouped_choice.h"
#include "wavetune/scaled_grouped.h"

namespace wavetune {

int32_t scaled_grouped_choice(const ScaledGroupedGemmProblem& p, const Selector* table) {
  return detail::grouped_family_choice(p.gemm, table, [&] { return scaled_grouped_default_variant(p); });
}

}  // namespace wavetune

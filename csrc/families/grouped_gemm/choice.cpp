// The grouped-GEMM family's run-time choice (grouped.h, grouped_choice): one policy for every caller.
#include "grouped_choice.h"

namespace wavetune {

int32_t grouped_choice(const GroupedGemmProblem& p, const Selector* table) {
  return detail::grouped_family_choice(p, table, [&] { return grouped_default_variant(p); });
}

}  // namespace wavetune

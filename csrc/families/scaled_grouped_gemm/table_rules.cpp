// How the lookup engine treats FP8 grouped tables (family.h): as grouped-GEMM tables (a problem is the experts
// of one layer, data_parallel configs mapped by grouped_mapping.h).
#include "registered.h"
#include "wavetune/family.h"

namespace wavetune {
namespace {
const TableFamily kScaledGroupedGemm{"scaled_grouped_gemm", kMaxGroups, false, true, false, nullptr, nullptr, nullptr};
const detail::Registration<TableFamily> registration(&kScaledGroupedGemm);
}  // namespace
}  // namespace wavetune

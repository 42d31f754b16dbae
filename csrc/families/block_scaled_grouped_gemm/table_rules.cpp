// How the lookup engine treats block-scaled FP8 grouped tables (family.h): as grouped-GEMM tables (a problem
// is the experts of one layer, data_parallel configs mapped by grouped_mapping.h).
#include "registered.h"
#include "wavetune/family.h"

namespace wavetune {
namespace {
const TableFamily kBlockScaledGroupedGemm{"block_scaled_grouped_gemm", kMaxGroups, false, true, false,
                                          nullptr, nullptr, nullptr};
const detail::Registration<TableFamily> registration(&kBlockScaledGroupedGemm);
}  // namespace
}  // namespace wavetune

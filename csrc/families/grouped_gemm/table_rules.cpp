// How the lookup engine treats grouped-GEMM tables (family.h): a problem is the experts of one layer, its
// configs launch CUTLASS's persistent grouped kernel (data_parallel only), mapped by grouped_mapping.h.
#include "registered.h"
#include "wavetune/family.h"

namespace wavetune {
namespace {
const TableFamily kGroupedGemm{"grouped_gemm", kMaxGroups, false, true, false, nullptr, nullptr, nullptr};
const detail::Registration<TableFamily> registration(&kGroupedGemm);
}  // namespace
}  // namespace wavetune

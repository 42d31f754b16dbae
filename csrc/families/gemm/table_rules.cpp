// How the lookup engine treats dense GEMM tables (family.h): one GEMM per problem, exact ranges, every
// decomposition, the GEMM wave model (mapping.h).
#include "registered.h"
#include "wavetune/family.h"

namespace wavetune {
namespace {
const TableFamily kGemm{"gemm", 1, true, false, true, nullptr, nullptr, nullptr};
const detail::Registration<TableFamily> registration(&kGemm);
}  // namespace
}  // namespace wavetune

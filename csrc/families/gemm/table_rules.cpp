// How the lookup engine treats dense GEMM tables (family.h): one GEMM per problem, exact ranges, every
// decomposition, the GEMM wave model (mapping.h); besides its config space's variants, its tables may name the
// decode GEMM's and cuBLAS (builtin_candidates.h).
#include <string>
#include <vector>

#include "builtin_candidates.h"
#include "common.h"
#include "wavetune/family.h"

namespace wavetune {
namespace {
// One GEMM, one launch (mapping.h).
Coordinates gemm_coordinates(const TileShape& t, Decomposition decomposition, int32_t splits, const Problem& p,
                             int32_t sm_count, int64_t* launches) {
  *launches = 1;
  return map_problem(t, p.m, p.n, p.k, decomposition, splits, sm_count);
}

TableFamily gemm_rules() {
  TableFamily f{"gemm"};
  f.exact_records = true;
  f.stream_k = true;
  f.coordinates = &gemm_coordinates;
  return f;
}
std::vector<std::string> builtin_candidate_names() {
  std::vector<std::string> names;
#define WAVETUNE_DECODE_NAME(DT, TOKENS, ROW_TILES, WN, WK, UNROLL, SCHEDULER, NAME) names.push_back(NAME);
  WAVETUNE_DECODE_VARIANTS(WAVETUNE_DECODE_NAME)
#undef WAVETUNE_DECODE_NAME
  for (const auto& by_layout : detail::kCublasVariantNames) names.insert(names.end(), by_layout, by_layout + 2);
  return names;
}
const lookup_detail::TableRegistration registration(gemm_rules(), &builtin_candidate_names);
}  // namespace
}  // namespace wavetune

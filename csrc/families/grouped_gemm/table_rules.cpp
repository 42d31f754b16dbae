// How the lookup engine treats grouped-GEMM tables (family.h): a problem is the experts of one layer, its
// configs launch CUTLASS's persistent grouped kernel (data_parallel only), mapped by grouped_mapping.h; one
// table per GPU model and scales mode (grouped.h's GroupedScales, a table's meta `scales`).
#include <string>
#include <vector>

#include "common.h"
#include "wavetune/family.h"
#include "wavetune/grouped.h"
#include "wavetune/grouped_mapping.h"

namespace wavetune {
namespace {

std::vector<std::string> scales_modes() {
  std::vector<std::string> names;
  for (const GroupedScalesLayout& layout : kGroupedScales) names.push_back(layout.name);
  return names;
}

// The experts' rows spread evenly over min(experts, rows) of them, one persistent launch (grouped_mapping.h).
Coordinates balanced_experts_coordinates(const TileShape& t, Decomposition, int32_t, const Problem& p,
                                         int32_t sm_count, int64_t* launches) {
  *launches = 1;
  return map_grouped_balanced(t, {p.m, p.groups, p.n, p.k}, sm_count);
}

TableFamily grouped_gemm_rules() {
  TableFamily f{"grouped_gemm"};
  f.max_groups = kMaxGroups;
  f.data_parallel_only = true;
  f.coordinates = &balanced_experts_coordinates;
  f.scales = &scales_modes;
  return f;
}
const lookup_detail::TableRegistration registration(grouped_gemm_rules());
}  // namespace
}  // namespace wavetune

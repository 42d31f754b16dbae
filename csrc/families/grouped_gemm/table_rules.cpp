// How the lookup engine treats grouped-GEMM tables (family.h): a problem is the experts of one layer, its
// configs launch CUTLASS's persistent grouped kernel (data_parallel only), mapped by grouped_mapping.h; one
// table per GPU model and scales mode (grouped.h's GroupedScales, a table's meta `scales`).
#include <string>
#include <vector>

#include "registered.h"
#include "wavetune/family.h"
#include "wavetune/grouped.h"

namespace wavetune {
namespace {

std::vector<std::string> scales_modes() {
  std::vector<std::string> names;
  for (const GroupedScalesLayout& layout : kGroupedScales) names.push_back(layout.name);
  return names;
}

TableFamily grouped_gemm_rules() {
  TableFamily f{"grouped_gemm"};
  f.max_groups = kMaxGroups;
  f.data_parallel_only = true;
  f.scales = &scales_modes;
  return f;
}
const TableFamily kGroupedGemm = grouped_gemm_rules();
const detail::Registration<TableFamily> registration(&kGroupedGemm);
}  // namespace
}  // namespace wavetune

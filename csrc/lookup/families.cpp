// The table families registered with the lookup library (family.h), and the config spaces it was generated from.
#include <algorithm>
#include <string>
#include <vector>

#include "common.h"
#include "families.inc"
#include "registered.h"
#include "wavetune/family.h"

namespace wavetune {

const std::vector<const TableFamily*>& table_families() { return detail::registered<TableFamily>(); }

const TableFamily* find_table_family(const std::string& name) { return detail::find_registered<TableFamily>(name); }

namespace {

const std::vector<ConfigSpace>& config_spaces() {
#define WAVETUNE_SPACE_ROW(...) WAVETUNE_VARIANT_INFO(__VA_ARGS__),
#define WAVETUNE_SPACE(FAMILY, HASH, LIST, HEURISTIC_SET, SCALES_HASHES) \
  {FAMILY, HASH, {LIST(WAVETUNE_SPACE_ROW)}, {HEURISTIC_SET}, {SCALES_HASHES}},
  static const std::vector<ConfigSpace> spaces{WAVETUNE_GENERATED_SPACES(WAVETUNE_SPACE)};
#undef WAVETUNE_SPACE
#undef WAVETUNE_SPACE_ROW
  return spaces;
}

}  // namespace

const ConfigSpace* find_config_space(const std::string& family) {
  const std::vector<ConfigSpace>& spaces = config_spaces();
  const auto space =
      std::find_if(spaces.begin(), spaces.end(), [&](const ConfigSpace& s) { return family == s.family; });
  return space == spaces.end() ? nullptr : &*space;
}

namespace lookup_detail {
namespace {

bool is_builtin_candidate(const std::string& family, const std::string& variant) {
  const BuiltinCandidates* builtin = detail::find_registered<BuiltinCandidates>(family);
  if (!builtin) return false;
  const std::vector<std::string> names = builtin->variant_names();
  return std::find(names.begin(), names.end(), variant) != names.end();
}

}  // namespace

void check_known_variant(const Table& table, size_t config, const std::string& family, const std::string& space_hash) {
  const ConfigSpace* space = find_config_space(family);
  if (!space || space_hash != space->hash) return;
  const std::string& variant = table.configs[config].variant_name;
  const std::vector<VariantInfo>& variants = space->variants;
  if (std::any_of(variants.begin(), variants.end(), [&](const VariantInfo& v) { return variant == v.name; }) ||
      is_builtin_candidate(family, variant)) {
    return;
  }
  table_error(table.origin, ": config ", config, " names variant ", quoted(variant), ", which no build has: it is ",
              "not in the ", family, " config space ", space_hash, " (", variants.size(), " variants) nor one of the ",
              "family's built-in candidates; the table is corrupt or was edited (re-tune it: python -m wavetune tune)");
}

}  // namespace lookup_detail
}  // namespace wavetune

// The table families registered with the lookup library (family.h), and the variant names their tables may hold.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "common.h"
#include "families.inc"
#include "registered.h"
#include "wavetune/family.h"

namespace wavetune {

const std::vector<const TableFamily*>& table_families() { return detail::registered<TableFamily>(); }

const TableFamily* find_table_family(const std::string& name) { return detail::find_registered<TableFamily>(name); }

namespace lookup_detail {
namespace {

// A config space this library was generated from: its family, hash and every variant's name.
struct GeneratedSpace {
  const char* family;
  const char* hash;
  std::vector<std::string_view> variant_names;
};

const std::vector<GeneratedSpace>& generated_spaces() {
#define WAVETUNE_SPACE(FAMILY, HASH, NAMES) {FAMILY, HASH, {NAMES}},
  static const std::vector<GeneratedSpace> spaces{WAVETUNE_GENERATED_SPACES(WAVETUNE_SPACE)};
#undef WAVETUNE_SPACE
  return spaces;
}

bool is_builtin_candidate(const std::string& family, const std::string& variant) {
  const BuiltinCandidates* builtin = detail::find_registered<BuiltinCandidates>(family);
  if (!builtin) return false;
  const std::vector<std::string> names = builtin->variant_names();
  return std::find(names.begin(), names.end(), variant) != names.end();
}

}  // namespace

void check_known_variant(const Table& table, size_t config, const std::string& family, const std::string& space_hash) {
  const std::vector<GeneratedSpace>& spaces = generated_spaces();
  const auto space = std::find_if(spaces.begin(), spaces.end(), [&](const GeneratedSpace& s) {
    return family == s.family && space_hash == s.hash;
  });
  if (space == spaces.end()) return;
  const std::string& variant = table.configs[config].variant_name;
  const std::vector<std::string_view>& names = space->variant_names;
  if (std::find(names.begin(), names.end(), variant) != names.end() || is_builtin_candidate(family, variant)) return;
  table_error(table.origin, ": config ", config, " names variant ", quoted(variant), ", which no build has: it is ",
              "not in the ", family, " config space ", space_hash, " (", names.size(), " variants) nor one of the ",
              "family's built-in candidates; the table is corrupt or was edited (re-tune it: python -m wavetune tune)");
}

}  // namespace lookup_detail
}  // namespace wavetune

// Internal helpers shared by the table parser and the selector.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "registered.h"
#include "wavetune/family.h"
#include "wavetune/lookup.h"

namespace wavetune::lookup_detail {

// A TableError whose message starts with "wavetune: " like every other wavetune error.
template <class... Parts>
[[noreturn]] void table_error(const Parts&... parts) {
  std::ostringstream os;
  os << "wavetune: ";
  (os << ... << parts);
  throw TableError(os.str());
}

// Bytes from a file, shown in a message: quoted, non-printable bytes as \xNN, long values cut short.
inline std::string quoted(std::string_view s, size_t max_chars = 60) {
  static const char* kHex = "0123456789abcdef";
  std::string out = "'";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == max_chars) {
      out += "...";
      break;
    }
    const unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch >= 0x20 && ch < 0x7f && ch != '\\' && ch != '\'') {
      out += static_cast<char>(ch);
    } else {
      out += "\\x";
      out += kHex[ch >> 4];
      out += kHex[ch & 15];
    }
  }
  return out + "'";
}

// The table vocabulary: names -> enums (the reverse of to_string in types.h). False when unknown.
bool parse_dtype(std::string_view s, DType* out);
bool parse_layout(std::string_view s, BLayout* out);
bool parse_raster(std::string_view s, Raster* out);
bool parse_decomposition(std::string_view s, Decomposition* out);  // data_parallel, split_k, stream_k

inline bool valid_swizzle(int64_t s) { return s == 1 || s == 2 || s == 4 || s == 8; }

// Sizes a problem may have: the kernels take int32 extents, and M*N*K <= 2^60 keeps every product in the
// mapping (tiles * K steps, at most 4*M*N*K) inside int64.
constexpr int64_t kMaxExtent = INT32_MAX;
constexpr double kMaxVolume = 1152921504606846976.0;  // 2^60
inline bool valid_extents(int64_t m, int64_t n, int64_t k) {
  return m >= 1 && n >= 1 && k >= 1 && m <= kMaxExtent && n <= kMaxExtent && k <= kMaxExtent &&
         double(m * n) * double(k) <= kMaxVolume;
}

// CUDA keeps at most 32 CTAs resident per SM (compute capability 8.0 to 9.0): the range of an `occupancy` record.
constexpr int32_t kMaxCtasPerSm = 32;

// Two exact entries of one (dtype, B layout, N, K) whose M ranges overlap, as indices into `exact` (the one
// with the smaller m_first first); false when there are none. Both the parser (which names the lines) and
// the Selector (which may be given a Table built by hand) refuse such tables.
bool find_overlapping_exact(const std::vector<ExactEntry>& exact, size_t* first, size_t* second);

// Refuses (TableError, naming the record, the value and the range) a rate, split count or calibration term that
// no GPU's tuning could have measured: a table corrupted or edited into values that parse. The Selector checks
// every table, parsed or built by hand.
void check_physical_ranges(const Table& table);

// A family's candidates outside its config space (hand-written kernels, vendor libraries), by name. The kernel
// library registers them only where they can run (cuBLAS where libcublas loads, the decode GEMM in builds with
// CUDA), so a table may name one that this process lacks. Each family's table_rules.cpp registers its own.
struct BuiltinCandidates {
  const char* name;  // the family
  std::vector<std::string> (*variant_names)();
};

// Registers a family's table rules and, where `builtin_names` is given, the names of its built-in candidates:
// each family's table_rules.cpp defines one.
class TableRegistration {
 public:
  explicit TableRegistration(const TableFamily& rules, std::vector<std::string> (*builtin_names)() = nullptr)
      : rules_(rules), builtin_{rules_.name, builtin_names} {
    if (builtin_names) detail::Registration<BuiltinCandidates> registered(&builtin_);
  }

 private:
  const TableFamily rules_;
  const BuiltinCandidates builtin_;
  detail::Registration<TableFamily> registration_{&rules_};
};

// Refuses (TableError) config `config` of a table of `family` tuned against config space `space_hash` when its
// variant, which is not compiled, is neither of that config space (the generated registry lists it whole) nor
// one of the family's built-in candidates: no build of this space has it. Nothing is refused for a config space
// this library was not generated from (a Selector given variants of its own).
void check_known_variant(const Table& table, size_t config, const std::string& family, const std::string& space_hash);

}  // namespace wavetune::lookup_detail

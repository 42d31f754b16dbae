// Reading table files (docs/tables.md): the syntax, the checksum and the references between records, and the
// physical range of the values (check_physical_ranges, for the Selector, which checks every table). Nothing
// here knows the running build; the Selector resolves the table against it.
#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common.h"
#include "wavetune/lookup.h"

namespace wavetune {

namespace lookup_detail {

bool parse_dtype(std::string_view s, DType* out) {
  if (s == "bf16") return *out = DType::bf16, true;
  if (s == "fp16") return *out = DType::fp16, true;
  return false;
}

bool parse_layout(std::string_view s, BLayout* out) {
  if (s == "col") return *out = BLayout::col, true;
  if (s == "row") return *out = BLayout::row, true;
  return false;
}

bool parse_raster(std::string_view s, Raster* out) {
  if (s == "heuristic") return *out = Raster::heuristic, true;
  if (s == "along_m") return *out = Raster::along_m, true;
  if (s == "along_n") return *out = Raster::along_n, true;
  return false;
}

bool parse_decomposition(std::string_view s, Decomposition* out) {
  if (s == "data_parallel") return *out = Decomposition::data_parallel, true;
  if (s == "split_k") return *out = Decomposition::split_k, true;
  if (s == "stream_k") return *out = Decomposition::stream_k, true;
  return false;
}

bool find_overlapping_exact(const std::vector<ExactEntry>& exact, size_t* first, size_t* second) {
  auto order = [&](size_t i) {
    const ExactEntry& e = exact[i];
    return std::make_tuple(int(e.dtype), int(e.b_layout), e.n, e.k, e.m_first);
  };
  std::vector<size_t> sorted(exact.size());
  for (size_t i = 0; i < sorted.size(); ++i) sorted[i] = i;
  std::sort(sorted.begin(), sorted.end(), [&](size_t a, size_t b) { return order(a) < order(b); });
  // NOTES: sorted by m_first within a (dtype, layout, N, K), disjoint ranges have increasing m_last too, so
  // the first overlap there is between neighbours.
  for (size_t i = 1; i < sorted.size(); ++i) {
    const ExactEntry &a = exact[sorted[i - 1]], &b = exact[sorted[i]];
    if (a.dtype == b.dtype && a.b_layout == b.b_layout && a.n == b.n && a.k == b.k && b.m_first <= a.m_last) {
      *first = sorted[i - 1], *second = sorted[i];
      return true;
    }
  }
  return false;
}

namespace {

// NOTES: the ranges are generous for any GPU from Ampere to Blackwell, consumer to data center: rates run
// from below the slowest GPU's to a hundred times the fastest's. Operands and tiles move at 10 GB/s to 10 PB/s
// (shipped tables: 2.9-38 TB/s, FP8 tables counting 2 bytes an element), arithmetic runs at 0.1 TFLOP/s to
// 1 EFLOP/s (shipped: 0.84 PFLOP/s). More than 1024 K or KV splits would outnumber any GPU's SMs several times
// over (the tuners write up to 128). A calibration corrects a fit by a power law of each extent: beyond M^2
// (latency is at most linear in each extent) or a constant factor of e^20 it is no correction (shipped:
// |c0| < 3, |c1..c3| < 0.3), and within these bounds the factor stays finite for every problem.
struct PhysicalRange {
  double lo, hi;
  const char* unit;
};
constexpr PhysicalRange kBytesPerUs{1e4, 1e10, " bytes/us (10 GB/s to 10 PB/s)"};
constexpr PhysicalRange kFlopPerUs{1e5, 1e12, " flop/us (0.1 TFLOP/s to 1 EFLOP/s)"};
constexpr PhysicalRange kSplits{1, 1024, ""};
constexpr PhysicalRange kCalibrationScale{-20, 20, " (the log of a constant factor)"};
constexpr PhysicalRange kCalibrationExponent{-2, 2, " (the exponent of an extent)"};

template <class Value, class... What>
void check_range(const Table& table, Value value, const PhysicalRange& range, const What&... what) {
  if (!(value >= range.lo && value <= range.hi)) {
    table_error(table.origin, ": ", what..., " ", value, " is outside the physical range [", range.lo, ", ",
                range.hi, "]", range.unit);
  }
}

// A rate record's value: 0 where the table has none.
void check_rate(const Table& table, double per_us, const PhysicalRange& range, const char* record) {
  if (per_us != 0) check_range(table, per_us, range, record, " rate");
}

}  // namespace

void check_physical_ranges(const Table& table) {
  check_rate(table, table.memory_bytes_per_us, kBytesPerUs, "memory");
  check_rate(table, table.traffic_bytes_per_us, kBytesPerUs, "traffic");
  check_rate(table, table.compute_flop_per_us, kFlopPerUs, "compute");
  for (size_t i = 0; i < table.configs.size(); ++i) {
    const TableConfig& c = table.configs[i];
    check_range(table, c.splits, kSplits, "config ", i, ": splits");
    check_range(table, c.calibration[0], kCalibrationScale, "config ", i, ": calibration c0");
    for (int term = 1; term < 4; ++term) {
      check_range(table, c.calibration[term], kCalibrationExponent, "config ", i, ": calibration c", term);
    }
  }
}

}  // namespace lookup_detail

namespace {

using lookup_detail::quoted;
using lookup_detail::table_error;

constexpr std::string_view kMagic = "wavetune-table 4";
constexpr std::string_view kChecksumPrefix = "checksum ";
constexpr const char* kRequiredMeta[] = {"gpu_name",         "sm_count",    "config_space_hash",
                                         "wavetune_version", "cuda_version", "created"};
// NOTES: real tables are a few hundred KiB; the cap only keeps a wrong path (a device, a huge file) from
// being read into memory whole.
constexpr size_t kMaxFileBytes = size_t(256) << 20;
// The most fields any record has (exact); splitting stops past it, so a line of a million spaces costs
// nothing.
constexpr size_t kMaxFields = 11;

// A record whose config id is checked once every config line has been read (records may come in any
// order after their config's line or before it).
template <class Record>
struct Pending {
  size_t line;
  int64_t config;
  Record record;
};

class Parser {
 public:
  Parser(std::string_view text, const std::string& origin) : text_(text), origin_(origin) {}

  Table run() {
    Table table;
    table.origin = origin_;
    const size_t body_begin = check_magic();
    const size_t checksum_begin = check_checksum(body_begin);

    // Every line between the magic and the checksum line.
    line_ = 1;
    for (size_t pos = body_begin; pos < checksum_begin;) {
      size_t end = text_.find('\n', pos);  // exists: the checksum line follows
      ++line_;
      record(text_.substr(pos, end - pos), &table);
      pos = end + 1;
    }
    resolve(&table);
    return table;
  }

 private:
  template <class... Parts>
  [[noreturn]] void fail(size_t line, const Parts&... parts) const {
    table_error(origin_, ":", line, ": ", parts...);
  }

  // Returns where the second line starts.
  size_t check_magic() const {
    if (text_.empty()) table_error(origin_, ": empty file, not a wavetune table");
    const size_t end = text_.find('\n');
    const std::string_view first = text_.substr(0, end);
    if (first == kMagic) {
      if (end == std::string_view::npos) table_error(origin_, ": no checksum line: the file is truncated");
      return end + 1;
    }
    if (first.size() == kMagic.size() + 1 && first.substr(0, kMagic.size()) == kMagic && first.back() == '\r') {
      fail(1, "CRLF line ends: the file was converted to Windows line ends (tables use \\n only)");
    }
    if (first.substr(0, 15) == "wavetune-table ") {
      fail(1, "unsupported table version ", quoted(first.substr(15)),
           ": this build reads version 4 (re-tune with python -m wavetune tune)");
    }
    fail(1, "not a wavetune table: the first line is ", quoted(first), ", expected '", kMagic, "'");
  }

  // Verifies the last line, the checksum of everything before it; returns where that line starts.
  size_t check_checksum(size_t body_begin) const {
    // NOTES: the checksum line's own '\n' is optional (an editor may drop it) but nothing may follow it,
    // not even a blank line: "the last line is the checksum".
    size_t last_end = text_.size();
    if (text_.back() == '\n') --last_end;
    if (last_end < body_begin) table_error(origin_, ": no checksum line: the file is truncated");
    const size_t last_begin = text_.rfind('\n', last_end - 1) + 1;  // >= body_begin: a '\n' ends line 1
    const std::string_view last = text_.substr(last_begin, last_end - last_begin);
    const size_t last_line = 1 + size_t(std::count(text_.begin(), text_.begin() + last_begin, '\n'));
    if (last.substr(0, kChecksumPrefix.size()) != kChecksumPrefix) {
      fail(last_line, "the last line is not the checksum line (", quoted(last),
           "): the file is truncated or something was appended to it");
    }
    const std::string_view hex = last.substr(kChecksumPrefix.size());
    uint64_t stated = 0;
    bool ok = hex.size() == 16;
    for (char ch : hex) {
      const int digit = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
      ok = ok && digit >= 0;
      stated = stated << 4 | uint64_t(digit & 15);
    }
    if (!ok) {
      fail(last_line, "malformed checksum ", quoted(hex),
           " (expected 16 lower-case hex digits): the file is truncated or corrupt");
    }
    const uint64_t actual = table_checksum(text_.data(), last_begin);
    if (actual != stated) {
      char buf[17];
      std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(actual));
      fail(last_line, "checksum mismatch: the file states ", hex, " but its contents hash to ", buf,
           ": the file is corrupt, truncated or was edited by hand (re-run the tuner to rewrite it)");
    }
    return last_begin;
  }

  // Splits at single spaces into at most kMaxFields + 1 fields; refuses empty fields.
  size_t split(std::string_view line, std::string_view* fields) const {
    size_t count = 0, pos = 0;
    while (count <= kMaxFields) {
      const size_t end = std::min(line.find(' ', pos), line.size());
      if (end == pos) fail(line_, "empty field: fields are separated by single spaces, with none at either end");
      fields[count++] = line.substr(pos, end - pos);
      if (end == line.size()) break;
      pos = end + 1;
    }
    return count;
  }

  void expect_fields(std::string_view type, size_t count, size_t expected, const char* syntax) const {
    if (count != expected) {
      fail(line_, type, " record: expected ", expected, " fields (", syntax, "), got ",
           count > kMaxFields ? "more" : std::to_string(count));
    }
  }

  int64_t integer(std::string_view s, const char* what, int64_t lo, int64_t hi) const {
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || ptr != s.data() + s.size()) fail(line_, what, " ", quoted(s), " is not an integer");
    if (v < lo || v > hi) fail(line_, what, " ", v, " is out of range [", lo, ", ", hi, "]");
    return v;
  }

  double real(std::string_view s, const char* what) const {
    double v = 0;
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v)) {
      fail(line_, what, " ", quoted(s), " is not a finite decimal number");
    }
    return v;
  }

  // A `memory`, `traffic` or `compute` record: one positive rate (bytes or flop per us), at most one per
  // table.
  double rate(std::string_view type, std::string_view line, std::string_view* f, size_t* seen_on,
              bool flop = false) const {
    expect_fields(type, split(line, f), 2, flop ? "<flop-per-us>" : "<bytes-per-us>");
    if (*seen_on) fail(line_, "a second ", type, " record (the first is on line ", *seen_on, ")");
    const double per_us = real(f[1], flop ? "flop per us" : "bytes per us");
    if (!(per_us > 0)) fail(line_, type, " rate ", per_us, flop ? " flop/us" : " bytes/us", " is not positive");
    *seen_on = line_;
    return per_us;
  }

  template <class Enum>
  Enum name(std::string_view s, bool (*parse)(std::string_view, Enum*), const char* what, const char* allowed) const {
    Enum v{};
    if (!parse(s, &v)) fail(line_, "unknown ", what, " ", quoted(s), " (one of: ", allowed, ")");
    return v;
  }

  int32_t swizzle(std::string_view s) const {
    const int64_t v = integer(s, "max swizzle", 1, 8);
    if (!lookup_detail::valid_swizzle(v)) fail(line_, "max swizzle ", v, " must be 1, 2, 4 or 8");
    return int32_t(v);
  }

  void record(std::string_view line, Table* table) {
    if (line.empty() || line[0] == '#') return;
    if (line.find('\r') != std::string_view::npos) {
      fail(line_, "carriage return in the line: tables use \\n line ends only");
    }
    std::string_view f[kMaxFields + 1];
    const std::string_view type = line.substr(0, line.find(' '));
    if (type == "meta") {
      meta(line, table);
    } else if (type == "config") {
      const size_t n = split(line, f);
      expect_fields(type, n, 5, "config <id> <variant> <decomposition> <splits>");
      const int64_t id = integer(f[1], "config id", 0, INT32_MAX);
      if (id != int64_t(table->configs.size())) {
        fail(line_, "config id ", id, " out of order: expected ", table->configs.size(),
             " (ids are 0..n-1 in file order)");
      }
      TableConfig c{std::string(f[2]), Decomposition::data_parallel, 1, {}, {}};
      c.decomposition =
          name(f[3], lookup_detail::parse_decomposition, "decomposition", "data_parallel, split_k, stream_k");
      c.splits = int32_t(integer(f[4], "splits", 1, INT32_MAX));
      if (c.splits != 1 && c.decomposition != Decomposition::split_k) {
        fail(line_, "splits ", c.splits, " with decomposition ", to_string(c.decomposition),
             ": splits is 1 unless split_k");
      }
      table->configs.push_back(std::move(c));
      config_lines_.push_back(line_);
    } else if (type == "wave") {
      const size_t n = split(line, f);
      expect_fields(type, n, 7, "wave <config-id> <w> <a> <b> <c> <d>");
      const int64_t config = integer(f[1], "config id", 0, INT32_MAX);
      const WaveModel w{integer(f[2], "wave", 1, INT64_MAX), real(f[3], "coefficient a"), real(f[4], "coefficient b"),
                        real(f[5], "coefficient c"), real(f[6], "coefficient d")};
      waves_.push_back({line_, config, w});
    } else if (type == "micro") {
      const size_t n = split(line, f);
      expect_fields(type, n, 5, "micro <config-id> <w-min> <raster> <max-swizzle>");
      const int64_t config = integer(f[1], "config id", 0, INT32_MAX);
      const MicroRule r{integer(f[2], "w-min", 1, INT64_MAX),
                        name(f[3], lookup_detail::parse_raster, "raster", "heuristic, along_m, along_n"),
                        swizzle(f[4])};
      micro_.push_back({line_, config, r});
    } else if (type == "exact") {
      const size_t n = split(line, f);
      expect_fields(type, n, 11,
                    "exact <dtype> <b-layout> <m-first> <m-last> <n> <k> <config-id> <raster> <max-swizzle> <us>");
      ExactEntry e{};
      e.dtype = name(f[1], lookup_detail::parse_dtype, "dtype", "bf16, fp16");
      e.b_layout = name(f[2], lookup_detail::parse_layout, "B layout", "col, row");
      e.m_first = integer(f[3], "m-first", 1, lookup_detail::kMaxExtent);
      e.m_last = integer(f[4], "m-last", 1, lookup_detail::kMaxExtent);
      if (e.m_last < e.m_first) fail(line_, "m-last ", e.m_last, " is below m-first ", e.m_first);
      e.n = integer(f[5], "n", 1, lookup_detail::kMaxExtent);
      e.k = integer(f[6], "k", 1, lookup_detail::kMaxExtent);
      if (!lookup_detail::valid_extents(e.m_last, e.n, e.k)) fail(line_, "m-last*n*k is larger than 2^60");
      e.config = int32_t(integer(f[7], "config id", 0, INT32_MAX));
      e.raster = name(f[8], lookup_detail::parse_raster, "raster", "heuristic, along_m, along_n");
      e.max_swizzle = swizzle(f[9]);
      e.us = real(f[10], "latency");
      if (e.us <= 0) fail(line_, "latency ", e.us, " us is not positive");
      table->exact.push_back(e);
      exact_record_lines_.push_back(line_);
    } else if (type == "prior") {
      const size_t n = split(line, f);
      expect_fields(type, n, 4, "prior <config-id> <max-m> <margin>");
      const PriorRule r{int32_t(integer(f[1], "config id", 0, INT32_MAX)),
                        integer(f[2], "max-m", 0, lookup_detail::kMaxExtent), real(f[3], "margin")};
      if (!(r.margin >= 0)) fail(line_, "margin ", r.margin, " is negative");
      table->priors.push_back(r);
      prior_lines_.push_back(line_);
    } else if (type == "calibration") {
      const size_t n = split(line, f);
      expect_fields(type, n, 6, "calibration <config-id> <c0> <c1> <c2> <c3>");
      const int64_t config = integer(f[1], "config id", 0, INT32_MAX);
      calibrations_.push_back({line_, config, {real(f[2], "coefficient c0"), real(f[3], "coefficient c1"),
                                               real(f[4], "coefficient c2"), real(f[5], "coefficient c3")}});
    } else if (type == "occupancy") {
      const size_t n = split(line, f);
      expect_fields(type, n, 3, "occupancy <config-id> <ctas-per-sm>");
      const int64_t config = integer(f[1], "config id", 0, INT32_MAX);
      occupancies_.push_back({line_, config, int32_t(integer(f[2], "CTAs per SM", 1, lookup_detail::kMaxCtasPerSm))});
    } else if (type == "memory") {
      table->memory_bytes_per_us = rate(type, line, f, &memory_line_);
    } else if (type == "traffic") {
      table->traffic_bytes_per_us = rate(type, line, f, &traffic_line_);
    } else if (type == "compute") {
      table->compute_flop_per_us = rate(type, line, f, &compute_line_, true);
    } else if (type == "checksum") {
      fail(line_, "a checksum record before the end of the file: the checksum must be the last line");
    } else {
      fail(line_, "unknown record type ", quoted(type),
           " (meta, config, wave, micro, exact, prior, calibration, occupancy, memory, traffic, compute, checksum)");
    }
  }

  void meta(std::string_view line, Table* table) {
    const size_t key_begin = 5;  // after "meta "
    const size_t key_end = line.find(' ', key_begin);
    if (line.size() <= key_begin || key_end == std::string_view::npos || key_end == key_begin ||
        key_end + 1 >= line.size()) {
      fail(line_, "meta record: expected 'meta <key> <value>' with a non-empty key and value");
    }
    const std::string key(line.substr(key_begin, key_end - key_begin));
    const auto [it, inserted] = meta_lines_.emplace(key, line_);
    if (!inserted) fail(line_, "meta key ", quoted(key), " repeated (first on line ", it->second, ")");
    table->meta[key] = std::string(line.substr(key_end + 1));
  }

  // The checks that need the whole file: references to configs, every config with a wave, meta keys.
  void resolve(Table* table) {
    const size_t configs = table->configs.size();
    auto check_config = [&](size_t line, int64_t config) {
      if (config >= int64_t(configs)) {
        fail(line, "config id ", config, " out of range: the table has ", configs, " config records");
      }
    };
    for (const auto& w : waves_) {
      check_config(w.line, w.config);
      auto& list = table->configs[size_t(w.config)].waves;
      for (const WaveModel& other : list) {
        if (other.wave == w.record.wave) fail(w.line, "a second wave ", w.record.wave, " record for config ", w.config);
      }
      list.push_back(w.record);
    }
    for (const auto& r : micro_) {
      check_config(r.line, r.config);
      auto& list = table->configs[size_t(r.config)].micro;
      for (const MicroRule& other : list) {
        if (other.min_wave == r.record.min_wave) {
          fail(r.line, "a second micro record with w-min ", r.record.min_wave, " for config ", r.config);
        }
      }
      list.push_back(r.record);
    }
    // Records a config has at most one of, each with the line it is on.
    const auto once_per_config = [&](const auto& records, const char* what, const auto& apply) {
      std::vector<size_t> seen_on(configs, 0);
      for (const auto& r : records) {
        check_config(r.line, r.config);
        size_t& seen = seen_on[size_t(r.config)];
        if (seen) fail(r.line, "a second ", what, " record for config ", r.config, " (the first is on line ", seen, ")");
        seen = r.line;
        apply(table->configs[size_t(r.config)], r.record);
      }
    };
    once_per_config(calibrations_, "calibration",
                    [](auto& config, const auto& c) { std::copy(c.begin(), c.end(), config.calibration); });
    once_per_config(occupancies_, "occupancy", [](auto& config, int32_t ctas) { config.ctas_per_sm = ctas; });
    for (size_t i = 0; i < table->exact.size(); ++i) check_config(exact_record_lines_[i], table->exact[i].config);
    size_t first = 0, second = 0;
    if (lookup_detail::find_overlapping_exact(table->exact, &first, &second)) {
      const ExactEntry &a = table->exact[first], &b = table->exact[second];
      fail(exact_record_lines_[second], "the exact range M ", b.m_first, "..", b.m_last, " overlaps M ", a.m_first,
           "..", a.m_last, " on line ", exact_record_lines_[first], " (", to_string(b.dtype), " ",
           to_string(b.b_layout), " N=", b.n, " K=", b.k, "): ranges of one layer must not overlap");
    }
    for (size_t i = 0; i < table->priors.size(); ++i) check_config(prior_lines_[i], table->priors[i].config);
    for (size_t i = 0; i < configs; ++i) {
      if (table->configs[i].waves.empty()) {
        fail(config_lines_[i], "config ", i, " has no wave record (it needs at least one)");
      }
    }
    for (const char* key : kRequiredMeta) {
      if (!table->meta.count(key)) table_error(origin_, ": missing required meta key '", key, "'");
    }
    line_ = meta_lines_.at("sm_count");
    integer(table->meta.at("sm_count"), "meta sm_count", 1, INT32_MAX);
  }

  std::string_view text_;
  const std::string& origin_;
  size_t line_ = 0;
  std::vector<size_t> config_lines_, exact_record_lines_, prior_lines_;
  size_t memory_line_ = 0;
  size_t traffic_line_ = 0;
  size_t compute_line_ = 0;
  std::vector<Pending<WaveModel>> waves_;
  std::vector<Pending<MicroRule>> micro_;
  std::vector<Pending<std::array<double, 4>>> calibrations_;
  std::vector<Pending<int32_t>> occupancies_;
  std::map<std::string, size_t> meta_lines_;
};

}  // namespace

uint64_t table_checksum(const char* data, size_t size) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

const std::string& Table::meta_value(const std::string& key) const {
  const auto it = meta.find(key);
  if (it == meta.end()) table_error(origin, ": no meta key '", key, "' in the table");
  return it->second;
}

Table Table::parse(const std::string& text, const std::string& origin) { return Parser(text, origin).run(); }

Table Table::load(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) table_error(path, ": is a directory, not a table file");
  std::ifstream in(path, std::ios::binary);
  if (!in) table_error(path, ": cannot open the table file (", std::strerror(errno), ")");
  std::string text;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    text.append(buffer, size_t(in.gcount()));
    if (text.size() > kMaxFileBytes) table_error(path, ": larger than ", kMaxFileBytes >> 20, " MiB, not a table file");
  }
  if (in.bad()) table_error(path, ": reading the table file failed");
  return parse(text, path);
}

std::string table_slug(const std::string& gpu_name) {
  std::string slug;
  for (char ch : gpu_name) {
    const bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
    if (alnum) {
      slug += static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
    } else if (slug.empty() || slug.back() != '-') {
      slug += '-';
    }
  }
  // NOTES: leading and trailing runs become '-' too ("NVIDIA H100 (PCIe)" -> "nvidia-h100-pcie-"): the rule
  // taken literally, as python/wavetune/tuning/tablefile.py does, so both sides name the same file.
  return slug;
}

}  // namespace wavetune

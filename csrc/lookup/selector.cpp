// Selection: a table resolved against the running build once, then evaluated per problem as
// docs/tables.md ("Evaluating the model") says, behind a bounded lock-free cache.
#include <algorithm>
#include <array>
#include <atomic>
#include <cassert>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common.h"
#include "wavetune/batch_invariance.h"
#include "wavetune/family.h"
#include "wavetune/grouped_mapping.h"
#include "wavetune/lookup.h"

namespace wavetune {
namespace {

using lookup_detail::table_error;

// Exact division of 0 <= x < 2^31 by a divisor fixed in advance: (x * magic) >> shift with shift =
// 31 + ceil(log2 d) and magic = floor((2^shift - 1) / d) + 1 (Granlund and Montgomery's round-up method).
// magic exceeds 2^shift / d by less than 1, so x * magic / 2^shift exceeds x / d by less than
// x / 2^shift < 1/d: the floor is exact. magic < 2^33, so x * magic < 2^64. Larger x use the divider.
class Divisor {
 public:
  explicit Divisor(int64_t d = 1) : d_(d) {
    int32_t log = 0;
    while (log < 33 && (int64_t(1) << log) < d) ++log;
    shift_ = 31 + log;
    magic_ = d >= 1 && log <= 32 ? ((uint64_t(1) << shift_) - 1) / uint64_t(d) + 1 : 0;
  }
  int64_t ceil_div(int64_t x) const {  // x >= 0
    const int64_t a = x + d_ - 1;
    if (magic_ != 0 && a < (int64_t(1) << 31)) return int64_t((uint64_t(a) * magic_) >> shift_);
    return a / d_;
  }

 private:
  int64_t d_;
  uint64_t magic_;
  int32_t shift_;
};

// NOTES: a family's mapping (TableFamily::coordinates) is the definition of the coordinates; a family selecting
// by priors and floors maps a problem by the GEMM mapping (mapping.h) over balanced groups (grouped_mapping.h),
// which this class prepares per config. A call costs eight dependent 64-bit divisions, the
// larger part of a cold decision when done per candidate (tile sides such as 80 or 144 rule out shifts).
// Every divisor is fixed by the config, so each is prepared once as a Divisor and the same arithmetic runs
// as multiplications and shifts. explain() always calls the family's mapping, debug builds assert that both agree
// on every evaluation, and tests/test_cpp_lookup.py checks coordinates and choices against docs/tables.md.
class PreparedMapping {
 public:
  PreparedMapping(const TileShape& t, Decomposition d, int32_t splits, int32_t sm_count)
      : tile_(t), decomposition_(d), splits_(splits), capacity_(resident_capacity(t, sm_count)),
        tile_m_(t.tile_m), tile_n_(t.tile_n), tile_k_(t.tile_k), cluster_m_(t.cluster_m), cluster_n_(t.cluster_n),
        capacity_div_(capacity_), splits_div_(std::max(1, splits)) {}

  // `spread`: the problem's M over its groups (spread_of), computed once per decision.
  Coordinates operator()(const BalancedGroups& spread, int64_t n, int64_t k) const {
    const int64_t tiles = tile_count(spread, n), k_iters = k_steps(k);
    int64_t grid = tiles, steps = k_iters;
    if (decomposition_ == Decomposition::split_k) {
      // s = clamp(splits, 1, k_iters) (splits >= 1 here); with s = k_iters each split is one K step.
      const bool clamped = splits_ >= k_iters;
      grid = tiles * (clamped ? k_iters : splits_);
      steps = clamped ? 1 : splits_div_.ceil_div(k_iters);
    } else if (decomposition_ == Decomposition::stream_k) {
      const int64_t units = tiles * k_iters;
      const bool full = units >= capacity_;  // grid = min(capacity, units); with grid = units, one step each
      grid = full ? capacity_ : units;
      steps = full ? capacity_div_.ceil_div(units) : 1;
    }
    return {grid, steps, capacity_, capacity_div_.ceil_div(grid)};
  }

  // Whether the lookup may choose this config for the problem mapped to `x` (stream_k_modeled).
  bool choosable(const BalancedGroups& spread, int64_t n, int64_t k, const Coordinates& x) const {
    return decomposition_ != Decomposition::stream_k || stream_k_modeled(tile_count(spread, n), k_steps(k), x);
  }

  const TileShape& tile() const { return tile_; }
  Decomposition decomposition() const { return decomposition_; }
  int32_t splits() const { return splits_; }

 private:
  int64_t tile_count(const BalancedGroups& spread, int64_t n) const {
    const int64_t m = spread.rows_each;
    const int64_t rows = tile_.swap_ab ? n : m, cols = tile_.swap_ab ? m : n;
    return spread.busy * cluster_m_.ceil_div(tile_m_.ceil_div(rows)) * tile_.cluster_m *
           cluster_n_.ceil_div(tile_n_.ceil_div(cols)) * tile_.cluster_n;
  }
  int64_t k_steps(int64_t k) const { return std::max<int64_t>(1, tile_k_.ceil_div(k)); }

  TileShape tile_;
  Decomposition decomposition_;
  int32_t splits_;
  int64_t capacity_;
  Divisor tile_m_, tile_n_, tile_k_, cluster_m_, cluster_n_, capacity_div_, splits_div_;
};

// A compiled config, flattened for evaluation: everything select_uncached reads, no strings.
struct Candidate {
  PreparedMapping mapping;  // tile shape, decomposition and splits
  int32_t config;
  int32_t variant;
  uint32_t wave_begin, wave_count;    // into Impl::waves, sorted by wave
  uint32_t micro_begin, micro_count;  // into Impl::micro, sorted by min_wave
  std::array<double, 4> calibration;  // TableConfig::calibration
  bool calibrated;                    // any coefficient non-zero
  double traffic_per_mnk;             // least_traffic_per_mnk of its tile at the table's traffic rate
  VariantInfo info;                   // its variant's, name cleared: the list it came from may not outlive us
};

// (dtype, layout, m, n, k, groups) in two words; m >= 1 makes `lo` non-zero, so a zeroed slot never matches.
struct Key {
  uint64_t lo, hi;
  bool operator==(const Key& o) const { return lo == o.lo && hi == o.hi; }
};

static_assert(kMaxGroups == int64_t(1) << 29, "groups fill bits 2-31 of Key::hi");

Key make_key(const Problem& p) {
  return {uint64_t(p.m) << 32 | uint64_t(p.n),
          uint64_t(p.k) << 32 | uint64_t(p.groups) << 2 | uint64_t(p.dtype) << 1 | uint64_t(p.b_layout)};
}

// The layer of a problem, (dtype, layout, n, k), which exact ranges are grouped by; n >= 1 makes `lo` non-zero.
Key layer_key(DType dtype, BLayout b_layout, int64_t n, int64_t k) {
  return {uint64_t(n) << 32 | uint64_t(k), uint64_t(dtype) << 1 | uint64_t(b_layout)};
}

uint64_t hash(const Key& k) {
  uint64_t h = (k.lo ^ (k.hi << 23 | k.hi >> 41)) * 0x9e3779b97f4a7c15ull;
  h ^= h >> 32;
  return h * 0xd6e8feb86659fd93ull;  // callers take the top bits
}

struct KeyHash {
  size_t operator()(const Key& k) const { return size_t(hash(k) >> 32); }
};

// NOTES: a Choice is cached as its own bytes in five slot words, loaded into registers (the unrolled loop
// in read_if_holds) and copied from them into the returned Choice. Unpacked field by field, or staged in
// a stack array, its bytes were read back 16 at a time right after narrower stores had written them: a
// store-forwarding stall on every hit, 15.8 ns a hit against 6.9 ns (development host, 2026-11-24).
constexpr int kChoiceWords = (sizeof(Choice) + 7) / 8;
static_assert(std::is_trivially_copyable_v<Choice> && kChoiceWords == 5, "a Choice fills five cache words");

Choice choice_from_words(const uint64_t* words) {
  Choice c;
  std::memcpy(&c, words, sizeof(Choice));
  return c;
}

// NOTES: the cache is a fixed array of 2-way sets of seqlock slots (4096 slots of 64 bytes: 256 KiB per
// Selector, allocated once). A hit is two sequence loads and seven data loads with no store, so concurrent
// readers never contend on a shared cache line (a shared_mutex's reader count is one such line, written
// by every lookup). A writer that finds the slot busy skips caching: the caller has its result anyway.
// Two ways, refilling the less recently written one, keep two hot shapes that hash alike from evicting
// each other on every call. All slot words are atomics (relaxed loads, fences as in Boehm's "Can seqlocks
// get along with programming language memory models?"), so the protocol is race-free in the C++ model.
class ChoiceCache {
 public:
  ChoiceCache() : slots_(new Slot[kSets * 2]) {}

  // True with `words` the cached Choice's bytes; false on a miss or while a writer is inside.
  bool find(const Key& key, uint64_t h, uint64_t* words) const {
    const Slot* set = &slots_[(h >> (64 - kSetBits)) * 2];
    return read_if_holds(set[0], key, words) || read_if_holds(set[1], key, words);
  }

  void insert(const Key& key, uint64_t h, const Choice& choice) {
    Slot* set = &slots_[(h >> (64 - kSetBits)) * 2];
    auto holds = [&](const Slot& s) {
      const uint64_t lo = s.word[0].load(std::memory_order_relaxed);
      return lo == 0 || (lo == key.lo && s.word[1].load(std::memory_order_relaxed) == key.hi);
    };
    Slot& slot = holds(set[0])   ? set[0]
                 : holds(set[1]) ? set[1]
                 : set[0].seq.load(std::memory_order_relaxed) <= set[1].seq.load(std::memory_order_relaxed) ? set[0]
                                                                                                          : set[1];
    uint64_t seq = slot.seq.load(std::memory_order_relaxed);
    if ((seq & 1) || !slot.seq.compare_exchange_strong(seq, seq + 1, std::memory_order_relaxed)) return;
    std::atomic_thread_fence(std::memory_order_release);
    uint64_t w[kWords] = {key.lo, key.hi};
    std::memcpy(w + 2, &choice, sizeof(Choice));
    for (int i = 0; i < kWords; ++i) slot.word[i].store(w[i], std::memory_order_relaxed);
    slot.seq.store(seq + 2, std::memory_order_release);
  }

 private:
  static constexpr int kWords = 2 + kChoiceWords;  // key, Choice: with the sequence, one 64-byte line
  static constexpr int kSetBits = 11;
  static constexpr size_t kSets = size_t(1) << kSetBits;

  struct alignas(64) Slot {
    Slot() {
      seq.store(0, std::memory_order_relaxed);
      for (auto& w : word) w.store(0, std::memory_order_relaxed);
    }
    std::atomic<uint64_t> seq;  // odd while a writer is inside
    std::atomic<uint64_t> word[kWords];
  };

  // The slot's Choice words, consistent, when the slot holds `key`. The key is compared first, so a miss
  // loads three words.
  static bool read_if_holds(const Slot& s, const Key& key, uint64_t* words) {
    const uint64_t before = s.seq.load(std::memory_order_acquire);
    if (before & 1) return false;
    if (s.word[0].load(std::memory_order_relaxed) != key.lo || s.word[1].load(std::memory_order_relaxed) != key.hi) {
      return false;
    }
#pragma GCC unroll 5
    for (int i = 0; i < kChoiceWords; ++i) words[i] = s.word[2 + i].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    return s.seq.load(std::memory_order_relaxed) == before;
  }

  std::unique_ptr<Slot[]> slots_;
};

inline double bilinear(const WaveModel& v, double g, double l) { return v.a + v.b * g + v.c * l + v.d * g * l; }

// T for a problem at `x` from a config's profiled waves W (sorted, at least one), per docs/tables.md.
double predict(const WaveModel* W, uint32_t n, const Coordinates& x) {
  const double G = double(x.grid), L = double(x.k_iters), C = double(x.capacity);
  const int64_t w = x.waves;
  // The same position inside wave v: G_v = G - (w - v) * C, at least 1.
  auto at = [&](const WaveModel& v) { return bilinear(v, std::max(1.0, G - double(w - v.wave) * C), L); };
  double t;
  if (w < W[0].wave) {
    t = bilinear(W[0], std::max(1.0, G), L);
  } else if (w > W[n - 1].wave) {
    // NOTES: each wave beyond the top profiled one costs the top wave's average: its full grid's time
    // over its wave count. A slope between the two top fits amplified their errors (docs/model.md).
    const WaveModel& top = W[n - 1];
    t = at(top) + double(w - top.wave) * bilinear(top, double(top.wave) * C, L) / double(top.wave);
  } else {
    uint32_t i = 0;
    while (i + 1 < n && W[i + 1].wave <= w) ++i;  // W[i].wave <= w < W[i + 1].wave, or w is the top
    if (W[i].wave == w) {
      t = at(W[i]);
    } else {
      const double t1 = at(W[i]), t2 = at(W[i + 1]);
      t = t1 + (t2 - t1) * double(w - W[i].wave) / double(W[i + 1].wave - W[i].wave);
    }
  }
  // NOTES: NaN (inf - inf from absurd coefficients) must lose every comparison, not become 0.1 and win.
  if (t != t) return std::numeric_limits<double>::infinity();
  return std::max(t, 0.1);
}

// NOTES: no kernel moves its operands and output through DRAM faster than the fastest traffic measured
// while tuning, so no prediction may be lower: below that floor the fits' differences are extrapolation
// (a decode problem predicted at twice the memory bandwidth, say), and the prior decides instead.
// 2 bytes per element (bf16, fp16); a grouped problem reads the weights of its busy groups.
double memory_floor(const Problem& p, const BalancedGroups& spread, double bytes_per_us) {
  if (bytes_per_us <= 0) return 0;
  const double m = double(p.m), n = double(p.n), k = double(p.k), busy = double(spread.busy);
  return 2 * (m * k + busy * n * k + m * n) / bytes_per_us;
}

// NOTES: nor does any kernel compute faster than the fastest arithmetic measured while tuning. This floor
// bounds the calibrated prediction (a calibration factor below 1 may not carry a prediction under it), and
// it is what lets select_model skip every candidate of a large compute-bound problem unmapped: none can be
// predicted faster than the floor, so none beats a prior predicted within its margin of it.
double compute_floor(const Problem& p, double flop_per_us) {
  return flop_per_us > 0 ? 2 * double(p.m) * double(p.n) * double(p.k) / flop_per_us : 0;
}

// M over the problem's groups; a dense problem is one group of M rows (no division on its path).
BalancedGroups spread_of(const Problem& p) {
  return p.groups > 1 ? balanced_groups(p.m, p.groups) : BalancedGroups{1, p.m};
}

// NOTES: every K-step of a unit of work moves a tile_k slice of both operand tiles from L2 into shared
// memory, and no anchor moved them faster than the table's traffic rate. The floor stops a small tile
// from being extrapolated to problems it would re-read thousands of times (a 128x16 swap-AB decode tile
// at M = 15000 and K = 768 is predicted at a fifth of its time without it). 2 bytes per element.
double traffic_floor(const TileShape& t, const Coordinates& x, double bytes_per_us) {
  if (bytes_per_us <= 0) return 0;
  return 2.0 * double(x.grid) * double(x.k_iters) * t.tile_k * (t.tile_m + t.tile_n) / bytes_per_us;
}

// NOTES: every unit of work's K-steps cover its tile's share of M*N*K (G*L*tile_k*tile_m*tile_n >= M*N*K
// under every decomposition and for grouped problems too), so M*N*K times this factor is at most
// traffic_floor for any mapping of the problem: a bound select_model reads before mapping a candidate.
// The margin covers rounding where the tiles divide the problem exactly.
double least_traffic_per_mnk(const TileShape& t, double bytes_per_us) {
  if (bytes_per_us <= 0) return 0;
  return 2.0 * double(t.tile_m + t.tile_n) / (double(t.tile_m) * double(t.tile_n) * bytes_per_us) * (1 - 1e-9);
}

// ln M, ln N and ln K of a problem: computed once per decision, shared by every candidate's calibration.
struct LogExtents {
  double m, n, k;
  explicit LogExtents(const Problem& p) : m(std::log(double(p.m))), n(std::log(double(p.n))), k(std::log(double(p.k))) {}
};

// NOTES: std::exp is the costliest step of evaluating a calibrated candidate. exp(e) >= (1 + e/4)^4
// (exp(e/4) >= 1 + e/4 >= 0), within 1% of it for the calibration's usual |e| < 0.5, so select_model
// takes the exact factor only for candidates that this bound does not already rule out; choices and
// predicted times stay those of the exact formula.
double exp_lower_bound(double e) {
  const double q = std::max(0.0, 1 + 0.25 * e), q2 = q * q;
  return q2 * q2 * (1 - 1e-9);  // the margin covers the rounding of the bound and of the exact product
}

// Splits as launched: the mapping models min(splits, K tiles), and a launch with more splits than K tiles
// is refused (why_not), so the choice carries the clamped value.
int32_t launch_splits(const TileShape& t, Decomposition d, int32_t splits, int64_t k) {
  if (d != Decomposition::split_k) return 1;
  const int64_t k_tiles = std::max<int64_t>(1, detail::ceil_div(k, t.tile_k));
  return int32_t(std::clamp<int64_t>(splits, 1, k_tiles));
}

bool valid_raster(Raster r) { return r == Raster::heuristic || r == Raster::along_m || r == Raster::along_n; }

[[maybe_unused]] bool same(const Coordinates& a, const Coordinates& b) {
  return a.grid == b.grid && a.k_iters == b.k_iters && a.capacity == b.capacity && a.waves == b.waves;
}

bool valid_enums(DType dtype, BLayout b_layout) {
  return (dtype == DType::bf16 || dtype == DType::fp16) && (b_layout == BLayout::col || b_layout == BLayout::row);
}

void check_problem(const Problem& p, const TableFamily& family) {
  if (!valid_enums(p.dtype, p.b_layout)) {
    WAVETUNE_INVALID("problem dtype ", int32_t(p.dtype), " or B layout ", int32_t(p.b_layout), " is out of range");
  }
  if (!lookup_detail::valid_extents(p.m, p.n, p.k)) {
    WAVETUNE_INVALID("problem sizes M=", p.m, " N=", p.n, " K=", p.k, " must each be in [1, ",
                     lookup_detail::kMaxExtent, "] with M*N*K <= 2^60");
  }
  if (p.groups < 1 || p.groups > family.max_groups) {
    if (family.max_groups == 1) WAVETUNE_INVALID("problem groups=", p.groups, " must be 1 for a ", family.name, " table");
    WAVETUNE_INVALID("problem groups=", p.groups, " must be in [1, ", family.max_groups, "] for a ", family.name,
                     " table");
  }
  if (family.check_problem) family.check_problem(p);
}

// The config-space hash a table of `scales` ("" without) must carry: that of the mode's variants built for the
// config space's own architecture (ConfigSpace::scales_hashes), so that variants of another scales mode or
// architecture added leave it valid (each config's variant is still checked by name); else the build's.
std::string tuned_against(const std::string& family, const std::string& scales, const std::string& build_hash) {
  const ConfigSpace* space = find_config_space(family);
  if (!space || space->hash != build_hash) return build_hash;
  for (const auto& [mode, hash] : space->scales_hashes) {
    if (scales == mode) return hash;
  }
  return build_hash;
}

// The table's scales mode (meta `scales`, "" without), one of its family's (TableFamily::scales).
std::string scales_mode(const Table& t, const TableFamily& family) {
  const auto meta = t.meta.find("scales");
  const std::string scales = meta == t.meta.end() ? "" : meta->second;
  const std::vector<std::string> modes = family.scales ? family.scales() : std::vector<std::string>{""};
  if (std::find(modes.begin(), modes.end(), scales) == modes.end()) {
    std::string known;
    for (const std::string& m : modes) known += (known.empty() ? "" : ", ") + lookup_detail::quoted(m);
    table_error(t.origin, ": meta scales ", lookup_detail::quoted(scales), " is not a scales mode of the ", family.name,
                " family's tables (", known, ")");
  }
  return scales;
}

}  // namespace

struct Selector::Impl {
  Table table;
  const TableFamily* family = nullptr;  // never null once constructed
  std::string family_name;
  std::string scales;  // meta scales, "" without
  int32_t sm_count = 0;
  size_t skipped = 0;
  std::vector<Candidate> candidates[2][2];  // [dtype][b_layout], in config-id order
  std::vector<WaveModel> waves;
  std::vector<MicroRule> micro;
  std::vector<const VariantInfo*> variant_of;  // per config id; nullptr when not compiled; while constructing only

  // The compiled priors of a dtype and layout, by ascending max_m (0, any M, last).
  struct Prior {
    int64_t max_m;  // INT64_MAX for a record's 0
    uint32_t candidate;  // index into candidates[dtype][b_layout]
    double margin;
  };
  std::vector<Prior> priors[2][2];

  // The exact ranges of compiled configs, grouped by layer (dtype, layout, N, K), each group sorted by m_last.
  struct ExactRange {
    int64_t m_first, m_last;
    Choice choice;
  };
  std::vector<ExactRange> exact_ranges;
  // Layer -> its group in exact_ranges: open addressing, linear probing, at most half full.
  struct ExactSlot {
    Key key;  // lo == 0: empty
    uint32_t begin, count;
  };
  std::vector<ExactSlot> exact;
  uint64_t exact_mask = 0;
  bool has_exact = false;

  ChoiceCache cache;

  // Batch-invariant choices (select_invariant), per level: the class of each layer (its groups in the key) and
  // the choice of each problem.
  mutable std::mutex invariant_mutex;
  mutable std::unordered_map<Key, int64_t, KeyHash> invariant_classes[3];
  mutable std::unordered_map<Key, Choice, KeyHash> invariant_choices[3];

  bool least_predicted() const { return family->selection == TableFamily::Selection::least_predicted; }

  // A candidate's floors at x: the memory floor (`floor_us`, the problem's) and its tile traffic floor.
  double floors_us(const Candidate& c, const Coordinates& x, double floor_us) const {
    return std::max(floor_us, traffic_floor(c.mapping.tile(), x, table.traffic_bytes_per_us));
  }

  // NOTES: the (G, L) fits see neither the operands' aspect nor L2 reuse, so a config can be right on its
  // anchors and 30% off on LLM-shaped problems. Its calibration record, a power law in M, N and K fitted to
  // its measurements on generic shapes (tuning.py), scales the floored prediction by exp of this exponent.
  static double calibration_exponent(const Candidate& c, const LogExtents& logs) {
    const std::array<double, 4>& a = c.calibration;
    return a[0] + a[1] * logs.m + a[2] * logs.n + a[3] * logs.k;
  }

  // A candidate's prediction at x (docs/tables.md): its wave model over its floors, times its calibration,
  // and at least its floors and compute_us again.
  // NOTES: a calibration factor below 1 may not carry a prediction under a floor: no kernel moved its operands
  // or tiles faster than the rates measured while tuning (lookup.h). Below them, an H100 table predicted a
  // decode GEMM at 3.6 TB/s, above the GPU's peak bandwidth (issue 75).
  double predicted_us(const Candidate& c, const Coordinates& x, double floor_us, const LogExtents& logs,
                      double compute_us) const {
    const double floors = floors_us(c, x, floor_us);
    const double t = std::max(floors, predict(&waves[c.wave_begin], c.wave_count, x));
    return std::max({compute_us, floors, c.calibrated ? t * std::exp(calibration_exponent(c, logs)) : t});
  }

  void index_exact();
  const Choice* find_exact(const Problem& p) const {
    const Key key = layer_key(p.dtype, p.b_layout, p.n, p.k);
    for (uint64_t i = hash(key) >> 32;; ++i) {
      const ExactSlot& s = exact[i & exact_mask];
      if (s.key.lo == 0) return nullptr;
      if (s.key == key) {
        // The first range ending at or after M holds M unless M falls in a gap before it.
        const ExactRange *first = &exact_ranges[s.begin], *last = first + s.count;
        const ExactRange* r =
            std::lower_bound(first, last, p.m, [](const ExactRange& e, int64_t m) { return e.m_last < m; });
        return r != last && r->m_first <= p.m ? &r->choice : nullptr;
      }
    }
  }

  // A candidate's coordinates under the family's mapping, and the launches they take.
  Coordinates family_coordinates(const Candidate& c, const Problem& p, int64_t* launches) const {
    const PreparedMapping& m = c.mapping;
    return family->coordinates(m.tile(), m.decomposition(), m.splits(), p, sm_count, launches);
  }

  // Whether `x` is the family's mapping of the problem under the candidate, in one launch: the prepared
  // mapping's check in debug builds.
  bool is_family_mapping(const Candidate& c, const Problem& p, const Coordinates& x) const {
    int64_t launches = 1;
    return same(family_coordinates(c, p, &launches), x) && launches == 1;
  }

  // A candidate's prediction under a least_predicted family's mapping (its wave model times its launches,
  // calibrated) and coordinates; false when the config cannot run the problem (TableFamily::fits).
  bool own_mapping_prediction(const Candidate& c, const Problem& p, const LogExtents& logs, Coordinates* x,
                              double* us) const {
    if (!family->fits(c.mapping.tile(), c.mapping.splits(), p)) return false;
    int64_t launches = 1;
    *x = family_coordinates(c, p, &launches);
    *us = double(launches) * predicted_us(c, *x, 0.0, logs, 0.0);
    return true;
  }

  // The model's choice under the family's own mapping: the candidate of least predicted time over the
  // configs that fit.
  Choice select_own_mapping(const Problem& p) const {
    const LogExtents logs(p);
    const Candidate* best = nullptr;
    double best_t = 0;
    for (const Candidate& c : candidates[int(p.dtype)][int(p.b_layout)]) {
      Coordinates x;
      double t;
      if (!own_mapping_prediction(c, p, logs, &x, &t)) continue;
      if (!best || t < best_t) best = &c, best_t = t;  // strict: ties keep the lower id
    }
    if (!best) no_candidate(p);
    const MicroParams micro{best->mapping.decomposition(), best->mapping.splits(), Raster::heuristic, 1};
    return Choice{best->variant, micro, best_t, ChoiceSource::model, best->config};
  }

  // The Choice of candidate c at K = k predicted `t` at `waves` waves: its decomposition and launched splits, and
  // the micro record with the largest w-min <= waves (none: heuristic, 1).
  Choice choice_of(const Candidate& c, double t, int64_t waves, int64_t k) const {
    const PreparedMapping& m = c.mapping;
    MicroParams micro{m.decomposition(), launch_splits(m.tile(), m.decomposition(), m.splits(), k), Raster::heuristic,
                      1};
    const MicroRule* rules = this->micro.data() + c.micro_begin;
    for (uint32_t i = c.micro_count; i-- > 0;) {
      if (rules[i].min_wave <= waves) {
        micro.raster = rules[i].raster;
        micro.max_swizzle = rules[i].max_swizzle;
        break;
      }
    }
    return Choice{c.variant, micro, t, ChoiceSource::model, c.config};
  }

  // The reduction order of candidate c's launch at K = k (batch_invariance.h).
  ReductionOrder order_of(const Candidate& c, int64_t k) const {
    const PreparedMapping& m = c.mapping;
    return reduction_order(c.info, m.decomposition(),
                           launch_splits(m.tile(), m.decomposition(), m.splits(), k));
  }

  int64_t invariant_class(const Selector& selector, const Problem& p, BatchInvariance level) const;
  Choice invariant_choice(const Selector& selector, const Problem& p, BatchInvariance level) const;

  [[noreturn]] void no_candidate(const Problem& p) const {
    WAVETUNE_INVALID("no config of table ", table.origin, " that takes ", to_string(p.dtype), " with ",
                     to_string(p.b_layout), "-major B is compiled in this build (", skipped, " of its ",
                     table.configs.size(), " configs name variants it lacks): compile them with python -m wavetune "
                     "build --table ", table.origin, ", or choose without the table (wavetune::default_variant)");
  }
};

Selector::Selector(Table table, const std::vector<VariantInfo>& compiled, const std::string& build_hash,
                   const std::string& family)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.table = std::move(table);
  const Table& t = s.table;
  const std::string& origin = t.origin;
  const auto family_meta = t.meta.find("family");
  const std::string table_family = family_meta == t.meta.end() ? "gemm" : family_meta->second;
  if (table_family != family) {
    table_error(origin, ": a table of the ", table_family, " kernel family, but it is loaded for ", family,
                ": load it for its own family (family=\"", table_family, "\"; python -m wavetune explain reads it "
                "from the file)");
  }
  s.family = find_table_family(family);
  if (!s.family) table_error(origin, ": the ", family, " kernel family is not known to the lookup library");
  const TableFamily& kind = *s.family;
  const bool least_predicted = kind.selection == TableFamily::Selection::least_predicted;
  if (!kind.coordinates || (least_predicted && !kind.fits)) {
    WAVETUNE_INVALID("the ", family, " family registers no mapping (TableFamily::coordinates, and fits to select the "
                     "least predicted)");
  }
  s.family_name = family;
  s.scales = scales_mode(t, kind);

  const std::string& table_hash = t.meta_value("config_space_hash");
  const std::string space_hash = tuned_against(family, s.scales, build_hash);
  // A table of a family without scales modes may also carry the hash of the build's whole space (every
  // architecture's variants): the same space, named more strictly.
  if (table_hash != space_hash && (kind.scales || table_hash != build_hash)) {
    const std::string what = kind.scales              ? " (its " + lookup_detail::quoted(s.scales) + " scales variants)"
                             : space_hash != build_hash ? " (" + build_hash + " with every architecture's variants)"
                                                        : "";
    table_error(origin, ": tuned against config space ", table_hash, " but this build was compiled from config space ",
                space_hash, what, " (cutlass_configs/ changed): re-tune the table with this build (python -m wavetune "
                "tune) or rebuild wavetune from the config space the table was tuned against");
  }
  const std::string& sm = t.meta_value("sm_count");
  int64_t sm_count = 0;
  const auto [ptr, ec] = std::from_chars(sm.data(), sm.data() + sm.size(), sm_count);
  if (ec != std::errc() || ptr != sm.data() + sm.size() || sm_count < 1 || sm_count > INT32_MAX) {
    table_error(origin, ": meta sm_count ", lookup_detail::quoted(sm), " is not a positive integer");
  }
  s.sm_count = int32_t(sm_count);
  lookup_detail::check_physical_ranges(t);

  std::unordered_map<std::string, const VariantInfo*> by_name;
  for (const VariantInfo& v : compiled) by_name.emplace(v.name, &v);

  // NOTES: a Table can be built by hand, not only parsed, so the invariants evaluation relies on (at least
  // one wave per config, valid enums) are checked here again, not assumed.
  s.variant_of.assign(t.configs.size(), nullptr);
  for (size_t i = 0; i < t.configs.size(); ++i) {
    const TableConfig& c = t.configs[i];
    const bool split = c.decomposition == Decomposition::split_k;
    if ((c.decomposition != Decomposition::data_parallel && !split && c.decomposition != Decomposition::stream_k) ||
        c.splits < 1 || (c.splits != 1 && !split)) {
      table_error(origin, ": config ", i, ": decomposition ", to_string(c.decomposition), " with splits ", c.splits,
                  " (data_parallel, split_k or stream_k; splits >= 1, and 1 unless split_k)");
    }
    if (c.waves.empty()) table_error(origin, ": config ", i, " has no wave model");
    if (kind.data_parallel_only && c.decomposition != Decomposition::data_parallel) {
      table_error(origin, ": config ", i, ": the ", kind.name, " family runs data_parallel only");
    }
    if (!kind.stream_k && c.decomposition == Decomposition::stream_k) {
      table_error(origin, ": config ", i, ": the ", kind.name, " family has no stream_k");
    }
    std::vector<WaveModel> waves = c.waves;
    std::sort(waves.begin(), waves.end(), [](const WaveModel& a, const WaveModel& b) { return a.wave < b.wave; });
    for (size_t j = 0; j < waves.size(); ++j) {
      if (waves[j].wave < 1 || (j > 0 && waves[j].wave == waves[j - 1].wave)) {
        table_error(origin, ": config ", i, ": wave ", waves[j].wave, " is repeated or below 1");
      }
    }
    std::vector<MicroRule> rules = c.micro;
    std::sort(rules.begin(), rules.end(),
              [](const MicroRule& a, const MicroRule& b) { return a.min_wave < b.min_wave; });
    for (const MicroRule& r : rules) {
      if (r.min_wave < 1 || !lookup_detail::valid_swizzle(r.max_swizzle) || !valid_raster(r.raster)) {
        table_error(origin, ": config ", i, ": micro rule (w-min ", r.min_wave, ", max swizzle ", r.max_swizzle,
                    ") is invalid");
      }
    }

    const auto found = by_name.find(c.variant_name);
    if (found == by_name.end()) {
      lookup_detail::check_known_variant(t, i, family, build_hash);
      ++s.skipped;  // a variant of a larger kernel set: not refused (docs/tables.md)
      continue;
    }
    const VariantInfo& v = *found->second;
    if (std::min({v.tile_m, v.tile_n, v.tile_k, v.cluster_m, v.cluster_n}) < 1) {
      WAVETUNE_INVALID("variant ", v.name, " has a tile or cluster extent below 1");
    }
    if (c.ctas_per_sm < 1 || c.ctas_per_sm > lookup_detail::kMaxCtasPerSm) {
      table_error(origin, ": config ", i, ": ", c.ctas_per_sm, " CTAs per SM (occupancy: 1 to ",
                  lookup_detail::kMaxCtasPerSm, ")");
    }
    TileShape tile = tile_shape(v);
    tile.ctas_per_sm = c.ctas_per_sm;
    if (!least_predicted && v.scheduler == TileScheduler::persistent &&
        c.decomposition != Decomposition::data_parallel) {
      table_error(origin, ": config ", i, " runs ", v.name, " with ", to_string(c.decomposition),
                  ", which needs a stream_k variant: the table contradicts the config space");
    }
    s.variant_of[i] = &v;
    Candidate cand{PreparedMapping(tile, c.decomposition, c.splits, s.sm_count),
                   int32_t(i),
                   v.id,
                   uint32_t(s.waves.size()),
                   uint32_t(waves.size()),
                   uint32_t(s.micro.size()),
                   uint32_t(rules.size()),
                   {c.calibration[0], c.calibration[1], c.calibration[2], c.calibration[3]},
                   c.calibration[0] != 0 || c.calibration[1] != 0 || c.calibration[2] != 0 ||
                       c.calibration[3] != 0,
                   least_traffic_per_mnk(tile, t.traffic_bytes_per_us),
                   v};
    cand.info.name = nullptr;
    s.waves.insert(s.waves.end(), waves.begin(), waves.end());
    s.micro.insert(s.micro.end(), rules.begin(), rules.end());
    s.candidates[int(v.dtype) & 1][int(v.b_layout) & 1].push_back(cand);
  }

  for (const PriorRule& r : t.priors) {
    if (r.config < 0 || size_t(r.config) >= t.configs.size() || r.max_m < 0 || !(r.margin >= 0) ||
        !std::isfinite(r.margin)) {
      table_error(origin, ": prior (config ", r.config, ", max-m ", r.max_m, ", margin ", r.margin,
                  ") is invalid: the config must exist, max-m >= 0 and the margin finite and >= 0");
    }
    const VariantInfo* v = s.variant_of[size_t(r.config)];
    if (!v) continue;  // not compiled: no prior for that M range
    std::vector<Candidate>& list = s.candidates[int(v->dtype) & 1][int(v->b_layout) & 1];
    const auto cand = std::find_if(list.begin(), list.end(), [&](const Candidate& c) { return c.config == r.config; });
    const int64_t max_m = r.max_m == 0 ? INT64_MAX : r.max_m;
    std::vector<Impl::Prior>& priors = s.priors[int(v->dtype) & 1][int(v->b_layout) & 1];
    for (const Impl::Prior& other : priors) {
      if (other.max_m == max_m) {
        table_error(origin, ": two priors for ", to_string(v->dtype), " ", to_string(v->b_layout), " with max-m ",
                    r.max_m);
      }
    }
    priors.push_back({max_m, uint32_t(cand - list.begin()), r.margin});
  }
  for (auto& by_layout : s.priors) {
    for (std::vector<Impl::Prior>& priors : by_layout) {
      std::sort(priors.begin(), priors.end(),
                [](const Impl::Prior& a, const Impl::Prior& b) { return a.max_m < b.max_m; });
    }
  }

  s.index_exact();
}

// Checks the table's exact entries and groups those of compiled configs by layer for find_exact.
void Selector::Impl::index_exact() {
  const Table& t = table;
  const std::string& origin = t.origin;
  if (!family->exact_records && !t.exact.empty()) {
    table_error(origin, ": the ", family->name, " family's tables have no exact records");
  }
  size_t first = 0, second = 0;
  if (lookup_detail::find_overlapping_exact(t.exact, &first, &second)) {
    const ExactEntry &a = t.exact[first], &b = t.exact[second];
    table_error(origin, ": exact ranges M ", a.m_first, "..", a.m_last, " and M ", b.m_first, "..", b.m_last, " of ",
                to_string(a.dtype), " ", to_string(a.b_layout), " N=", a.n, " K=", a.k, " overlap");
  }
  struct Entry {
    Key layer;
    ExactRange range;
  };
  std::vector<Entry> entries;
  for (const ExactEntry& e : t.exact) {
    if (e.config < 0 || size_t(e.config) >= t.configs.size()) {
      table_error(origin, ": exact entry M ", e.m_first, "..", e.m_last, " N=", e.n, " K=", e.k, " names config ",
                  e.config, ", out of range");
    }
    const VariantInfo* v = variant_of[size_t(e.config)];
    if (!v) continue;  // its config is skipped: the model decides that range
    if (v->dtype != e.dtype || v->b_layout != e.b_layout) {
      table_error(origin, ": exact entry ", to_string(e.dtype), " ", to_string(e.b_layout), " M ", e.m_first, "..",
                  e.m_last, " N=", e.n, " K=", e.k, " names config ", e.config, " (", v->name,
                  "), which takes other data");
    }
    if (!lookup_detail::valid_swizzle(e.max_swizzle) || !valid_raster(e.raster)) {
      table_error(origin, ": exact entry M ", e.m_first, "..", e.m_last, " N=", e.n, " K=", e.k,
                  ": invalid raster or max swizzle");
    }
    if (e.m_first < 1 || e.m_first > e.m_last || !lookup_detail::valid_extents(e.m_last, e.n, e.k)) {
      table_error(origin, ": exact entry M ", e.m_first, "..", e.m_last, " N=", e.n, " K=", e.k,
                  ": sizes out of range");
    }
    const TableConfig& c = t.configs[size_t(e.config)];
    const MicroParams micro{c.decomposition, launch_splits(tile_shape(*v), c.decomposition, c.splits, e.k), e.raster,
                            e.max_swizzle};
    entries.push_back({layer_key(e.dtype, e.b_layout, e.n, e.k),
                       {e.m_first, e.m_last, Choice{v->id, micro, e.us, ChoiceSource::exact, e.config}}});
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.layer.hi, a.layer.lo, a.range.m_last) < std::tie(b.layer.hi, b.layer.lo, b.range.m_last);
  });

  size_t capacity = 16;
  while (capacity < 2 * entries.size()) capacity *= 2;
  exact.assign(capacity, ExactSlot{{0, 0}, 0, 0});
  exact_mask = capacity - 1;
  for (size_t begin = 0; begin < entries.size();) {
    const Key layer = entries[begin].layer;
    size_t end = begin;
    for (; end < entries.size() && entries[end].layer == layer; ++end) exact_ranges.push_back(entries[end].range);
    for (uint64_t i = hash(layer) >> 32;; ++i) {
      ExactSlot& slot = exact[i & exact_mask];
      if (slot.key.lo == 0) {
        slot = {layer, uint32_t(begin), uint32_t(end - begin)};
        break;
      }
    }
    begin = end;
  }
  has_exact = !entries.empty();
}

Selector::~Selector() = default;
Selector::Selector(Selector&&) noexcept = default;
Selector& Selector::operator=(Selector&&) noexcept = default;

void Selector::check_device(const std::string& gpu_name, int32_t sm_count) const {
  const std::string& name = impl_->table.meta_value("gpu_name");
  if (name != gpu_name || impl_->sm_count != sm_count) {
    table_error(impl_->table.origin, ": tuned on a ", name, " with ", impl_->sm_count, " SMs, but this GPU is a ",
                gpu_name, " with ", sm_count, " SMs: use the table made for this GPU (tables/", table_slug(gpu_name),
                ".wtt) or tune one on it (python -m wavetune tune)");
  }
}

Choice Selector::select(const Problem& p) const {
  check_problem(p, *impl_->family);
  // NOTES: the cache's key holds no field of a family's own, so a least_predicted family goes uncached.
  if (impl_->least_predicted()) return impl_->select_own_mapping(p);
  const Key key = make_key(p);
  const uint64_t h = hash(key);
  uint64_t words[kChoiceWords];
  if (impl_->cache.find(key, h, words)) return choice_from_words(words);
  const Choice c = select_uncached(p);
  impl_->cache.insert(key, h, c);
  return c;
}

Choice Selector::select_uncached(const Problem& p) const {
  check_problem(p, *impl_->family);
  const Impl& s = *impl_;
  if (s.has_exact) {
    if (const Choice* c = s.find_exact(p)) return *c;
  }
  return select_model(p);
}

Choice Selector::select_model(const Problem& p) const {
  check_problem(p, *impl_->family);
  const Impl& s = *impl_;
  if (s.least_predicted()) return s.select_own_mapping(p);
  const std::vector<Candidate>& list = s.candidates[int(p.dtype)][int(p.b_layout)];
  if (list.empty()) s.no_candidate(p);

  // NOTES: a grouped table's priors are by rows per busy group, the tile fill along the tokens that decides
  // which tile shape fits (docs/grouped.md); a dense problem is one group, so that is M.
  const BalancedGroups spread = spread_of(p);
  const Impl::Prior* prior = nullptr;
  for (const Impl::Prior& r : s.priors[int(p.dtype)][int(p.b_layout)]) {
    if (spread.rows_each <= r.max_m) {
      prior = &r;
      break;
    }
  }
  const double floor_us = memory_floor(p, spread, s.table.memory_bytes_per_us);
  const double compute_us = compute_floor(p, s.table.compute_flop_per_us);
  const LogExtents logs(p);
  const Candidate* best = nullptr;
  double best_t = 0, prior_t = 0;
  int64_t best_waves = 0;
  const Candidate* prior_candidate = prior ? &list[prior->candidate] : nullptr;
  if (prior_candidate) {  // first: it bounds what the others must beat
    const Coordinates x = prior_candidate->mapping(spread, p.n, p.k);
    prior_t = s.predicted_us(*prior_candidate, x, floor_us, logs, compute_us);
    best = prior_candidate, best_t = prior_t, best_waves = x.waves;
  }
  // NOTES: the prior (cuBLAS, or the M-bucket default) stays unless the model predicts a gain larger
  // than the margin, about the model's typical error on unseen shapes: a smaller predicted gain is as
  // likely the model's error as a real one (docs/model.md, section 7). So a candidate is chosen only if
  // predicted below the running best and, with a prior, below prior_t / (1 + margin). Its prediction is
  // at least the compute floor, and at least the larger of the memory floor and its least tile traffic,
  // times the lower bound of its calibration factor where that exceeds 1: a few multiply-adds. Where the
  // compute floor rules out every candidate (a large compute-bound problem whose prior is predicted within
  // its margin of it), none is looked at; where a candidate's bound rules it out (memory-bound problems,
  // small tiles on large ones), its mapping and wave model are not evaluated. Ties with the prior end in the
  // prior, so choices and predicted times are those of evaluating every candidate, bit for bit.
  const double override_factor = prior ? 1 + prior->margin : 0;
  const double mnk = double(p.m) * double(p.n) * double(p.k);
  if (!prior || compute_us * override_factor < prior_t) {
    for (const Candidate& c : list) {
      if (&c == prior_candidate) continue;
      const double e = c.calibrated ? Impl::calibration_exponent(c, logs) : 0;
      const double bound = c.calibrated ? exp_lower_bound(e) : 1;
      const double least_floor = std::max(floor_us, c.traffic_per_mnk * mnk);
      const double least = std::max(compute_us, least_floor * std::max(1.0, bound));
      if (prior && least * override_factor >= prior_t) continue;  // cannot override the prior
      if (best && least >= best_t) continue;                      // cannot be chosen
      const Coordinates x = c.mapping(spread, p.n, p.k);
      assert(s.is_family_mapping(c, p, x));
      const double floors = s.floors_us(c, x, floor_us);
      assert(least_floor <= floors);
      double t = std::max(floors, predict(&s.waves[c.wave_begin], c.wave_count, x));
      if (c.calibrated) {
        if (best && t * bound >= best_t) continue;                         // cannot be chosen
        if (prior && t * bound * override_factor >= prior_t) continue;  // cannot override the prior
        t *= std::exp(e);
      }
      t = std::max({t, floors, compute_us});  // as predicted_us: the floors bound the calibrated prediction
      if (best && t >= best_t) continue;                         // strict: ties keep the lower id
      if (prior && t * override_factor >= prior_t) continue;  // cannot override the prior
      if (!c.mapping.choosable(spread, p.n, p.k, x)) continue;  // checked last: rarely reached
      best = &c, best_t = t, best_waves = x.waves;
    }
  }
  // NOTES: with no prior, a table whose candidates are all stream-K launches outside their model (a
  // stream-K-only build, short K) still has to launch one: the least predicted of them all.
  if (!best) {
    const std::vector<Prediction> all = explain(p);  // one per candidate of `list`, in its order
    const auto least = std::min_element(all.begin(), all.end(), [](const Prediction& a, const Prediction& b) {
      return a.predicted_us < b.predicted_us;  // the first of equals: the lower config id
    });
    best = &list[size_t(least - all.begin())], best_t = least->predicted_us, best_waves = least->coords.waves;
  }
  return s.choice_of(*best, best_t, best_waves, p.k);
}

namespace {

// The batch-invariant class of a candidate under `level`: its reduction order class, or with BatchInvariance::config
// its config id + 1; 0 where its order is not fixed.
int64_t invariant_class_of(const Prediction& p, BatchInvariance level) {
  if (!p.order.fixed) return 0;
  return level == BatchInvariance::config ? int64_t(p.config) + 1 : p.order.order_class;
}

constexpr size_t kMaxInvariantChoices = 4096;  // per level; then the cache starts over

}  // namespace

// NOTES: the class is weighed over M in powers of two because serving meets every batch size, each as often on a
// log scale as far as the table knows; the geomean of the slowdowns keeps one M's large gain from outweighing many
// small losses.
int64_t Selector::Impl::invariant_class(const Selector& selector, const Problem& p, BatchInvariance level) const {
  std::map<int64_t, double> log_slowdown;  // by class, ascending: ties go to the lower class
  const int64_t top = std::min<int64_t>(kInvariantReferenceRows * p.groups, lookup_detail::kMaxExtent);
  for (int64_t m = 1; m <= top; m *= 2) {
    Problem q = p;
    q.m = m;
    double best_any = std::numeric_limits<double>::infinity();
    std::map<int64_t, double> best_of;
    for (const Prediction& c : selector.explain(q)) {
      if (!c.choosable) continue;
      best_any = std::min(best_any, c.predicted_us);
      const int64_t cls = invariant_class_of(c, level);
      if (!cls) continue;
      auto [it, added] = best_of.emplace(cls, c.predicted_us);
      if (!added) it->second = std::min(it->second, c.predicted_us);
    }
    for (const auto& [cls, us] : best_of) log_slowdown[cls] += std::log(us / best_any);
  }
  const auto best = std::min_element(log_slowdown.begin(), log_slowdown.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
  if (best == log_slowdown.end()) {
    WAVETUNE_INVALID("no config of table ", table.origin, " for ", to_string(p.dtype), " ", to_string(p.b_layout),
                     " N=", p.n, " K=", p.k, " has a batch-invariant reduction order (batch_invariance.h): its "
                     "compiled configs are stream-K, vendor or decode GEMM launches only; compile the others with "
                     "python -m wavetune build --table ", table.origin);
  }
  return best->first;
}

Choice Selector::Impl::invariant_choice(const Selector& selector, const Problem& p, BatchInvariance level) const {
  const Key layer = layer_key(p.dtype, p.b_layout, p.n, p.k);
  const Key class_key{layer.lo, layer.hi | uint64_t(p.groups) << 2};
  auto known = invariant_classes[int(level)].find(class_key);
  if (known == invariant_classes[int(level)].end()) {
    known = invariant_classes[int(level)].emplace(class_key, invariant_class(selector, p, level)).first;
  }
  const int64_t cls = known->second;
  const std::vector<Candidate>& list = candidates[int(p.dtype)][int(p.b_layout)];
  const std::vector<Prediction> predictions = selector.explain(p);  // one per candidate of `list`, in its order
  const Choice* exact = has_exact ? find_exact(p) : nullptr;
  size_t best = list.size();
  for (size_t i = 0; i < list.size(); ++i) {
    if (!predictions[i].choosable || invariant_class_of(predictions[i], level) != cls) continue;
    if (exact && exact->config == predictions[i].config) return *exact;
    if (best == list.size() || predictions[i].predicted_us < predictions[best].predicted_us) best = i;
  }
  return choice_of(list[best], predictions[best].predicted_us, predictions[best].coords.waves, p.k);
}

Choice Selector::select_invariant(const Problem& p, BatchInvariance level) const {
  check_problem(p, *impl_->family);
  if (level == BatchInvariance::off) return select(p);
  if (level != BatchInvariance::reduction_order && level != BatchInvariance::config) {
    WAVETUNE_INVALID("batch invariance ", int32_t(level), " is out of range (off, reduction_order or config)");
  }
  const Impl& s = *impl_;
  if (s.least_predicted()) {
    WAVETUNE_INVALID("a ", s.family_name, " table has no batch-invariant choice of its own: its family's choose ",
                     "keeps the choice from depending on the batch");
  }
  if (s.candidates[int(p.dtype)][int(p.b_layout)].empty()) s.no_candidate(p);
  std::lock_guard<std::mutex> lock(s.invariant_mutex);
  std::unordered_map<Key, Choice, KeyHash>& choices = s.invariant_choices[int(level)];
  const Key key = make_key(p);
  if (const auto it = choices.find(key); it != choices.end()) return it->second;
  if (choices.size() >= kMaxInvariantChoices) choices.clear();
  return choices[key] = s.invariant_choice(*this, p, level);
}

std::vector<Prediction> Selector::explain(const Problem& p) const {
  check_problem(p, *impl_->family);
  const Impl& s = *impl_;
  const BalancedGroups spread = spread_of(p);
  const double floor_us = memory_floor(p, spread, s.table.memory_bytes_per_us);
  const double compute_us = compute_floor(p, s.table.compute_flop_per_us);
  const LogExtents logs(p);
  std::vector<Prediction> out;
  for (const Candidate& c : s.candidates[int(p.dtype)][int(p.b_layout)]) {
    if (s.least_predicted()) {
      Coordinates x;
      double t;
      if (s.own_mapping_prediction(c, p, logs, &x, &t)) {
        out.push_back({c.config, c.variant, x, t, true, s.order_of(c, p.k)});
      }
      continue;
    }
    int64_t launches = 1;
    const Coordinates x = s.family_coordinates(c, p, &launches);
    const double t = s.predicted_us(c, x, floor_us, logs, compute_us);
    out.push_back({c.config, c.variant, x, t, c.mapping.choosable(spread, p.n, p.k, x), s.order_of(c, p.k)});
  }
  return out;
}

const Table& Selector::table() const { return impl_->table; }
const std::string& Selector::family() const { return impl_->family_name; }
const std::string& Selector::scales() const { return impl_->scales; }
size_t Selector::skipped_configs() const { return impl_->skipped; }
int32_t Selector::sm_count() const { return impl_->sm_count; }

size_t Selector::candidate_count(DType dtype, BLayout b_layout) const {
  if (!valid_enums(dtype, b_layout)) return 0;
  return impl_->candidates[int(dtype)][int(b_layout)].size();
}

}  // namespace wavetune

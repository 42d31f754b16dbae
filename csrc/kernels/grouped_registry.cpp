// The compiled grouped variants, as listed by the generated grouped_registry.inc (see
// python/wavetune/config_space.py), and the problem checks that need no GPU.
#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "grouped_ops.h"
#include "grouped_registry.inc"
#include "wavetune/errors.h"
#include "wavetune/grouped.h"

namespace wavetune {
namespace detail {

#define WAVETUNE_DECLARE_OPS(ID, NAME, ...) extern const GroupedVariantOps variant_##NAME;
WAVETUNE_GROUPED_VARIANT_LIST(WAVETUNE_DECLARE_OPS)
#undef WAVETUNE_DECLARE_OPS

namespace {
struct Entry {
  VariantInfo info;
  const GroupedVariantOps* ops;
};

#define WAVETUNE_ENTRY(ID, NAME, DT, BL, SWAP, SCHED, TM, TN, TK, CM, CN, TS)                                 \
  Entry{{ID, #NAME, DType::DT, BLayout::BL, SWAP, Schedule::SCHED, TM, TN, TK, CM, CN, TileScheduler::TS}, \
        &variant_##NAME},
const std::vector<Entry>& entries() {
  static const std::vector<Entry> list{WAVETUNE_GROUPED_VARIANT_LIST(WAVETUNE_ENTRY)};
  return list;
}
#undef WAVETUNE_ENTRY

const Entry* find_entry(int32_t id) {
  const auto& list = entries();  // sorted by id: the generator emits the space in order
  auto it = std::lower_bound(list.begin(), list.end(), id, [](const Entry& e, int32_t v) { return e.info.id < v; });
  return it != list.end() && it->info.id == id ? &*it : nullptr;
}
}  // namespace

const GroupedVariantOps* grouped_variant_ops(int32_t id) {
  const Entry* e = find_entry(id);
  return e ? e->ops : nullptr;
}

}  // namespace detail

const std::vector<VariantInfo>& grouped_variants() {
  static const std::vector<VariantInfo> list = [] {
    std::vector<VariantInfo> out;
    for (const auto& e : detail::entries()) out.push_back(e.info);
    return out;
  }();
  return list;
}

const VariantInfo* find_grouped_variant(int32_t id) {
  const detail::Entry* e = detail::find_entry(id);
  return e ? &e->info : nullptr;
}

std::string grouped_problem_error(const GroupedGemmProblem& p) {
  auto misaligned = [](const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes != 0; };
  std::ostringstream os;
  if (p.rows < 0 || p.experts < 1 || p.n < 1 || p.k < 1) {
    os << "rows must be >= 0 and experts, N, K positive, got rows=" << p.rows << " experts=" << p.experts
       << " N=" << p.n << " K=" << p.k;
  } else if (p.k % 8 != 0 || p.n % 8 != 0) {
    os << "K=" << p.k << " and N=" << p.n << " must be multiples of 8: the kernels move 16-byte rows with TMA "
       << "(pad K and N to a multiple of 8)";
  } else if (!p.x || !p.w || !p.offsets || !p.out) {
    os << "null data pointer";
  } else if (misaligned(p.x, 16) || misaligned(p.w, 16) || misaligned(p.out, 16) || misaligned(p.offsets, 4)) {
    os << "x, w and out must be 16-byte aligned for TMA and offsets 4-byte aligned; a sliced view may be "
       << "misaligned: use .contiguous() or .clone()";
  }
  return os.str();
}

}  // namespace wavetune

// A kernel family's compiled variants, built from its generated X-macro list (registry.inc,
// grouped_registry.inc): lookups by id and the list of their descriptions, shared by every family.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "wavetune/types.h"

namespace wavetune::detail {

template <class Ops>
class VariantRegistry {
 public:
  struct Entry {
    VariantInfo info;
    const Ops* ops;
  };

  // `entries` sorted by id: the generator emits the space in order.
  explicit VariantRegistry(std::vector<Entry> entries) : entries_(std::move(entries)) {
    for (const Entry& e : entries_) infos_.push_back(e.info);
  }

  const Entry* find(int32_t id) const {
    auto it = std::lower_bound(entries_.begin(), entries_.end(), id,
                               [](const Entry& e, int32_t v) { return e.info.id < v; });
    return it != entries_.end() && it->info.id == id ? &*it : nullptr;
  }

  const std::vector<VariantInfo>& infos() const { return infos_; }

 private:
  std::vector<Entry> entries_;
  std::vector<VariantInfo> infos_;
};

}  // namespace wavetune::detail

// One registry entry per X-macro row; `variant_<NAME>` is the variant's ops object.
#define WAVETUNE_REGISTRY_ENTRY(ID, NAME, DT, BL, SWAP, SCHED, TM, TN, TK, CM, CN, TS)                     \
  {{ID, #NAME, DType::DT, BLayout::BL, SWAP, Schedule::SCHED, TM, TN, TK, CM, CN, TileScheduler::TS}, \
   &variant_##NAME},

// A kernel family's variants, built from its generated X-macro list (registry.inc, grouped_registry.inc) by its
// generated registration (python/wavetune/codegen/config_space.py, FamilyCode) and extended at run time by
// variant libraries (variant_library.cpp): lookups by id and the list of their descriptions, shared by every
// family.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "wavetune/types.h"

namespace wavetune::detail {

// FNV-1a over a built-in catalog's variant names in id order, as 16 hex digits: what a family without a
// generated config space reports as its config-space hash (another catalog, another hash).
inline std::string catalog_hash(const std::vector<const char*>& names) {
  uint64_t h = 1469598103934665603ull;
  for (const char* name : names) {
    for (const char* c = name; *c; ++c) h = (h ^ uint8_t(*c)) * 1099511628211ull;
    h = (h ^ '\n') * 1099511628211ull;
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

template <class Ops>
class VariantRegistry {
 public:
  struct Entry {
    VariantInfo info;
    const Ops* ops;
  };

  // `entries` sorted by id: the generator emits the space in order.
  explicit VariantRegistry(std::vector<Entry> entries) { publish(std::move(entries)); }

  // The generated entries and those of each of the family's built-in lists (ids from kDecodeVariantIds,
  // kLibraryVariantIds), in the order of their ids.
  VariantRegistry(std::vector<Entry> generated, std::initializer_list<std::vector<Entry>> built_in) {
    for (const std::vector<Entry>& part : built_in) generated.insert(generated.end(), part.begin(), part.end());
    sort_by_id(generated);
    publish(std::move(generated));
  }

  const Entry* find(int32_t id) const { return find_in(*current_.load(std::memory_order_acquire), id); }

  // The ops object and the description of variant `id`, or nullptr where it is not registered.
  const Ops* ops(int32_t id) const {
    const Entry* e = find(id);
    return e ? e->ops : nullptr;
  }
  const VariantInfo* info(int32_t id) const {
    const Entry* e = find(id);
    return e ? &e->info : nullptr;
  }

  const std::vector<VariantInfo>& infos() const { return current_.load(std::memory_order_acquire)->infos; }

  // Registers the variants (ops[i]: an Ops of infos[i]) whose ids are not registered yet; returns how many.
  // Safe beside lookups.
  int32_t add(const VariantInfo* infos, const void* const* ops, int32_t count) {
    std::vector<Entry> entries;
    for (int32_t i = 0; i < count; ++i) entries.push_back({infos[i], static_cast<const Ops*>(ops[i])});
    return add(entries);
  }

  int32_t add(const std::vector<Entry>& entries) {
    std::lock_guard<std::mutex> lock(mutex_);
    const Snapshot& now = *current_.load(std::memory_order_relaxed);
    std::vector<Entry> merged = now.entries;
    for (const Entry& e : entries) {
      const auto same_id = [&](const Entry& m) { return m.info.id == e.info.id; };
      if (std::none_of(merged.begin(), merged.end(), same_id)) merged.push_back(e);
    }
    const auto added = int32_t(merged.size() - now.entries.size());
    if (added == 0) return 0;
    sort_by_id(merged);
    publish(std::move(merged));
    return added;
  }

 private:
  struct Snapshot {
    std::vector<Entry> entries;
    std::vector<VariantInfo> infos;
  };

  static void sort_by_id(std::vector<Entry>& entries) {
    std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.info.id < b.info.id; });
  }

  static const Entry* find_in(const Snapshot& s, int32_t id) {
    auto it = std::lower_bound(s.entries.begin(), s.entries.end(), id,
                               [](const Entry& e, int32_t v) { return e.info.id < v; });
    return it != s.entries.end() && it->info.id == id ? &*it : nullptr;
  }

  // NOTES: the launch path reads the current snapshot with one atomic load and no lock; an addition publishes
  // a new one. Every snapshot is kept for the process, so what infos() returned and the VariantInfo pointers
  // a Selector holds stay valid after later additions.
  void publish(std::vector<Entry> entries) {
    auto next = std::make_unique<Snapshot>();
    next->entries = std::move(entries);
    for (const Entry& e : next->entries) next->infos.push_back(e.info);
    current_.store(next.get(), std::memory_order_release);
    snapshots_.push_back(std::move(next));
  }

  std::mutex mutex_;
  std::vector<std::unique_ptr<const Snapshot>> snapshots_;
  std::atomic<const Snapshot*> current_{nullptr};
};

}  // namespace wavetune::detail

// One registry entry per X-macro row; `variant_<NAME>` is the variant's ops object.
#define WAVETUNE_REGISTRY_ENTRY(ID, NAME, ...) {WAVETUNE_VARIANT_INFO(ID, NAME, __VA_ARGS__), &variant_##NAME},

// The families registered with a library: each family's folder defines one static Registration, so no
// file lists the families. Registrations run while the library loads, before any caller can look.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace wavetune::detail {

// Families of type F (with a `const char* name`), sorted by name.
template <class F>
std::vector<const F*>& registered() {
  static std::vector<const F*> families;
  return families;
}

template <class F>
const F* find_registered(const std::string& name) {
  for (const F* f : registered<F>()) {
    if (name == f->name) return f;
  }
  return nullptr;
}

template <class F>
struct Registration {
  explicit Registration(const F* family) {
    std::vector<const F*>& all = registered<F>();
    const auto at = std::upper_bound(all.begin(), all.end(), family,
                                     [](const F* a, const F* b) { return std::strcmp(a->name, b->name) < 0; });
    all.insert(at, family);
  }
};

}  // namespace wavetune::detail

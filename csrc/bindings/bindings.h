// Shared by the binding files of wavetune._C: module.cpp, and each family's bindings, registered with one
// FamilyBindings: generated from its config space's [family] table (config_space.py's FamilyCode), which calls
// the bind_<name> of its bindings.cpp in its folder (csrc/families/<name>/), or written there by hand.
#pragma once

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "wavetune/family.h"
#include "wavetune/lookup.h"
#include "wavetune/types.h"

namespace wavetune::bindings {

// The enumerator of Enum (types.h) whose name is `name`; std::invalid_argument naming `what` otherwise.
template <class Enum>
Enum parse_name(const std::string& name, int count, const char* what) {
  for (int i = 0; i < count; ++i) {
    if (name == to_string(static_cast<Enum>(i))) return static_cast<Enum>(i);
  }
  throw std::invalid_argument(std::string("unknown ") + what + " '" + name + "'");
}

// The ChoiceOptions of a batch-invariance level by name ("off", "reduction_order", "config"; types.h).
inline ChoiceOptions choice_options(const std::string& batch_invariance) {
  return {parse_name<BatchInvariance>(batch_invariance, 3, "batch invariance level")};
}

// A compiled variant as the dict that Python turns into a KernelConfig.
pybind11::dict variant_dict(const VariantInfo& v);
// Each of the variants as variant_dict makes it.
pybind11::list variant_dicts(const std::vector<VariantInfo>& variants);

// Adds a kernel family's functions to wavetune._C when the module is created; `family` names the registered
// KernelFamily (family.h) they launch.
struct FamilyBindings {
  FamilyBindings(const char* family, void (*bind)(pybind11::module_& m));

  // The table the family's launches of a scales mode (its index in the family's table scales, table_scales)
  // consult on a device when no config is forced (use_table), or nullptr. A plain array read: it is on every
  // launch's path.
  const Selector* active_table(int device, size_t scales = 0) const;

  const char* family;
  void (*bind)(pybind11::module_& m);
  size_t index = 0;         // of the family in kernel_families(), set when the module is created
  size_t scales_count = 1;  // the scales modes of its tables, set then too
};

}  // namespace wavetune::bindings

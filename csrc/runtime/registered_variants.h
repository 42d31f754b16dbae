// A kernel family's registration with the kernel library (family.h's KernelFamily), made of the registry of its
// compiled variants: the generated registration of each family with a config space defines one.
#pragma once

#include <cstdint>
#include <vector>

#include "registered.h"
#include "variant_registry.h"
#include "wavetune/family.h"

namespace wavetune::detail {

// Registers the family `name` whose compiled variants kRegistry() holds (variant libraries add to it) and whose
// config space hash() names.
template <class Ops, VariantRegistry<Ops>& (*kRegistry)()>
class RegisteredVariants {
 public:
  RegisteredVariants(const char* name, const char* (*hash)()) : family_{name, &infos, hash, &add} {}

 private:
  static const std::vector<VariantInfo>& infos() { return kRegistry().infos(); }
  static int32_t add(const VariantInfo* infos, const void* const* ops, int32_t count) {
    return kRegistry().add(infos, ops, count);
  }

  KernelFamily family_;
  Registration<KernelFamily> registration_{&family_};
};

}  // namespace wavetune::detail

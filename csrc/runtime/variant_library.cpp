// Loading a variant library (include/wavetune/variant_library.h): checks what it was built for, then
// registers its variants with their family.
#include "wavetune/variant_library.h"

#include <dlfcn.h>

#include <cstring>
#include <string>
#include <vector>

#include "variant_library_abi.h"
#include "wavetune/errors.h"
#include "wavetune/family.h"

#define WAVETUNE_STRINGIFY_(x) #x
#define WAVETUNE_STRINGIFY(x) WAVETUNE_STRINGIFY_(x)

namespace wavetune {
namespace {

// Why this build cannot take the library's variants; empty when it can.
std::string library_error(const detail::VariantLibrary& lib) {
  const std::string family = lib.family ? lib.family : "";
  const KernelFamily* known = find_kernel_family(family);
  const char* hash = known ? known->config_space_hash() : nullptr;
  std::string error;
  if (lib.abi_version != WAVETUNE_ABI_VERSION) {
    error = "built for ABI version " + std::to_string(lib.abi_version);
  } else if (!known) {
    error = "its kernel family '" + family + "' is not compiled into this build";
  } else if (!lib.config_space_hash || std::strcmp(lib.config_space_hash, hash) != 0) {
    error = "generated from " + family + " config space " + (lib.config_space_hash ? lib.config_space_hash : "?") +
            ", this build was compiled from " + hash;
  }
  for (int32_t i = 0; error.empty() && i < lib.count; ++i) {
    const VariantInfo& v = lib.infos[i];
    if (v.id < 0 || v.id >= kDecodeVariantIds || !v.name || !lib.ops[i]) {
      error = "variant " + std::to_string(i) + " is malformed";
    }
  }
  return error;
}

}  // namespace

LoadedVariants load_variant_library(const std::string& path) {
  constexpr const char* kSymbol = WAVETUNE_STRINGIFY(WAVETUNE_VARIANT_LIBRARY_SYMBOL);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) WAVETUNE_INVALID("cannot load the variant library ", path, ": ", dlerror());
  const auto entry = reinterpret_cast<detail::VariantLibraryEntryPoint>(dlsym(handle, kSymbol));
  const detail::VariantLibrary* lib = entry ? entry() : nullptr;
  const std::string error = lib ? library_error(*lib)
                                : std::string("it exports no ") + kSymbol + " (another ABI version, or not a variant library)";
  if (!error.empty()) {
    dlclose(handle);
    WAVETUNE_INVALID("variant library ", path, " does not fit this build: ", error,
                     "; delete it and compile it again (python -m wavetune build)");
  }
  // NOTES: the library is never closed: the registry keeps its variants' ops and names for the process.
  LoadedVariants loaded{lib->family, {}, find_kernel_family(lib->family)->add_variants(lib->infos, lib->ops, lib->count)};
  for (int32_t i = 0; i < lib->count; ++i) loaded.names.emplace_back(lib->infos[i].name);
  return loaded;
}

}  // namespace wavetune

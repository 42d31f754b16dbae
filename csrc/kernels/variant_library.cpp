// Loading a variant library (include/wavetune/variant_library.h): checks what it was built for, then
// registers its variants with their family.
#include "wavetune/variant_library.h"

#include <dlfcn.h>

#include <cstring>
#include <string>
#include <vector>

#include "attention_ops.h"
#include "grouped_ops.h"
#include "variant_library_abi.h"
#include "variant_ops.h"
#include "wavetune/attention.h"
#include "wavetune/errors.h"
#include "wavetune/grouped.h"

#define WAVETUNE_STRINGIFY_(x) #x
#define WAVETUNE_STRINGIFY(x) WAVETUNE_STRINGIFY_(x)

namespace wavetune {
namespace {

// The family's config-space hash in this build, or nullptr for an unknown family.
const char* family_hash(const std::string& family) {
  if (family == "gemm") return detail::config_space_hash();
  if (family == "grouped_gemm") return grouped_config_space_hash();
  if (family == "attention") return attention_config_space_hash();
  return nullptr;
}

// Why this build cannot take the library's variants; empty when it can.
std::string library_error(const detail::VariantLibrary& lib) {
  const std::string family = lib.family ? lib.family : "";
  const char* hash = family_hash(family);
  std::string error;
  if (lib.abi_version != WAVETUNE_ABI_VERSION) {
    error = "built for ABI version " + std::to_string(lib.abi_version);
  } else if (!hash) {
    error = "its kernel family '" + family + "' is not one of gemm, grouped_gemm, attention";
  } else if (!lib.config_space_hash || std::strcmp(lib.config_space_hash, hash) != 0) {
    error = "generated from " + family + " config space " + (lib.config_space_hash ? lib.config_space_hash : "?") +
            ", this build was compiled from " + hash;
  }
  for (int32_t i = 0; error.empty() && i < lib.count; ++i) {
    const VariantInfo& v = lib.infos[i];
    if (v.id < 0 || v.id >= kLibraryVariantIds || !v.name || !lib.ops[i]) {
      error = "variant " + std::to_string(i) + " is malformed";
    }
  }
  return error;
}

template <class Ops>
std::vector<typename detail::VariantRegistry<Ops>::Entry> entries_of(const detail::VariantLibrary& lib) {
  std::vector<typename detail::VariantRegistry<Ops>::Entry> out;
  for (int32_t i = 0; i < lib.count; ++i) out.push_back({lib.infos[i], static_cast<const Ops*>(lib.ops[i])});
  return out;
}

int32_t register_variants(const detail::VariantLibrary& lib) {
  const std::string family = lib.family;
  if (family == "gemm") return detail::add_variants(entries_of<detail::VariantOps>(lib));
  if (family == "grouped_gemm") return detail::add_grouped_variants(entries_of<detail::GroupedVariantOps>(lib));
  return detail::add_attention_variants(entries_of<detail::AttentionVariantOps>(lib));
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
  LoadedVariants loaded{lib->family, {}, register_variants(*lib)};
  for (int32_t i = 0; i < lib->count; ++i) loaded.names.emplace_back(lib->infos[i].name);
  return loaded;
}

}  // namespace wavetune

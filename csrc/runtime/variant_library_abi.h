// What a variant library exports (include/wavetune/variant_library.h): one extern "C" function, named after
// the ABI version, that returns its variants' descriptions and ops. The variant library's source is a
// generated variant source followed by WAVETUNE_DEFINE_VARIANT_LIBRARY (python/wavetune/config_space.py).
#pragma once

#include <cstdint>
#include <iterator>

#include "variant_registry.h"
#include "wavetune/types.h"
#include "wavetune/version.h"

#define WAVETUNE_VARIANT_LIBRARY_NAME(abi) wavetune_variant_library_v##abi
#define WAVETUNE_VARIANT_LIBRARY_SYMBOL_OF(abi) WAVETUNE_VARIANT_LIBRARY_NAME(abi)
#define WAVETUNE_VARIANT_LIBRARY_SYMBOL WAVETUNE_VARIANT_LIBRARY_SYMBOL_OF(WAVETUNE_ABI_VERSION)

namespace wavetune::detail {

struct VariantLibrary {
  int32_t abi_version;            // WAVETUNE_ABI_VERSION of the headers it was compiled with
  const char* family;             // config_space.py's family name
  const char* config_space_hash;  // of the family's config space it was generated from
  int32_t count;
  const VariantInfo* infos;
  const void* const* ops;  // per variant, its family's ops (VariantOps, GroupedVariantOps, AttentionVariantOps)
};

using VariantLibraryEntryPoint = const VariantLibrary* (*)();

}  // namespace wavetune::detail

#define WAVETUNE_LIBRARY_INFO(...) WAVETUNE_VARIANT_INFO(__VA_ARGS__),
#define WAVETUNE_LIBRARY_OPS(ID, NAME, ...) &::wavetune::detail::variant_##NAME,
// LIST: an X-macro list of the variants the source instantiated, as in the generated registry lists.
#define WAVETUNE_DEFINE_VARIANT_LIBRARY(FAMILY, HASH, LIST)                                                   \
  namespace {                                                                                                 \
  const ::wavetune::VariantInfo wavetune_library_infos[] = {LIST(WAVETUNE_LIBRARY_INFO)};                     \
  const void* const wavetune_library_ops[] = {LIST(WAVETUNE_LIBRARY_OPS)};                                    \
  const ::wavetune::detail::VariantLibrary wavetune_library{                                                  \
      WAVETUNE_ABI_VERSION, FAMILY, HASH, int32_t(std::size(wavetune_library_infos)), wavetune_library_infos, \
      wavetune_library_ops};                                                                                  \
  }                                                                                                           \
  extern "C" WAVETUNE_API const ::wavetune::detail::VariantLibrary* WAVETUNE_VARIANT_LIBRARY_SYMBOL() {       \
    return &wavetune_library;                                                                                 \
  }

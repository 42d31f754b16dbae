// Variants compiled after the build, each into a shared object of its own (a variant library: `python -m
// wavetune build` and the on-demand compiles make them, docs/kernels.md), added to the kernel library at run
// time. Once added, a variant is listed and launched as a compiled-in one; a Selector made afterwards can
// choose it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wavetune/types.h"

namespace wavetune {

struct LoadedVariants {
  std::string family;              // "gemm", "grouped_gemm" or "attention"
  std::vector<std::string> names;  // the variants the library holds
  int32_t added;                   // how many of them were not registered before
};

// Loads a variant library (dlopen) and registers its variants with their family; variants already
// registered keep their first entry. Throws InvalidArgument when the file cannot be loaded or was built
// for another ABI version or config space. Safe beside launches on other threads. A loaded library stays
// loaded for the process.
WAVETUNE_API LoadedVariants load_variant_library(const std::string& path);

}  // namespace wavetune

// Internal interface between the runtime (launch.cu, registry.cpp) and the generated variant sources.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "device.h"
#include "variant_registry.h"
#include "wavetune/kernels.h"

namespace wavetune::detail {

// What each generated variant exports; the registry holds one per compiled variant.
struct VariantOps {
  // Empty when the variant can run the (already validated) problem with these micro parameters.
  std::string (*why_not)(const GemmProblem&, const MicroParams&, const DeviceInfo&);
  // Scratch bytes the launch needs (kernels.h, gemm_workspace_bytes).
  size_t (*workspace_bytes)(const GemmProblem&, const MicroParams&, const DeviceInfo&);
  // Launches with the caller's workspace, after checking it holds what the launch needs (require_workspace).
  void (*run)(const GemmProblem&, const MicroParams&, const DeviceInfo&, void* workspace, size_t workspace_bytes,
              Stream);
  // CTAs of the kernel resident per SM of the device (0: none fit); null: one, a persistent kernel's stages fill
  // the SM's shared memory, and library candidates are modeled as one.
  int (*ctas_per_sm)(const DeviceInfo&) = nullptr;
};

// "M=... N=... K=...": names a problem in the variants' errors.
inline std::string describe(const GemmProblem& p) {
  return "M=" + std::to_string(p.m) + " N=" + std::to_string(p.n) + " K=" + std::to_string(p.k);
}

// The generated registry: the ops of a compiled variant, nullptr when not compiled in.
const VariantOps* variant_ops(int32_t id);

// The cuBLAS candidates (cublas_variant.cu), ids from kLibraryVariantIds; none when libcublas cannot be loaded.
std::vector<VariantRegistry<VariantOps>::Entry> library_variants();
// The decode GEMM's variants (decode_variants.cu), ids from kDecodeVariantIds.
std::vector<VariantRegistry<VariantOps>::Entry> decode_variants();
const char* config_space_hash();
const char* kernel_set_name();

// The M-bucket heuristic's variant for the problem ([fallback] in cutlass_configs/: the first compiled bucket that
// holds M), else the first compiled non-library variant of its dtype and layout that runs here; nullptr if none.
const VariantInfo* bucket_variant(const GemmProblem& p);

// Empty when the variant's dtype, layout and tile scheduler accept the problem and micro parameters.
std::string variant_error(const VariantInfo& variant, const GemmProblem& problem, const MicroParams& micro);

}  // namespace wavetune::detail

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
};

// Registry (registry.cpp): the ops of a compiled variant, nullptr when not compiled in.
const VariantOps* variant_ops(int32_t id);

// The cuBLAS candidates (cublas_variant.cu), ids from `first_id`; none when libcublas cannot be
// loaded or the build has no CUDA.
std::vector<VariantRegistry<VariantOps>::Entry> library_variants(int32_t first_id);
// The decode GEMM's variants (decode_variants.cu), ids from `first_id`; none without CUDA.
std::vector<VariantRegistry<VariantOps>::Entry> decode_variants(int32_t first_id);
const char* config_space_hash();
const char* kernel_set_name();

// Empty when the variant's dtype, layout and tile scheduler accept the problem and micro parameters.
std::string variant_error(const VariantInfo& variant, const GemmProblem& problem, const MicroParams& micro);

}  // namespace wavetune::detail

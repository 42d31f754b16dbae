// Internal interface between the scaled GEMM's launch (launch.cu) and its host-only parts (registry.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device.h"
#include "variant_registry.h"
#include "wavetune/scaled_gemm.h"

namespace wavetune::detail {

struct ScaledVariantOps {
  // The K splits a launch with `splits` (0: the variant's own choice) runs.
  int32_t (*splits)(const ScaledGemmProblem&, int32_t splits, const DeviceInfo&);
  // Empty when the variant runs the (valid) problem with that many splits.
  std::string (*why_not)(const ScaledGemmProblem&, int32_t splits, const DeviceInfo&);
  size_t (*workspace_bytes)(const ScaledGemmProblem&, int32_t splits, const DeviceInfo&);
  void (*run)(const ScaledGemmProblem&, int32_t splits, const DeviceInfo&, void* workspace, size_t workspace_bytes,
              Stream);
  // The decode variants' CTAs resident per SM (the size of their waves, launch.cu); null for the others.
  int32_t (*resident_ctas)(const DeviceInfo&) = nullptr;
};

// The built-in decode variants (launch.cu), ids from kDecodeVariantIds.
std::vector<VariantRegistry<ScaledVariantOps>::Entry> scaled_decode_variants();
// The cuBLASLt candidate per output dtype (cublaslt_variant.cu), ids from kLibraryVariantIds; none where
// libcublasLt cannot be opened.
std::vector<VariantRegistry<ScaledVariantOps>::Entry> scaled_library_variants();
// The cuBLASLt variant that scales its product in a second pass sits this far past the first cuBLASLt id.
constexpr int32_t kRescaledVariantOffset = 2;
// Whether the variant is that one (the choice gives it only the problems where the pass pays).
bool scales_in_second_pass(int32_t variant_id);
// The generated registry: the ops of a variant, nullptr when not compiled in.
const ScaledVariantOps* scaled_variant_ops(int32_t id);
// The variant choose runs (scaled_gemm.h; launch.cu), -1 for another GEMM.
int32_t scaled_variant_choice(const ScaledGemmProblem& p);

}  // namespace wavetune::detail

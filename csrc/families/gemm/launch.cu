// The dense GEMM family's launch entry points (kernels.h): checks, then the variant's ops.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <mutex>
#include <sstream>

#include "cutlass/version.h"
#include "variant_ops.h"
#include "cuda_check.h"
#include "wavetune/errors.h"
#include "wavetune/kernels.h"

namespace wavetune {

BuildInfo build_info() {
  return {!variants().empty(), detail::kernel_set_name(), detail::config_space_hash(), CUDART_VERSION,
          CUTLASS_MAJOR * 100 + CUTLASS_MINOR * 10 + CUTLASS_PATCH};
}

namespace {
// Everything that can be said without launching: the problem (its data pointers too, unless
// `sizes_only`), the variant, the device.
std::string check(const GemmProblem& p, int32_t variant_id, const MicroParams& micro, bool sizes_only,
                  const detail::DeviceInfo** dev, const detail::VariantOps** ops) {
  std::string error = sizes_only ? shape_error(p) : problem_error(p);
  if (!error.empty()) return error;
  const VariantInfo* variant = find_variant(variant_id);
  if (!variant) {
    return "variant id " + std::to_string(variant_id) + " is not compiled into this build (kernel set '" +
           detail::kernel_set_name() + "'); wavetune.configs() lists the compiled ones";
  }
  error = detail::variant_error(*variant, p, micro);
  if (!error.empty()) return error;
  if (const char* device_error = detail::current_device_error()) return device_error;
  *dev = &detail::current_device_info();
  error = detail::arch_error(*variant);
  if (!error.empty()) return error;
  *ops = detail::variant_ops(variant_id);
  return {};
}
}  // namespace

std::string why_not(const GemmProblem& p, int32_t variant_id, const MicroParams& micro) {
  const detail::DeviceInfo* dev = nullptr;
  const detail::VariantOps* ops = nullptr;
  std::string error = check(p, variant_id, micro, false, &dev, &ops);
  return error.empty() ? ops->why_not(p, micro, *dev) : error;
}

size_t gemm_workspace_bytes(const GemmProblem& p, int32_t variant_id, const MicroParams& micro) {
  const detail::DeviceInfo* dev = nullptr;
  const detail::VariantOps* ops = nullptr;
  std::string error = check(p, variant_id, micro, true, &dev, &ops);
  if (!error.empty()) WAVETUNE_INVALID(error);
  return ops->workspace_bytes(p, micro, *dev);
}

int32_t gemm_ctas_per_sm(int32_t variant_id) {
  const VariantInfo* variant = find_variant(variant_id);
  if (!variant) WAVETUNE_INVALID("variant id ", variant_id, " is not compiled into this build");
  if (const char* device_error = detail::current_device_error()) WAVETUNE_INVALID(device_error);
  const std::string error = detail::arch_error(*variant);
  if (!error.empty()) WAVETUNE_INVALID(error);
  const detail::VariantOps* ops = detail::variant_ops(variant_id);
  return ops->ctas_per_sm ? ops->ctas_per_sm(detail::current_device_info()) : 1;
}

void gemm(const GemmProblem& p, int32_t variant_id, const MicroParams& micro, void* workspace, size_t workspace_bytes,
          Stream stream) {
  const detail::DeviceInfo* dev = nullptr;
  const detail::VariantOps* ops = nullptr;
  std::string error = check(p, variant_id, micro, false, &dev, &ops);
  if (!error.empty()) WAVETUNE_INVALID(error);
  ops->run(p, micro, *dev, workspace, workspace_bytes, stream);
}

}  // namespace wavetune

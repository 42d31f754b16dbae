// The CUDA side of the kernel library: device checks, the workspace contract, and the launch entry points.
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
namespace detail {
namespace {

struct DeviceSlot {
  std::once_flag once;
  DeviceInfo info{};
  std::string error;  // why this device cannot run the kernels, empty when it can
};

// Properties are read once per device: a launch must not pay for cudaGetDeviceProperties.
const DeviceSlot& current_device() {
  static std::array<DeviceSlot, kMaxDevices> slots;
  int device = 0;
  WAVETUNE_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices) WAVETUNE_FAIL("device ordinal ", device, " out of range");
  DeviceSlot& slot = slots[device];
  std::call_once(slot.once, [&] {
    int major = 0, minor = 0, sms = 0;
    WAVETUNE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    WAVETUNE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    WAVETUNE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    slot.info = DeviceInfo{device, sms};
    if (major != 9 || minor != 0) {
      std::ostringstream os;
      os << "CUDA device " << device << " has compute capability " << major << "." << minor
         << "; wavetune's kernels are built for sm_90a (Hopper: H100, H200, GH200)";
      slot.error = os.str();
    }
  });
  return slot;
}

}  // namespace

const DeviceInfo& current_device_info() {
  const DeviceSlot& slot = current_device();
  if (!slot.error.empty()) WAVETUNE_INVALID(slot.error);
  return slot.info;
}

void require_workspace(size_t needed, const void* workspace, size_t workspace_bytes) {
  if (workspace_bytes < needed || (needed && !workspace)) {
    WAVETUNE_INVALID("this launch needs ", needed, " bytes of workspace, got ", workspace_bytes,
                     " (gemm_workspace_bytes gives the size)");
  }
}

}  // namespace detail

BuildInfo build_info() {
  return {!variants().empty(), detail::kernel_set_name(), detail::config_space_hash(), CUDART_VERSION,
          CUTLASS_MAJOR * 100 + CUTLASS_MINOR * 10 + CUTLASS_PATCH};
}

namespace {
// Everything that can be said without launching: the problem (its data pointers too, unless
// `sizes_only`), the variant, the device.
std::string check(const GemmProblem& p, int32_t variant_id, const MicroParams& micro, bool sizes_only,
                  const detail::DeviceSlot** dev, const detail::VariantOps** ops) {
  std::string error = sizes_only ? shape_error(p) : problem_error(p);
  if (!error.empty()) return error;
  const VariantInfo* variant = find_variant(variant_id);
  if (!variant) {
    return "variant id " + std::to_string(variant_id) + " is not compiled into this build (kernel set '" +
           detail::kernel_set_name() + "'); wavetune.configs() lists the compiled ones";
  }
  error = detail::variant_error(*variant, p, micro);
  if (!error.empty()) return error;
  *dev = &detail::current_device();
  if (!(*dev)->error.empty()) return (*dev)->error;
  *ops = detail::variant_ops(variant_id);
  return {};
}
}  // namespace

std::string why_not(const GemmProblem& p, int32_t variant_id, const MicroParams& micro) {
  const detail::DeviceSlot* dev = nullptr;
  const detail::VariantOps* ops = nullptr;
  std::string error = check(p, variant_id, micro, false, &dev, &ops);
  return error.empty() ? ops->why_not(p, micro, dev->info) : error;
}

size_t gemm_workspace_bytes(const GemmProblem& p, int32_t variant_id, const MicroParams& micro) {
  const detail::DeviceSlot* dev = nullptr;
  const detail::VariantOps* ops = nullptr;
  std::string error = check(p, variant_id, micro, true, &dev, &ops);
  if (!error.empty()) WAVETUNE_INVALID(error);
  return ops->workspace_bytes(p, micro, dev->info);
}

void gemm(const GemmProblem& p, int32_t variant_id, const MicroParams& micro, void* workspace, size_t workspace_bytes,
          Stream stream) {
  const detail::DeviceSlot* dev = nullptr;
  const detail::VariantOps* ops = nullptr;
  std::string error = check(p, variant_id, micro, false, &dev, &ops);
  if (!error.empty()) WAVETUNE_INVALID(error);
  ops->run(p, micro, dev->info, workspace, workspace_bytes, stream);
}

}  // namespace wavetune

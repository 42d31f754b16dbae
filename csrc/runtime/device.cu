// The device state every kernel family's launch shares (device.h), and what the public API says of the
// device (kernels.h: device_properties, no_device_reason).
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <array>
#include <mutex>
#include <sstream>
#include <string>

#include "cuda_check.h"
#include "device.h"
#include "wavetune/errors.h"
#include "wavetune/kernels.h"

namespace wavetune {
namespace detail {
namespace {

// Peak DRAM bandwidth: double data rate at the memory clock over the bus width.
double memory_bytes_per_s(int device) {
  int khz = 0, bits = 0;
  WAVETUNE_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device));
  WAVETUNE_CUDA_CHECK(cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, device));
  return 2.0 * khz * 1e3 * bits / 8;
}

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
    slot.info = DeviceInfo{device, sms, memory_bytes_per_s(device) / 1e6};
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

const char* current_device_error() {
  const DeviceSlot& slot = current_device();
  return slot.error.empty() ? nullptr : slot.error.c_str();
}

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

std::string no_device_reason() {
  // NOTES: without a driver the runtime says "cudaErrorInsufficientDriver", which reads as an outdated
  // driver; the missing library says what is wrong.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!driver) return "no NVIDIA driver is installed (libcuda.so.1 cannot be loaded)";
  dlclose(driver);
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear it, so the next CUDA call does not report it
    return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
  }
  return count > 0 ? "" : "the CUDA runtime sees no device";
}

DeviceProperties device_properties() {
  int device = 0;
  WAVETUNE_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  WAVETUNE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return {prop.name, prop.multiProcessorCount, prop.l2CacheSize, prop.major, prop.minor, detail::memory_bytes_per_s(device)};
}

}  // namespace wavetune

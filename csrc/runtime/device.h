// What every kernel family's launch needs of the device and of the caller's workspace (device.cu).
#pragma once

#include <cstddef>
#include <string>

#include "wavetune/types.h"

namespace wavetune::detail {

// Device ordinals the runtime keeps per-device state for (properties, shared-memory limits).
constexpr int kMaxDevices = 64;

struct DeviceInfo {
  int device;
  int sm_count;
  double memory_bytes_per_us;  // peak DRAM bandwidth: twice the memory clock times the bus width
  int32_t compute_capability;  // as served: WAVETUNE_ARCH's where set (kernels.h, arch_override), else the device's
  int32_t own_compute_capability;  // the device's own
};

// The current device, with the SMs of the current context (fewer in a green context); InvalidArgument when it
// cannot run the kernels (older than compute capability 8.0, or a WAVETUNE_ARCH it refuses). The device is read once; the reference holds until the next call on the
// thread.
const DeviceInfo& current_device_info();

// Why the current device cannot run the kernels, empty when it can (current_device_info without throwing).
const char* current_device_error();

// Empty when variant `v` runs on the current device (runs_here), else why not, naming both architectures.
std::string arch_error(const VariantInfo& v);

// WAVETUNE_ARCH's compute capability (kernels.h, arch_override) with `error` set to why it is refused instead of
// throwing.
int32_t arch_override(std::string* error);

// The current device's own compute capability (not WAVETUNE_ARCH's); served_compute_capability where no device
// can be used.
int32_t own_compute_capability();

// Records that a device is served as compute capability `cc`: programmatic dependent launch is off in a process
// that serves one below 9.0 (launch_options.cpp).
void note_served_compute_capability(int32_t cc);

// InvalidArgument unless the caller's workspace holds `needed` bytes. The variant checks it in `run`, where
// it has the size at hand: the launch path works out each variant's arguments once. Exported: variant
// libraries compiled at run time (variant_library.h) call it too.
WAVETUNE_API void require_workspace(size_t needed, const void* workspace, size_t workspace_bytes);

}  // namespace wavetune::detail

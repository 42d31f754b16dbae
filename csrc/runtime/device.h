// What every kernel family's launch needs of the device and of the caller's workspace (device.cu).
#pragma once

#include <cstddef>

#include "wavetune/types.h"

namespace wavetune::detail {

// Device ordinals the runtime keeps per-device state for (properties, shared-memory limits).
constexpr int kMaxDevices = 64;

struct DeviceInfo {
  int device;
  int sm_count;
  double memory_bytes_per_us;  // peak DRAM bandwidth: twice the memory clock times the bus width
};

// The current device, with the SMs of the current context (fewer in a green context); InvalidArgument when it
// cannot run the kernels (not Hopper). The device is read once; the reference holds until the next call on the
// thread.
const DeviceInfo& current_device_info();

// Why the current device cannot run the kernels, empty when it can (current_device_info without throwing).
const char* current_device_error();

// InvalidArgument unless the caller's workspace holds `needed` bytes. The variant checks it in `run`, where
// it has the size at hand: the launch path works out each variant's arguments once. Exported: variant
// libraries compiled at run time (variant_library.h) call it too.
WAVETUNE_API void require_workspace(size_t needed, const void* workspace, size_t workspace_bytes);

}  // namespace wavetune::detail

// Launch details shared by the CUTLASS templates (sm90_gemm.cuh, sm90_grouped_gemm.cuh).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <mutex>

#include "cutlass/device_kernel.h"
#include "device.h"
#include "wavetune/errors.h"

namespace wavetune::detail {

// NOTES: CUTLASS's Adapter::initialize raises the kernel's dynamic shared-memory limit on every call, a
// driver call per launch; the limit belongs to the kernel on a device, so the templates set it once per
// device here and then do the rest of initialize (workspace, params) themselves.
template <class Kernel>
void allow_dynamic_shared_memory(int device) {
  static std::array<std::once_flag, kMaxDevices> done;
  std::call_once(done.at(device), [] {
    constexpr int bytes = Kernel::SharedStorageSize;
    if constexpr (bytes >= (48 << 10)) {
      cudaError_t error =
          cudaFuncSetAttribute(cutlass::device_kernel<Kernel>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      if (error != cudaSuccess) {
        cudaGetLastError();  // clear it, so the next CUDA call does not report it
        WAVETUNE_FAIL("cannot give the kernel ", bytes, " bytes of shared memory: ", cudaGetErrorString(error));
      }
    }
  });
}

}  // namespace wavetune::detail

// A kernel launch with programmatic dependent launch where it is on (kernels.h: set_programmatic_launch), for
// kernels that wait for their predecessor with griddepcontrol.wait before they read what it may write
// (release_dependents_and_wait); optionally in clusters of `cluster_x` CTAs along x. Both need code compiled for
// sm_90 or later (arch_features.h); the same kernels built from compute_80 PTX launch plainly.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>

#include "arch_features.h"
#include "wavetune/errors.h"
#include "wavetune/kernels.h"

namespace wavetune::detail {

// Lets the next kernel in the stream start (it waits in turn before reading what this one writes), then
// waits until the kernel before this one has finished and its writes are visible. Without a programmatic
// launch both are no-ops; below sm_90 they are left out (launch_programmatic then launches plainly).
__device__ __forceinline__ void release_dependents_and_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The architecture (10 * major + minor) of the code the driver loaded for `kernel` on the current device: its
// PTX target, not the device's compute capability. NOTES: the portable kernels also ship as compute_80 PTX,
// which the driver JIT-compiles wherever no cubin fits (any GPU but Hopper, or under CUDA_FORCE_PTX_JIT=1);
// that code has no griddepcontrol.wait, so launched with programmatic serialization it would read its
// predecessor's output too early. Read once per device and kernel for every thread (a warm-up on one thread
// spares a graph capture on another the query); 0 when the driver cannot tell.
inline int kernel_code_arch(const void* kernel) {
  static std::mutex mutex;
  static std::map<std::pair<int, const void*>, int> archs;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return cudaGetLastError(), 0;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto known = archs.find({device, kernel});
  if (known != archs.end()) return known->second;
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess) return cudaGetLastError(), 0;  // the launch reports it
  return archs[{device, kernel}] = attributes.ptxVersion;
}

inline cudaError_t launch_programmatic(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                                       cudaStream_t stream, void** args, unsigned cluster_x = 1) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid, config.blockDim = block, config.dynamicSmemBytes = shared_bytes, config.stream = stream;
  cudaLaunchAttribute attributes[2];
  config.attrs = attributes;
  if (cluster_x > 1) {
    if (!clusters_supported(kernel_code_arch(kernel))) return cudaErrorNotSupported;
    attributes[config.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attributes[config.numAttrs].val.clusterDim.x = cluster_x;
    attributes[config.numAttrs].val.clusterDim.y = 1;
    attributes[config.numAttrs++].val.clusterDim.z = 1;
  }
  if (programmatic_launch() && programmatic_launch_supported(kernel_code_arch(kernel))) {
    attributes[config.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[config.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
  }
  return cudaLaunchKernelExC(&config, kernel, args);
}

// Raises "<what> launch failed: <error>" for a failed launch, after clearing CUDA's last error so that the
// next call does not report it too.
inline void check_launch(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    cudaGetLastError();
    WAVETUNE_FAIL(what, " launch failed: ", cudaGetErrorString(status));
  }
}

}  // namespace wavetune::detail

// A kernel launch with programmatic dependent launch where it is on (kernels.h: set_programmatic_launch), for
// kernels that wait for their predecessor with griddepcontrol.wait before they read what it may write
// (release_dependents_and_wait); optionally in clusters of `cluster_x` CTAs along x. Both need code compiled for
// sm_90 or later; the same kernels run from their compute_80 PTX launch plainly (ptx_jit_forced).
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

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

// Whether the driver runs kernels from their PTX (CUDA_FORCE_PTX_JIT set and not 0). NOTES: the portable kernels
// also ship as compute_80 PTX, whose code has neither griddepcontrol.wait nor the cluster merge. The driver loads
// it where no cubin fits, that is below Hopper, where programmatic launch is off (programmatic_launch) and the
// choices take no cluster merge; and on any GPU when this variable forces it, where the launches are then plain.
// Read once per process, as the driver reads it.
inline bool ptx_jit_forced() {
  static const bool forced = [] {
    const char* value = std::getenv("CUDA_FORCE_PTX_JIT");
    return value && *value && std::string(value) != "0";
  }();
  return forced;
}

inline cudaError_t launch_programmatic(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                                       cudaStream_t stream, void** args, unsigned cluster_x = 1) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid, config.blockDim = block, config.dynamicSmemBytes = shared_bytes, config.stream = stream;
  cudaLaunchAttribute attributes[2];
  config.attrs = attributes;
  if (cluster_x > 1) {
    if (ptx_jit_forced()) return cudaErrorNotSupported;
    attributes[config.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attributes[config.numAttrs].val.clusterDim.x = cluster_x;
    attributes[config.numAttrs].val.clusterDim.y = 1;
    attributes[config.numAttrs++].val.clusterDim.z = 1;
  }
  if (programmatic_launch() && !ptx_jit_forced()) {
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

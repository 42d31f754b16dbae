// A kernel launch with programmatic dependent launch where it is on (kernels.h: set_programmatic_launch), for
// kernels that wait for their predecessor with griddepcontrol.wait before they read what it may write
// (release_dependents_and_wait); optionally in clusters of `cluster_x` CTAs along x.
#pragma once

#include <cuda_runtime.h>

#include "wavetune/errors.h"
#include "wavetune/kernels.h"

namespace wavetune::detail {

// Lets the next kernel in the stream start (it waits in turn before reading what this one writes), then
// waits until the kernel before this one has finished and its writes are visible. Without a programmatic
// launch both are no-ops.
__device__ __forceinline__ void release_dependents_and_wait() {
  asm volatile("griddepcontrol.launch_dependents;");
  asm volatile("griddepcontrol.wait;" ::: "memory");
}


inline cudaError_t launch_programmatic(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                                       cudaStream_t stream, void** args, unsigned cluster_x = 1) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid, config.blockDim = block, config.dynamicSmemBytes = shared_bytes, config.stream = stream;
  cudaLaunchAttribute attributes[2];
  config.attrs = attributes;
  if (cluster_x > 1) {
    attributes[config.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attributes[config.numAttrs].val.clusterDim.x = cluster_x;
    attributes[config.numAttrs].val.clusterDim.y = 1;
    attributes[config.numAttrs++].val.clusterDim.z = 1;
  }
  if (programmatic_launch()) {
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

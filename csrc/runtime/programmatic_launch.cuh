// A kernel launch with programmatic dependent launch where it is on (kernels.h: set_programmatic_launch), for
// the families' hand-written kernels, which wait for their predecessor with griddepcontrol.wait.
#pragma once

#include <cuda_runtime.h>

#include "wavetune/kernels.h"

namespace wavetune::detail {

inline cudaError_t launch_programmatic(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                                       cudaStream_t stream, void** args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid, config.blockDim = block, config.dynamicSmemBytes = shared_bytes, config.stream = stream;
  cudaLaunchAttribute pdl;
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &pdl;
  config.numAttrs = programmatic_launch() ? 1 : 0;
  return cudaLaunchKernelExC(&config, kernel, args);
}

}  // namespace wavetune::detail

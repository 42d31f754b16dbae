// CUDA runtime errors as wavetune::RuntimeError with the call, the error and where it happened.
#pragma once

#include <cuda_runtime.h>

#include "wavetune/errors.h"

#define WAVETUNE_CUDA_CHECK(expr)                                                                    \
  do {                                                                                               \
    cudaError_t wavetune_err_ = (expr);                                                              \
    if (wavetune_err_ != cudaSuccess) {                                                              \
      WAVETUNE_FAIL(#expr, " failed: ", cudaGetErrorName(wavetune_err_), " (",                       \
                    cudaGetErrorString(wavetune_err_), ")");                                         \
    }                                                                                                \
  } while (0)

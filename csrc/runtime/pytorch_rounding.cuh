// Element-wise results rounded where PyTorch's eager code rounds them, for kernels whose outputs must match a
// transformers module's: the layer ops (layer_ops.h) and the GEMM epilogues that fuse one of them (types.h,
// Epilogue).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace wavetune::detail {

// What PyTorch stores for a float result of a bf16/fp16 operation: the rounded value, read back as float.
template <typename T>
__device__ __forceinline__ float rounded(float v) {
  return static_cast<float>(static_cast<T>(v));
}

// act_fn(gate) * up with act_fn SiLU, from a gate and an up value as stored in T: SiLU in fp32 (PyTorch's opmath),
// rounded to T, times up, rounded to T.
template <typename T>
__device__ __forceinline__ T silu_mul_rounded(float gate, float up) {
  return static_cast<T>(rounded<T>(gate / (1.0f + expf(-gate))) * up);
}

}  // namespace wavetune::detail

// The checks both FP8 grouped families (scaled_grouped_gemm, block_scaled_grouped_gemm) make of a problem
// beyond the grouped family's, with no GPU.
#pragma once

#include <cstdint>
#include <string>

#include "wavetune/grouped.h"

namespace wavetune::detail {

// Empty when the sizes, pointers and alignment are valid for e4m3 x and w with float32 scales.
inline std::string e4m3_grouped_problem_error(const GroupedGemmProblem& p, const float* scale_x,
                                              const float* scale_w) {
  std::string error = grouped_problem_error(p);  // sizes, data pointers and their alignment
  if (!error.empty()) return error;
  auto misaligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 4 != 0; };
  if (p.k % 16 != 0) {
    return "K=" + std::to_string(p.k) + " must be a multiple of 16: the kernels move 16-byte rows of e4m3 "
           "values with TMA (pad K to a multiple of 16)";
  }
  if (p.dtype != DType::bf16 && p.dtype != DType::fp16) return "the output must be bf16 or fp16";
  if (!scale_x || !scale_w) return "null scale pointer";
  if (misaligned(scale_x) || misaligned(scale_w)) return "the scales must be 4-byte aligned float32";
  return {};
}

}  // namespace wavetune::detail

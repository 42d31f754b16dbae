// What the grouped family's templates (sm90_grouped_gemm.cuh, sm80_grouped_gemm.cuh) share to launch on a
// problem's experts: the argument kernel that writes each expert's problem size, operand pointers and strides
// from the offsets on the GPU, into the workspace's per-expert arrays. Nothing is copied to the host, so a
// launch never waits for the GPU and can be captured in a CUDA graph. Portable: it compiles for sm80 too.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cutlass/numeric_types.h"
#include "programmatic_launch.cuh"
#include "wavetune/grouped.h"

namespace wavetune::detail {

template <DType kDType>
using Sixteen = std::conditional_t<kDType == DType::bf16, cutlass::bfloat16_t, cutlass::half_t>;

// One expert's part of a problem: its first row and row count, and where its rows of x and out and its w start.
template <class Input, class Out>
struct Expert {
  int32_t start, rows;
  const Input* x;
  const Input* w;
  Out* out;
};

// Expert e's part, from the offsets. Clamped, so offsets out of order or past the rows give an expert no rows
// rather than a bad access.
template <class Input, class Out>
__device__ Expert<Input, Out> expert_of(const GroupedGemmProblem& p, int e) {
  const int32_t start = e == 0 ? 0 : min(max(p.offsets[e - 1], 0), p.rows);
  const int32_t rows = min(max(p.offsets[e], start), p.rows) - start;
  return {start, rows, static_cast<const Input*>(p.x) + int64_t(start) * p.k,
          static_cast<const Input*>(p.w) + int64_t(e) * p.n * p.k, static_cast<Out*>(p.out) + int64_t(start) * p.n};
}

// One thread per expert: Gemm::write_expert writes what Gemm's kernel reads of it into Gemm::ExpertArrays.
template <class Gemm>
__global__ void prepare_experts(GroupedGemmProblem p, typename Gemm::ExpertArrays arrays) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  release_dependents_and_wait();  // the offsets and operands may come from the kernel before
  if (e >= p.experts) return;
  Gemm::write_expert(p, e, expert_of<typename Gemm::Input, typename Gemm::Out>(p, e), arrays);
}

// Launches prepare_experts<Gemm> on `stream`, before Gemm's kernel.
template <class Gemm>
void launch_prepare_experts(const GroupedGemmProblem& p, typename Gemm::ExpertArrays arrays, Stream stream) {
  constexpr int kThreads = 128;
  void* args[] = {const_cast<GroupedGemmProblem*>(&p), &arrays};  // read only
  check_launch(launch_programmatic(reinterpret_cast<const void*>(prepare_experts<Gemm>),
                                   dim3(unsigned((p.experts + kThreads - 1) / kThreads)), dim3(kThreads), 0, stream,
                                   args),
               "the expert argument kernel");
}

// Where consecutive parts of a workspace start, each 128-byte aligned; `total` bytes in all.
struct WorkspaceParts {
  size_t total = 0;

  size_t take(size_t bytes) {
    const size_t offset = total;
    total = (total + bytes + 127) / 128 * 128;
    return offset;
  }
};

// The part of `workspace` that starts `offset` bytes in, as an array of T.
template <class T>
T* workspace_part(void* workspace, size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(workspace) + offset);
}

// How errors name a launch: "the grouped GEMM (rows=... experts=... N=... K=...)".
inline std::string describe(const GroupedGemmProblem& p) {
  return "the grouped GEMM (rows=" + std::to_string(p.rows) + " experts=" + std::to_string(p.experts) +
         " N=" + std::to_string(p.n) + " K=" + std::to_string(p.k) + ")";
}

}  // namespace wavetune::detail

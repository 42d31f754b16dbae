// The layer ops' kernels and launches (wavetune/layer_ops.h).
//
// NOTES: at decode these run on a few rows, where a kernel costs its launch and ramp (about 2 us on an H100)
// rather than its bytes; PyTorch's eager RMSNorm is seven such kernels, rotary embedding twelve. One kernel each,
// launched with programmatic dependent launch so that a following wavetune GEMM streams its weights meanwhile.
// wavetune: portable (also built as compute_80 PTX: CMakeLists.txt, WAVETUNE_PORTABLE_SOURCES)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <type_traits>

#include "device.h"
#include "programmatic_launch.cuh"
#include "pytorch_rounding.cuh"
#include "wavetune/errors.h"
#include "wavetune/kernels.h"
#include "wavetune/layer_ops.h"

// The device assert's handler (CUDA's, behind assert()), which <assert.h> leaves undeclared where NDEBUG is defined.
extern "C" __host__ __device__ void __assert_fail(const char* assertion, const char* file, unsigned int line,
                                                  const char* function) noexcept;

namespace wavetune {
namespace detail {
namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 8;  // elements per 16-byte load

template <typename T>
struct Chunk {
  T e[kChunk];
};

template <typename T>
__device__ __forceinline__ Chunk<T> load(const T* p) {
  Chunk<T> c;
  *reinterpret_cast<uint4*>(c.e) = *reinterpret_cast<const uint4*>(p);
  return c;
}

template <typename T>
__device__ __forceinline__ void store(T* p, const Chunk<T>& c) {
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(c.e);
}

// --- RMS normalization: kRowThreads threads per row (a power of two, 32 to kThreads) ---------------------------

template <int kRowThreads>
__device__ float row_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if constexpr (kRowThreads > 32) {
    __shared__ float warp_sums[kThreads / 32];
    const int warp = threadIdx.x / 32, first = warp - warp % (kRowThreads / 32);
    if (threadIdx.x % 32 == 0) warp_sums[warp] = v;
    __syncthreads();
    v = 0.0f;
#pragma unroll
    for (int w = 0; w < kRowThreads / 32; ++w) v += warp_sums[first + w];
  }
  return v;
}

// A row's chunk at i: x's, or with `residual` x + residual rounded to T, as PyTorch's eager addition stores it.
template <typename T>
__device__ __forceinline__ Chunk<T> summed(const T* x, const T* residual, int i) {
  Chunk<T> c = load(x + i);
  if (residual) {
    const Chunk<T> r = load(residual + i);
#pragma unroll
    for (int j = 0; j < kChunk; ++j) c.e[j] = static_cast<T>(static_cast<float>(c.e[j]) + static_cast<float>(r.e[j]));
  }
  return c;
}

// Rows of x (plus residual's, written to sum, when residual is set) normalized into out.
struct NormRows {
  const void* x;
  int64_t ldx;
  const void* residual;  // null: no addition
  int64_t ldr;
  void* sum;
  int64_t lds;
  const void* weight;
  void* out;
  int64_t ldo;
  int rows, width;
  float eps;
};

// NOTES: with a residual, the first pass writes each chunk's sum and the second reads it back (the same thread's
// elements), so sum may alias residual or x (an in-place residual update).
template <typename T, int kRowThreads>
__global__ void __launch_bounds__(kThreads) rms_norm_kernel(NormRows p) {
  release_dependents_and_wait();
  const int row = blockIdx.x * (kThreads / kRowThreads) + threadIdx.x / kRowThreads;
  const int lane = threadIdx.x % kRowThreads;
  const bool valid = row < p.rows;  // rows past the end still take part in the CTA's reduction
  const int64_t r = valid ? row : 0;
  const T* in = static_cast<const T*>(p.x) + r * p.ldx;
  const T* residual = p.residual ? static_cast<const T*>(p.residual) + r * p.ldr : nullptr;
  T* sum = p.residual ? static_cast<T*>(p.sum) + r * p.lds : nullptr;
  float squares = 0.0f;
  if (valid) {
    for (int i = kChunk * lane; i < p.width; i += kChunk * kRowThreads) {
      const Chunk<T> c = summed(in, residual, i);
      if (sum) store(sum + i, c);
#pragma unroll
      for (int j = 0; j < kChunk; ++j) squares += static_cast<float>(c.e[j]) * static_cast<float>(c.e[j]);
    }
  }
  const float inverse = rsqrtf(row_sum<kRowThreads>(squares) / float(p.width) + p.eps);
  if (!valid) return;
  const T* normed = sum ? sum : in;
  const T* weight = static_cast<const T*>(p.weight);
  for (int i = kChunk * lane; i < p.width; i += kChunk * kRowThreads) {
    const Chunk<T> c = load(normed + i), w = load(weight + i);
    Chunk<T> o;
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      o.e[j] = static_cast<T>(static_cast<float>(w.e[j]) * rounded<T>(static_cast<float>(c.e[j]) * inverse));
    }
    store(static_cast<T*>(p.out) + int64_t(row) * p.ldo + i, o);
  }
}

template <typename T>
cudaError_t launch_rms_norm(const NormRows& rows, cudaStream_t stream) {
  // The fewest threads per row that cover it in one step, from a warp to the whole CTA.
  const int chunks = rows.width / kChunk;
  const int row_threads = chunks <= 32 ? 32 : chunks <= 64 ? 64 : chunks <= 128 ? 128 : kThreads;
  const void* kernel = row_threads == 32    ? reinterpret_cast<const void*>(rms_norm_kernel<T, 32>)
                       : row_threads == 64  ? reinterpret_cast<const void*>(rms_norm_kernel<T, 64>)
                       : row_threads == 128 ? reinterpret_cast<const void*>(rms_norm_kernel<T, 128>)
                                            : reinterpret_cast<const void*>(rms_norm_kernel<T, kThreads>);
  const int rows_per_cta = kThreads / row_threads;
  NormRows p = rows;
  void* args[] = {&p};
  return launch_programmatic(kernel, dim3(unsigned((rows.rows + rows_per_cta - 1) / rows_per_cta)), dim3(kThreads), 0,
                             stream, args);
}

// Grid-stride CTAs for `chunks` 8-element chunks: enough to fill the GPU a few times, at least one.
int grid_for(int64_t chunks) {
  return int(std::clamp<int64_t>((chunks + kThreads - 1) / kThreads, 1, 8 * current_device_info().sm_count));
}

// --- SiLU and multiply: a grid-stride loop over 8-element chunks of the output -------------------------------

template <typename T>
__global__ void __launch_bounds__(kThreads) silu_and_mul_kernel(const T* x, int64_t ldx, T* out, int64_t ldo,
                                                                int rows, int width) {
  release_dependents_and_wait();
  const int64_t row_chunks = width / kChunk, total = int64_t(rows) * row_chunks;
  for (int64_t c = blockIdx.x * int64_t(kThreads) + threadIdx.x; c < total; c += int64_t(gridDim.x) * kThreads) {
    const int64_t row = c / row_chunks, col = (c % row_chunks) * kChunk;
    const Chunk<T> gate = load(x + row * ldx + col), up = load(x + row * ldx + width + col);
    Chunk<T> o;
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      o.e[j] = silu_mul_rounded<T>(static_cast<float>(gate.e[j]), static_cast<float>(up.e[j]));
    }
    store(out + row * ldo + col, o);
  }
}

template <typename T>
cudaError_t launch_silu_and_mul(const void* x, int64_t ldx, void* out, int64_t ldo, int rows, int width,
                                cudaStream_t stream) {
  void* args[] = {&x, &ldx, &out, &ldo, &rows, &width};
  return launch_programmatic(reinterpret_cast<const void*>(silu_and_mul_kernel<T>),
                             dim3(unsigned(grid_for(int64_t(rows) * (width / kChunk)))), dim3(kThreads), 0, stream,
                             args);
}

// --- Rotary embedding: one CTA per token, its threads over (head, 8 pairs of the two halves), optionally into a
// static cache ---------------------------------------------------------------------------------------------------

// out = x * cos + rotate_half(x) * sin on 8 pairs (x1[j], x2[j]) of a head's halves, rounded as PyTorch does.
template <typename T>
__device__ __forceinline__ void rotate(const T* x, T* out, const T* cos, const T* sin, int half, int pair) {
  const Chunk<T> x1 = load(x + pair), x2 = load(x + half + pair);
  const Chunk<T> c1 = load(cos + pair), c2 = load(cos + half + pair);
  const Chunk<T> s1 = load(sin + pair), s2 = load(sin + half + pair);
  Chunk<T> o1, o2;
#pragma unroll
  for (int j = 0; j < kChunk; ++j) {
    const float a = static_cast<float>(x1.e[j]), b = static_cast<float>(x2.e[j]);
    o1.e[j] = static_cast<T>(rounded<T>(a * static_cast<float>(c1.e[j])) + rounded<T>(-b * static_cast<float>(s1.e[j])));
    o2.e[j] = static_cast<T>(rounded<T>(b * static_cast<float>(c2.e[j])) + rounded<T>(a * static_cast<float>(s2.e[j])));
  }
  store(out + pair, o1);
  store(out + half + pair, o2);
}

// One chunk pair (8 pairs of the two halves) of a value head copied into the cache.
template <typename T>
__device__ __forceinline__ void copy_pair(const T* x, T* out, int half, int pair) {
  store(out + pair, load(x + pair));
  store(out + half + pair, load(x + half + pair));
}

// The cache's first free position for this CTA's tokens. Past the capacity the kernel fails a device assert, as
// PyTorch's index_copy_ does (in release builds too: __assert_fail is what assert() calls).
__device__ __forceinline__ int64_t cache_start(const StaticCacheWrite& c, int seq) {
  const int64_t start = *c.length;
  if (start < 0 || start + seq > c.capacity) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
      printf("wavetune rotary_cache_write: %d new tokens after %lld cached overflow the cache's %d positions\n", seq,
             static_cast<long long>(start), c.capacity);
    }
    __assert_fail("new tokens within the cache's capacity", __FILE__, __LINE__, __func__);
  }
  return start;
}

// NOTES: every CTA reads *length before it counts itself done, so the last CTA to arrive advances it and re-arms
// the counter: one launch does what StaticLayer.update's arange, add_ and two index_copy_ do in four, in CUDA
// graphs as well (the counter is the cache's, not the launch's).
__device__ __forceinline__ void advance_length(const StaticCacheWrite& c, int64_t start, int seq) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(c.arrivals, 1u) == gridDim.x - 1) {
      *c.length = start + seq;
      *c.arrivals = 0;
    }
  }
}

// With a cache (c.key_cache set) the rotated keys go to the cache at the token's position and the values are
// copied beside them; k_out is unused.
template <typename T>
__global__ void __launch_bounds__(kThreads) rotary_kernel(RotaryProblem p, StaticCacheWrite c) {
  release_dependents_and_wait();
  const int b = blockIdx.x / p.seq, s = blockIdx.x % p.seq;
  const int half = p.head_dim / 2, head_chunks = half / kChunk;
  const bool caching = c.key_cache != nullptr;
  const int64_t start = caching ? cache_start(c, p.seq) : 0;
  const int64_t cached = b * c.cache_batch_stride + (start + s) * c.cache_seq_stride;
  const T* cos = static_cast<const T*>(p.cos) + b * p.cos_batch_stride + s * p.cos_seq_stride;
  const T* sin = static_cast<const T*>(p.sin) + b * p.cos_batch_stride + s * p.cos_seq_stride;
  const int rotated = (p.heads_q + p.heads_k) * head_chunks;
  for (int i = threadIdx.x; i < rotated + (caching ? p.heads_k * head_chunks : 0); i += kThreads) {
    const int pair = (i % head_chunks) * kChunk;
    if (i >= rotated) {  // a value chunk pair into the cache
      const int head = i / head_chunks - p.heads_q - p.heads_k;
      copy_pair(static_cast<const T*>(c.values.data) + b * c.values.batch_stride + head * c.values.head_stride +
                    s * c.values.seq_stride,
                static_cast<T*>(c.value_cache) + cached + head * c.cache_head_stride, half, pair);
      continue;
    }
    const bool is_q = i < p.heads_q * head_chunks;
    const int head = is_q ? i / head_chunks : i / head_chunks - p.heads_q;
    const HeadsView& in = is_q ? p.q : p.k;
    const HeadsOut& to = is_q ? p.q_out : p.k_out;
    T* out = caching && !is_q ? static_cast<T*>(c.key_cache) + cached + head * c.cache_head_stride
                              : static_cast<T*>(to.data) + b * to.batch_stride + head * to.head_stride + s * to.seq_stride;
    rotate(static_cast<const T*>(in.data) + b * in.batch_stride + head * in.head_stride + s * in.seq_stride, out, cos,
           sin, half, pair);
  }
  if (caching) advance_length(c, start, p.seq);
}

template <typename T>
cudaError_t launch_rotary(const RotaryProblem& p, const StaticCacheWrite& c, cudaStream_t stream) {
  RotaryProblem problem = p;
  StaticCacheWrite cache = c;
  void* args[] = {&problem, &cache};
  return launch_programmatic(reinterpret_cast<const void*>(rotary_kernel<T>), dim3(unsigned(p.batch * p.seq)),
                             dim3(kThreads), 0, stream, args);
}

// --- Mixture-of-experts routing ---------------------------------------------------------------------------------

// NOTES: one CTA sorts the pairs: at decode there are a few dozen, and a grid would spend more in its launch and
// its cross-CTA counts than in the work; PyTorch's sort, histogram, cumulative sum and index arithmetic are six
// kernels.
constexpr int kAlignThreads = 1024;

__global__ void __launch_bounds__(kAlignThreads) moe_align_kernel(MoeRouting r, int32_t* offsets, int32_t* positions) {
  __shared__ int32_t count[kMoeMaxExperts + 1];  // per expert, then the dropped pairs
  __shared__ int32_t start[kMoeMaxExperts + 1];
  release_dependents_and_wait();
  const int pairs = r.tokens * r.top_k;
  for (int e = threadIdx.x; e <= r.experts; e += kAlignThreads) count[e] = 0;
  __syncthreads();
  auto expert_of = [&](int p) {
    const int64_t id = r.expert_ids[p];
    return id >= 0 && id < r.experts ? int(id) : r.experts;  // dropped pairs go last
  };
  for (int p = threadIdx.x; p < pairs; p += kAlignThreads) atomicAdd(&count[expert_of(p)], 1);
  __syncthreads();
  if (threadIdx.x == 0) {  // experts are at most kMoeMaxExperts: a serial scan costs less than the syncs of a tree
    int32_t sum = 0;
    for (int e = 0; e <= r.experts; ++e) start[e] = sum, sum += count[e];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < r.experts; e += kAlignThreads) offsets[e] = start[e] + count[e];
  __syncthreads();  // every offset is read before the starts move on as places are handed out
  for (int p = threadIdx.x; p < pairs; p += kAlignThreads) positions[p] = atomicAdd(&start[expert_of(p)], 1);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) moe_gather_kernel(const T* x, int64_t ldx, const int32_t* positions,
                                                              int pairs, int top_k, T* rows, int64_t ldr, int width) {
  release_dependents_and_wait();
  const int64_t row_chunks = width / kChunk, total = int64_t(pairs) * row_chunks;
  for (int64_t c = blockIdx.x * int64_t(kThreads) + threadIdx.x; c < total; c += int64_t(gridDim.x) * kThreads) {
    const int64_t pair = c / row_chunks, col = (c % row_chunks) * kChunk;
    store(rows + positions[pair] * ldr + col, load(x + pair / top_k * ldx + col));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) moe_combine_kernel(const T* rows, int64_t ldr, const int32_t* positions,
                                                               MoeRouting r, const float* weights, T* out,
                                                               int64_t ldo, int width) {
  release_dependents_and_wait();
  const int64_t row_chunks = width / kChunk, total = int64_t(r.tokens) * row_chunks;
  for (int64_t c = blockIdx.x * int64_t(kThreads) + threadIdx.x; c < total; c += int64_t(gridDim.x) * kThreads) {
    const int64_t token = c / row_chunks, col = (c % row_chunks) * kChunk;
    float sum[kChunk] = {};
    for (int j = 0; j < r.top_k; ++j) {
      const int64_t pair = token * r.top_k + j, id = r.expert_ids[pair];
      if (id < 0 || id >= r.experts) continue;  // a dropped pair: its row was never computed
      const float w = weights[pair];
      const Chunk<T> v = load(rows + positions[pair] * ldr + col);
#pragma unroll
      for (int i = 0; i < kChunk; ++i) sum[i] += w * static_cast<float>(v.e[i]);
    }
    Chunk<T> o;
#pragma unroll
    for (int i = 0; i < kChunk; ++i) o.e[i] = static_cast<T>(sum[i]);
    store(out + token * ldo + col, o);
  }
}

template <typename T>
cudaError_t launch_moe_gather(const void* x, int64_t ldx, const int32_t* positions, int pairs, int top_k, void* rows,
                              int64_t ldr, int width, cudaStream_t stream) {
  void* args[] = {&x, &ldx, &positions, &pairs, &top_k, &rows, &ldr, &width};
  return launch_programmatic(reinterpret_cast<const void*>(moe_gather_kernel<T>),
                             dim3(unsigned(grid_for(int64_t(pairs) * (width / kChunk)))), dim3(kThreads), 0, stream,
                             args);
}

template <typename T>
cudaError_t launch_moe_combine(const void* rows, int64_t ldr, const int32_t* positions, MoeRouting r,
                               const float* weights, void* out, int64_t ldo, int width, cudaStream_t stream) {
  void* args[] = {&rows, &ldr, &positions, &r, &weights, &out, &ldo, &width};
  return launch_programmatic(reinterpret_cast<const void*>(moe_combine_kernel<T>),
                             dim3(unsigned(grid_for(int64_t(r.tokens) * (width / kChunk)))), dim3(kThreads), 0,
                             stream, args);
}

void check_device() {
  if (const char* device_error = current_device_error()) WAVETUNE_INVALID(device_error);
}

void run_norm(const NormRows& rows, DType dtype, Stream stream, const char* name) {
  if (!rows.weight || reinterpret_cast<uintptr_t>(rows.weight) % 16 != 0) {
    WAVETUNE_INVALID(name, ": weight must be 16-byte aligned");
  }
  if (rows.rows == 0) return;
  check_device();
  check_launch(dtype == DType::bf16 ? launch_rms_norm<__nv_bfloat16>(rows, stream) : launch_rms_norm<__half>(rows, stream),
               name);
}

void run_rotary(const RotaryProblem& p, const StaticCacheWrite& cache, Stream stream, const char* name) {
  if (p.batch == 0 || p.seq == 0) return;
  check_device();
  check_launch(p.dtype == DType::bf16 ? launch_rotary<__nv_bfloat16>(p, cache, stream)
                                      : launch_rotary<__half>(p, cache, stream),
               name);
}

}  // namespace
}  // namespace detail

void rms_norm(const void* x, int64_t x_row_stride, const void* weight, void* out, int64_t out_row_stride,
              int32_t rows, int32_t width, float eps, DType dtype, Stream stream) {
  if (std::string error = rows_error(x, x_row_stride, out, out_row_stride, rows, width); !error.empty()) {
    WAVETUNE_INVALID("rms_norm: ", error);
  }
  detail::run_norm({x, x_row_stride, nullptr, 0, nullptr, 0, weight, out, out_row_stride, rows, width, eps}, dtype,
                   stream, "rms_norm");
}

void add_rms_norm(const void* x, int64_t x_row_stride, const void* residual, int64_t residual_row_stride, void* sum,
                  int64_t sum_row_stride, const void* weight, void* out, int64_t out_row_stride, int32_t rows,
                  int32_t width, float eps, DType dtype, Stream stream) {
  for (const auto& [what, rows_out, stride] :
       {std::tuple{"residual", static_cast<const void*>(residual), residual_row_stride},
        std::tuple{"sum", static_cast<const void*>(sum), sum_row_stride},
        std::tuple{"out", static_cast<const void*>(out), out_row_stride}}) {
    if (std::string error = rows_error(x, x_row_stride, rows_out, stride, rows, width); !error.empty()) {
      WAVETUNE_INVALID("add_rms_norm: ", what, ": ", error);
    }
  }
  detail::run_norm({x, x_row_stride, residual, residual_row_stride, sum, sum_row_stride, weight, out, out_row_stride,
                    rows, width, eps},
                   dtype, stream, "add_rms_norm");
}

void silu_and_mul(const void* x, int64_t x_row_stride, void* out, int64_t out_row_stride, int32_t rows, int32_t width,
                  DType dtype, Stream stream) {
  if (std::string error = rows_error(x, x_row_stride, out, out_row_stride, rows, width); !error.empty()) {
    WAVETUNE_INVALID("silu_and_mul: ", error);
  }
  if (x_row_stride < 2 * int64_t(width)) {
    WAVETUNE_INVALID("silu_and_mul: a row of x holds the gate and the up halves: its stride must be at least 2 x ",
                     width, ", got ", x_row_stride);
  }
  if (rows == 0) return;
  detail::check_device();
  detail::check_launch(dtype == DType::bf16 ? detail::launch_silu_and_mul<__nv_bfloat16>(x, x_row_stride, out,
                                                                                         out_row_stride, rows, width,
                                                                                         stream)
                                            : detail::launch_silu_and_mul<__half>(x, x_row_stride, out, out_row_stride,
                                                                                  rows, width, stream),
                       "silu_and_mul");
}

void rotary_embedding(const RotaryProblem& p, Stream stream) {
  if (std::string error = rotary_problem_error(p); !error.empty()) WAVETUNE_INVALID("rotary_embedding: ", error);
  detail::run_rotary(p, StaticCacheWrite{}, stream, "rotary_embedding");
}

void rotary_cache_write(const RotaryProblem& p, const StaticCacheWrite& cache, Stream stream) {
  if (std::string error = cache_write_error(p, cache); !error.empty()) WAVETUNE_INVALID("rotary_cache_write: ", error);
  detail::run_rotary(p, cache, stream, "rotary_cache_write");
}

void moe_align(const MoeRouting& r, int32_t* offsets, int32_t* positions, Stream stream) {
  if (std::string error = moe_routing_error(r); !error.empty()) WAVETUNE_INVALID("moe_align: ", error);
  if (!offsets || (!positions && r.tokens > 0)) WAVETUNE_INVALID("moe_align: null offsets or positions");
  detail::check_device();
  void* args[] = {const_cast<MoeRouting*>(&r), &offsets, &positions};
  detail::check_launch(detail::launch_programmatic(reinterpret_cast<const void*>(detail::moe_align_kernel), dim3(1),
                                                   dim3(detail::kAlignThreads), 0, stream, args),
                       "moe_align");
}

void moe_gather(const void* x, int64_t x_row_stride, const int32_t* positions, int32_t pairs, int32_t top_k, void* rows,
                int64_t rows_row_stride, int32_t width, DType dtype, Stream stream) {
  if (std::string error = rows_error(x, x_row_stride, rows, rows_row_stride, pairs, width); !error.empty()) {
    WAVETUNE_INVALID("moe_gather: ", error);
  }
  if (top_k < 1 || (!positions && pairs > 0)) WAVETUNE_INVALID("moe_gather: top_k must be positive, positions set");
  if (pairs == 0) return;
  detail::check_device();
  detail::check_launch(dtype == DType::bf16
                           ? detail::launch_moe_gather<__nv_bfloat16>(x, x_row_stride, positions, pairs, top_k, rows,
                                                                      rows_row_stride, width, stream)
                           : detail::launch_moe_gather<__half>(x, x_row_stride, positions, pairs, top_k, rows,
                                                               rows_row_stride, width, stream),
                       "moe_gather");
}

void moe_combine(const void* rows, int64_t rows_row_stride, const int32_t* positions, const MoeRouting& r,
                 const float* weights, void* out, int64_t out_row_stride, int32_t width, DType dtype, Stream stream) {
  if (std::string error = moe_routing_error(r); !error.empty()) WAVETUNE_INVALID("moe_combine: ", error);
  if (std::string error = rows_error(rows, rows_row_stride, out, out_row_stride, r.tokens, width); !error.empty()) {
    WAVETUNE_INVALID("moe_combine: ", error);
  }
  if (r.tokens == 0) return;
  if (!positions || !weights) WAVETUNE_INVALID("moe_combine: null positions or weights");
  detail::check_device();
  detail::check_launch(dtype == DType::bf16
                           ? detail::launch_moe_combine<__nv_bfloat16>(rows, rows_row_stride, positions, r, weights,
                                                                       out, out_row_stride, width, stream)
                           : detail::launch_moe_combine<__half>(rows, rows_row_stride, positions, r, weights, out,
                                                                out_row_stride, width, stream),
                       "moe_combine");
}

}  // namespace wavetune

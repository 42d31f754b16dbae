// The CUDA side of the attention family: the built-in choice, how a problem maps onto CUTLASS's FMHA
// launches (attention_heuristic.h's fmha_grid, in strides), and the kernels around them: the queries
// repeated per split, and the combine that merges the splits' partial outputs by their log-sum-exp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "attention_ops.h"
#include "wavetune/attention.h"
#include "wavetune/attention_heuristic.h"
#include "wavetune/errors.h"

namespace wavetune {
namespace detail {
namespace {

__device__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ float to_float(__half x) { return __half2float(x); }
template <class T>
__device__ T from_float(float x);
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <>
__device__ __half from_float<__half>(float x) { return __float2half(x); }

// queries[b, s, h, :] = q[b, 0, h, :] for every split s: 16-byte chunks, one per thread.
__global__ void repeat_queries(AttentionTensor q, int32_t batch, int32_t splits, int32_t heads, int32_t head_dim,
                               uint4* queries) {
  const int64_t chunks_per_row = head_dim / 8;
  const int64_t total = int64_t(batch) * splits * heads * chunks_per_row;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % chunks_per_row, h = i / chunks_per_row % heads, b = i / (chunks_per_row * heads * splits);
    const auto* row = static_cast<const uint16_t*>(q.data) + b * q.batch_stride + h * q.head_stride;
    queries[i] = reinterpret_cast<const uint4*>(row)[c];
  }
}

struct CombineArgs {
  AttentionProblem p;
  int32_t splits, chunk;  // keys per split; keys from splits * chunk on are the tail, scored here
  const void* partial;    // [batch, splits, heads_q, head_dim]
  const float* lse;       // [batch, splits, heads_q]
};

// One block per (batch, query head), one thread per element of the head: the splits' partial outputs
// weighted by exp(lse - max), plus the tail keys' softmax terms, over the total weight.
template <class T>
__global__ void combine_splits(CombineArgs a) {
  __shared__ float score[kMaxAttentionSplits];
  __shared__ float warp_sums[8];
  const AttentionProblem& p = a.p;
  const int32_t b = blockIdx.x / p.heads_q, h = blockIdx.x % p.heads_q, kv_head = h / (p.heads_q / p.heads_kv);
  const int32_t d = threadIdx.x, lane = d % 32, warp = d / 32, warps = blockDim.x / 32;
  const T* q = static_cast<const T*>(p.q.data) + b * p.q.batch_stride + h * p.q.head_stride;
  const T* k = static_cast<const T*>(p.k.data) + b * p.k.batch_stride + kv_head * p.k.head_stride;
  const T* v = static_cast<const T*>(p.v.data) + b * p.v.batch_stride + kv_head * p.v.head_stride;
  const int32_t first_tail = a.splits * a.chunk, tail = p.seqlen_k - first_tail;
  const float qd = to_float(q[d]);
  for (int32_t t = 0; t < tail; ++t) {
    float x = qd * to_float(k[int64_t(first_tail + t) * p.k.seq_stride + d]);
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    if (lane == 0) warp_sums[warp] = x;
    __syncthreads();
    if (d == 0) {
      float sum = 0.0f;
      for (int w = 0; w < warps; ++w) sum += warp_sums[w];
      score[t] = sum * p.scale;
    }
    __syncthreads();
  }
  const float* lse = a.lse + (int64_t(b) * a.splits) * p.heads_q + h;
  float top = -INFINITY;
  for (int32_t s = 0; s < a.splits; ++s) top = fmaxf(top, lse[int64_t(s) * p.heads_q]);
  for (int32_t t = 0; t < tail; ++t) top = fmaxf(top, score[t]);
  float total = 0.0f, acc = 0.0f;
  const T* partial = static_cast<const T*>(a.partial) + ((int64_t(b) * a.splits) * p.heads_q + h) * p.head_dim + d;
  for (int32_t s = 0; s < a.splits; ++s) {
    const float w = __expf(lse[int64_t(s) * p.heads_q] - top);
    total += w;
    acc += w * to_float(partial[int64_t(s) * p.heads_q * p.head_dim]);
  }
  for (int32_t t = 0; t < tail; ++t) {
    const float w = __expf(score[t] - top);
    total += w;
    acc += w * to_float(v[int64_t(first_tail + t) * p.v.seq_stride + d]);
  }
  T* out = static_cast<T*>(const_cast<void*>(p.out.data)) + b * p.out.batch_stride + h * p.out.head_stride;
  out[d] = from_float<T>(acc / total);
}

FmhaCall common_call(const AttentionProblem& p, float* lse) {
  FmhaCall c{};
  c.head_dim = p.head_dim;
  c.q = p.q.data, c.k = p.k.data, c.v = p.v.data, c.o = const_cast<void*>(p.out.data);
  c.lse = lse;
  c.scale = p.scale;
  c.causal = p.causal && p.seqlen_q > 1;
  return c;
}

// Decode: the group's query heads are the rows (stride: the query head stride), keys strided by the
// split count (split s takes keys s, s + splits, ...: a softmax does not care about key order, and every
// split then starts inside the tensor), KV splits in a batch mode.
FmhaCall decode_call(const AttentionProblem& p, int32_t splits, const AttentionWorkspace& layout, char* ws) {
  const int64_t group = p.heads_q / p.heads_kv, hd = p.head_dim;
  FmhaCall c = common_call(p, reinterpret_cast<float*>(ws + layout.lse));
  c.rows = int32_t(group), c.keys = p.seqlen_k / splits;
  c.k_row = p.k.seq_stride * splits, c.k_h = p.k.head_stride, c.k_b = p.k.batch_stride;
  c.v_row = p.v.seq_stride * splits, c.v_h = p.v.head_stride, c.v_b = p.v.batch_stride;
  c.q_row = p.q.head_stride, c.q_h = group * p.q.head_stride, c.q_b = p.q.batch_stride;
  c.lse_h = group, c.lse_b = int64_t(splits) * p.heads_q;
  c.b = p.batch, c.h = p.heads_kv;
  if (splits == 1) {
    c.o_row = p.out.head_stride, c.o_h = group * p.out.head_stride, c.o_b = p.out.batch_stride;
    return c;
  }
  // Partial outputs [batch, splits, heads_q, head_dim]: index (kv head + heads_kv * split) has stride group * hd.
  c.o = ws + layout.partial;
  c.o_row = hd, c.o_h = group * hd, c.o_b = int64_t(splits) * p.heads_q * hd;
  if (p.batch == 1) {  // the splits are the batch mode; every split reads the same queries
    c.b = splits, c.q_b = 0, c.k_b = p.k.seq_stride, c.v_b = p.v.seq_stride, c.o_b = p.heads_q * hd, c.lse_b = p.heads_q;
  } else {  // the splits join the head mode; the queries are repeated once per split to match
    c.h = p.heads_kv * splits;
    c.q = ws + layout.queries, c.q_row = hd, c.q_h = group * hd, c.q_b = int64_t(splits) * p.heads_q * hd;
  }
  return c;
}

// Prefill: one sequence's queries are the rows; query heads sharing a KV head are a batch mode of stride
// 0 in K and V, one launch per sequence (CUTLASS's kernel has two batch modes).
std::vector<FmhaCall> prefill_calls(const AttentionProblem& p, float* lse) {
  const int64_t group = p.heads_q / p.heads_kv;
  FmhaCall c = common_call(p, lse);
  c.rows = p.seqlen_q, c.keys = p.seqlen_k;
  c.q_row = p.q.seq_stride, c.k_row = p.k.seq_stride, c.v_row = p.v.seq_stride, c.o_row = p.out.seq_stride;
  if (group == 1) {
    c.b = p.batch, c.h = p.heads_q, c.lse_h = p.seqlen_q, c.lse_b = int64_t(p.heads_q) * p.seqlen_q;
    c.q_b = p.q.batch_stride, c.k_b = p.k.batch_stride, c.v_b = p.v.batch_stride, c.o_b = p.out.batch_stride;
    c.q_h = p.q.head_stride, c.k_h = p.k.head_stride, c.v_h = p.v.head_stride, c.o_h = p.out.head_stride;
    return {c};
  }
  c.b = int32_t(group), c.h = p.heads_kv, c.lse_b = p.seqlen_q, c.lse_h = group * p.seqlen_q;
  c.q_b = p.q.head_stride, c.k_b = 0, c.v_b = 0, c.o_b = p.out.head_stride;
  c.q_h = group * p.q.head_stride, c.k_h = p.k.head_stride, c.v_h = p.v.head_stride, c.o_h = group * p.out.head_stride;
  std::vector<FmhaCall> calls(p.batch, c);
  for (int32_t b = 0; b < p.batch; ++b) {
    auto at = [b](const void* base, int64_t stride) { return static_cast<const char*>(base) + 2 * b * stride; };
    calls[b].q = at(p.q.data, p.q.batch_stride), calls[b].k = at(p.k.data, p.k.batch_stride);
    calls[b].v = at(p.v.data, p.v.batch_stride), calls[b].o = const_cast<char*>(at(p.out.data, p.out.batch_stride));
  }
  return calls;
}

void check_launch(const char* what) {
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) WAVETUNE_FAIL("the attention ", what, " kernel did not launch: ", cudaGetErrorString(error));
}

template <class T>
void launch_combine(const AttentionProblem& p, int32_t splits, const AttentionWorkspace& layout, char* ws,
                    Stream stream) {
  const CombineArgs args{p, splits, p.seqlen_k / splits, ws + layout.partial, reinterpret_cast<float*>(ws + layout.lse)};
  combine_splits<T><<<p.batch * p.heads_q, p.head_dim, 0, stream>>>(args);
  check_launch("combine");
}

}  // namespace
}  // namespace detail

AttentionLaunch attention_default_launch(const AttentionProblem& p) {
  std::vector<AttentionTile> tiles;
  std::vector<int32_t> ids;
  for (const VariantInfo& v : attention_variants()) {
    if (v.dtype != p.dtype || v.tile_k != p.head_dim) continue;
    tiles.push_back({v.tile_m, v.tile_n});
    ids.push_back(v.id);
  }
  if (ids.empty()) {
    WAVETUNE_INVALID("no compiled attention variant takes ", to_string(p.dtype), " with head_dim ", p.head_dim,
                     " (build with the default kernel set, or with -Ccmake.define.WAVETUNE_KERNEL_SET=full)");
  }
  const AttentionShape shape{p.batch, p.seqlen_q, p.seqlen_k, p.heads_q, p.heads_kv, p.causal};
  const int32_t limit = detail::attention_splittable(p) ? kMaxAttentionSplits : 1;
  const AttentionChoice choice = choose_attention(tiles, shape, detail::current_device_info().sm_count, limit);
  return {ids[choice.index], choice.splits};
}

void attention(const AttentionProblem& p, const AttentionLaunch& how, void* workspace, size_t workspace_bytes,
               Stream stream) {
  std::string error = attention_problem_error(p);
  if (error.empty()) error = attention_launch_error(p, how);
  if (!error.empty()) WAVETUNE_INVALID(error);
  const detail::AttentionWorkspace layout(p, how.splits);
  if (!workspace || workspace_bytes < layout.total) {
    WAVETUNE_INVALID("the attention call needs ", layout.total, " bytes of workspace, got ", workspace_bytes,
                     " (attention_workspace_bytes gives it)");
  }
  const detail::DeviceInfo& dev = detail::current_device_info();
  const detail::AttentionVariantOps* ops = detail::attention_variant_ops(how.variant);
  char* ws = static_cast<char*>(workspace);
  if (p.seqlen_q > 1) {
    for (const detail::FmhaCall& c : detail::prefill_calls(p, reinterpret_cast<float*>(ws + layout.lse))) {
      ops->run(c, dev, stream);
    }
    return;
  }
  if (how.splits > 1 && p.batch > 1) {
    detail::repeat_queries<<<dev.sm_count * 4, 256, 0, stream>>>(p.q, p.batch, how.splits, p.heads_q, p.head_dim,
                                                                reinterpret_cast<uint4*>(ws + layout.queries));
    detail::check_launch("query repeat");
  }
  ops->run(detail::decode_call(p, how.splits, layout, ws), dev, stream);
  if (how.splits == 1) return;
  if (p.dtype == DType::bf16) {
    detail::launch_combine<__nv_bfloat16>(p, how.splits, layout, ws, stream);
  } else {
    detail::launch_combine<__half>(p, how.splits, layout, ws, stream);
  }
}

}  // namespace wavetune

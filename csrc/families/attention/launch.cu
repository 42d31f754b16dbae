// The CUDA side of the attention family: the built-in choice, how a problem maps onto CUTLASS's FMHA
// launches (attention_heuristic.h's fmha_grid, in strides), and the kernels around them: the queries
// repeated per split, and the combine that merges the splits' partial outputs by their log-sum-exp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "attention_ops.h"
#include "programmatic_launch.cuh"
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

// A contiguous [batch, copies, rows, heads, head_dim] tensor from src [batch, rows, heads / group, head_dim]:
// dst[b, c, r, h] = src[b, r, h / group] in 16-byte chunks, one per thread. It repeats the queries once per
// split (rows 1, copies = splits) and copies K or V out to the query heads (copies 1, group > 1).
struct HeadBroadcast {
  AttentionTensor src;
  int64_t batch, copies, rows, heads, group, head_dim;
};

__global__ void broadcast_heads(HeadBroadcast a, uint4* dst) {
  release_dependents_and_wait();
  const int64_t chunks = a.head_dim / 8;
  const int64_t total = a.batch * a.copies * a.rows * a.heads * chunks;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % chunks, h = i / chunks % a.heads, r = i / (chunks * a.heads) % a.rows;
    const int64_t b = i / (chunks * a.heads * a.rows * a.copies);
    const auto* row = static_cast<const uint16_t*>(a.src.data) + b * a.src.batch_stride + r * a.src.seq_stride +
                      h / a.group * a.src.head_stride;
    dst[i] = reinterpret_cast<const uint4*>(row)[c];
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
// NOTES: the split log-sum-exps and the tail scores go to shared memory first, in parallel (each warp
// scores its own tail keys), so no step runs once per split or per key with a barrier between.
template <class T>
__global__ void combine_splits(CombineArgs a) {
  __shared__ float weight[2 * kMaxAttentionSplits];  // the splits' lse, then the tail keys' scores
  release_dependents_and_wait();
  const AttentionProblem& p = a.p;
  const int32_t b = blockIdx.x / p.heads_q, h = blockIdx.x % p.heads_q, kv_head = h / (p.heads_q / p.heads_kv);
  const int32_t d = threadIdx.x, lane = d % 32, warp = d / 32, warps = blockDim.x / 32;
  const T* q = static_cast<const T*>(p.q.data) + b * p.q.batch_stride + h * p.q.head_stride;
  const T* k = static_cast<const T*>(p.k.data) + b * p.k.batch_stride + kv_head * p.k.head_stride;
  const T* v = static_cast<const T*>(p.v.data) + b * p.v.batch_stride + kv_head * p.v.head_stride;
  const int32_t first_tail = a.splits * a.chunk, tail = p.seqlen_k - first_tail, terms = a.splits + tail;
  const float* lse = a.lse + (int64_t(b) * a.splits) * p.heads_q + h;
  for (int32_t s = d; s < a.splits; s += blockDim.x) weight[s] = lse[int64_t(s) * p.heads_q];
  for (int32_t t = warp; t < tail; t += warps) {
    const T* key = k + int64_t(first_tail + t) * p.k.seq_stride;
    float x = 0.0f;
    for (int32_t e = lane; e < p.head_dim; e += 32) x += to_float(q[e]) * to_float(key[e]);
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    if (lane == 0) weight[a.splits + t] = x * p.scale;
  }
  __syncthreads();
  float top = -INFINITY;
  for (int32_t i = 0; i < terms; ++i) top = fmaxf(top, weight[i]);
  float total = 0.0f, acc = 0.0f;
  const T* partial = static_cast<const T*>(a.partial) + ((int64_t(b) * a.splits) * p.heads_q + h) * p.head_dim + d;
#pragma unroll 8
  for (int32_t s = 0; s < a.splits; ++s) {
    const float w = __expf(weight[s] - top);
    total += w;
    acc += w * to_float(partial[int64_t(s) * p.heads_q * p.head_dim]);
  }
  for (int32_t t = 0; t < tail; ++t) {
    const float w = __expf(weight[a.splits + t] - top);
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

// Decode: the group's query heads are the rows (stride: the query head stride), KV splits in a batch mode.
// With batch 1 the splits are the batch mode and split s takes keys [s * chunk, (s + 1) * chunk). With
// batch > 1 they join the head mode, whose stride is the head stride, so split s takes keys s, s + splits,
// s + 2 splits, ... (a softmax does not care about key order). Either way the keys from splits * chunk
// on are the combine kernel's.
FmhaCall decode_call(const AttentionProblem& p, int32_t splits, const AttentionWorkspace& layout, char* ws) {
  const int64_t group = p.heads_q / p.heads_kv, hd = p.head_dim;
  FmhaCall c = common_call(p, reinterpret_cast<float*>(ws + layout.lse));
  const int64_t chunk = p.seqlen_k / splits;
  const int64_t key_step = p.batch == 1 ? 1 : splits;
  c.rows = int32_t(group), c.keys = int32_t(chunk);
  c.k_row = p.k.seq_stride * key_step, c.k_h = p.k.head_stride, c.k_b = p.k.batch_stride;
  c.v_row = p.v.seq_stride * key_step, c.v_h = p.v.head_stride, c.v_b = p.v.batch_stride;
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
    c.b = splits, c.q_b = 0, c.k_b = chunk * p.k.seq_stride, c.v_b = chunk * p.v.seq_stride;
    c.o_b = p.heads_q * hd, c.lse_b = p.heads_q;
  } else {  // the splits join the head mode; the queries are repeated once per split to match
    c.h = p.heads_kv * splits;
    c.q = ws + layout.queries, c.q_row = hd, c.q_h = group * hd, c.q_b = int64_t(splits) * p.heads_q * hd;
  }
  return c;
}

// Prefill: one sequence's queries are the rows; query heads sharing a KV head are a batch mode of stride
// 0 in K and V, one launch per sequence (CUTLASS's kernel has two batch modes), unless K and V were
// expanded to the query heads (`expanded`: [batch, seqlen_k, heads_q, head_dim] each).
std::vector<FmhaCall> prefill_calls(const AttentionProblem& p, float* lse, const void* expanded_k,
                                    const void* expanded_v) {
  const int64_t group = p.heads_q / p.heads_kv;
  FmhaCall c = common_call(p, lse);
  c.rows = p.seqlen_q, c.keys = p.seqlen_k;
  c.q_row = p.q.seq_stride, c.k_row = p.k.seq_stride, c.v_row = p.v.seq_stride, c.o_row = p.out.seq_stride;
  if (group == 1 || expanded_k) {
    c.b = p.batch, c.h = p.heads_q, c.lse_h = p.seqlen_q, c.lse_b = int64_t(p.heads_q) * p.seqlen_q;
    c.q_b = p.q.batch_stride, c.k_b = p.k.batch_stride, c.v_b = p.v.batch_stride, c.o_b = p.out.batch_stride;
    c.q_h = p.q.head_stride, c.k_h = p.k.head_stride, c.v_h = p.v.head_stride, c.o_h = p.out.head_stride;
    if (expanded_k) {  // contiguous copies, one KV head per query head
      const int64_t hd = p.head_dim, seq = p.heads_q * hd;
      c.k = expanded_k, c.v = expanded_v, c.k_row = c.v_row = seq, c.k_h = c.v_h = hd;
      c.k_b = c.v_b = p.seqlen_k * seq;
    }
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

void launch_broadcast(HeadBroadcast a, void* dst, const DeviceInfo& dev, Stream stream, const char* what) {
  uint4* out = static_cast<uint4*>(dst);
  void* args[] = {&a, &out};
  check_launch(launch_programmatic(reinterpret_cast<const void*>(broadcast_heads), dim3(unsigned(dev.sm_count * 4)),
                                   dim3(256), 0, stream, args),
               what);
}

template <class T>
void launch_combine(const AttentionProblem& p, int32_t splits, const AttentionWorkspace& layout, char* ws,
                    Stream stream) {
  CombineArgs combine{p, splits, p.seqlen_k / splits, ws + layout.partial, reinterpret_cast<float*>(ws + layout.lse)};
  void* args[] = {&combine};
  check_launch(launch_programmatic(reinterpret_cast<const void*>(combine_splits<T>),
                                   dim3(unsigned(p.batch * p.heads_q)), dim3(unsigned(p.head_dim)), 0, stream, args),
               "the attention combine kernel");
}

// Prefill: K and V first copied out to the query heads where expand_kv_heads, then the FMHA launches.
void run_prefill(const AttentionProblem& p, const AttentionVariantOps& ops, const AttentionWorkspace& layout, char* ws,
                 const DeviceInfo& dev, Stream stream) {
  const bool expand = expand_kv_heads(shape_of(p));
  if (expand) {
    for (const auto& [src, at] : {std::pair{p.k, layout.keys}, {p.v, layout.values}}) {
      launch_broadcast({src, p.batch, 1, p.seqlen_k, p.heads_q, p.heads_q / p.heads_kv, p.head_dim}, ws + at, dev,
                       stream, "the attention KV head copy");
    }
  }
  const void* keys = expand ? ws + layout.keys : nullptr;
  const void* values = expand ? ws + layout.values : nullptr;
  for (const FmhaCall& c : prefill_calls(p, reinterpret_cast<float*>(ws + layout.lse), keys, values)) {
    ops.run(c, dev, stream);
  }
}

// Decode: with splits, the queries repeated per split (batch > 1), the FMHA launch, then the combine.
void run_decode(const AttentionProblem& p, int32_t splits, const AttentionVariantOps& ops,
                const AttentionWorkspace& layout, char* ws, const DeviceInfo& dev, Stream stream) {
  if (splits > 1 && p.batch > 1) {
    launch_broadcast({p.q, p.batch, splits, 1, p.heads_q, 1, p.head_dim}, ws + layout.queries, dev, stream,
                     "the attention query repeat");
  }
  ops.run(decode_call(p, splits, layout, ws), dev, stream);
  if (splits == 1) return;
  if (p.dtype == DType::bf16) {
    launch_combine<__nv_bfloat16>(p, splits, layout, ws, stream);
  } else {
    launch_combine<__half>(p, splits, layout, ws, stream);
  }
}

}  // namespace
}  // namespace detail

Launch attention_default_launch(const AttentionProblem& p) {
  std::vector<AttentionTile> tiles;
  std::vector<int32_t> ids;
  for (const VariantInfo& v : attention_variants()) {
    const bool fmha = v.schedule != Schedule::cudnn && v.schedule != Schedule::paged;
    if (!fmha || v.dtype != p.dtype || v.tile_k != p.head_dim || !runs_here(v)) continue;
    tiles.push_back({v.tile_m, v.tile_n, v.tile_k});
    ids.push_back(v.id);
  }
  if (ids.empty()) return kv_split_launch(-1, 1);
  const int32_t limit = attention_kv_splittable(p) ? kMaxAttentionSplits : 1;
  const AttentionChoice choice = choose_attention(tiles, detail::shape_of(p), detail::current_device_info().sm_count, limit);
  return kv_split_launch(ids[choice.index], choice.splits);
}

void attention(const AttentionProblem& p, const Launch& how, void* workspace, size_t workspace_bytes, Stream stream) {
  std::string error = attention_problem_error(p);
  if (error.empty()) error = attention_launch_error(p, how);
  if (!error.empty()) WAVETUNE_INVALID(error);
  const detail::AttentionWorkspace layout(p, how.micro.splits);
  if (!workspace || workspace_bytes < layout.total) {
    WAVETUNE_INVALID("the attention call needs ", layout.total, " bytes of workspace, got ", workspace_bytes,
                     " (attention_workspace_bytes gives it)");
  }
  const detail::DeviceInfo& dev = detail::current_device_info();
  const detail::AttentionVariantOps& ops = *detail::attention_variant_ops(how.variant);
  char* ws = static_cast<char*>(workspace);
  if (p.seqlen_q > 1) {
    detail::run_prefill(p, ops, layout, ws, dev, stream);
  } else {
    detail::run_decode(p, how.micro.splits, ops, layout, ws, dev, stream);
  }
}

}  // namespace wavetune

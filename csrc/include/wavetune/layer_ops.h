// The element-wise parts of a decoder layer, one kernel each where PyTorch's eager code runs several: RMS
// normalization, the gated activation of an MLP (SiLU of the gate times the up projection), rotary position
// embedding of queries and keys, and a mixture-of-experts layer's routing around its grouped GEMMs. Each
// computes what transformers' modules compute, rounding where they round, so a patched model's outputs match
// its own (docs/torch.md, "Layer ops").
//
//   wavetune::rms_norm(x, width, weight, out, width, rows, width, 1e-5f, wavetune::DType::bf16, stream);
//
// Rows of x and out move in 16-byte chunks: widths and row strides are multiples of 8 elements and pointers
// 16-byte aligned. Every launch waits for the previous kernel (programmatic dependent launch, kernels.h) only
// before its first load. Every function throws wavetune::InvalidArgument or wavetune::RuntimeError (errors.h).
#pragma once

#include <cstdint>
#include <string>

#include "wavetune/types.h"

namespace wavetune {

// out[r, :] = weight * dtype(x[r, :] / sqrt(mean(x[r, :]^2) + eps)), the statistics in fp32: transformers'
// LlamaRMSNorm and its copies (Qwen2, Mistral, Mixtral, Qwen3, ...). weight: `width` values of the same dtype.
WAVETUNE_API void rms_norm(const void* x, int64_t x_row_stride, const void* weight, void* out,
                           int64_t out_row_stride, int32_t rows, int32_t width, float eps, DType dtype, Stream stream);

// sum[r, :] = dtype(x[r, :] + residual[r, :]), then out = rms_norm(sum) as above, in one pass: a pre-norm decoder
// layer's residual addition and the norm after it. sum may alias x or residual (an in-place residual update).
WAVETUNE_API void add_rms_norm(const void* x, int64_t x_row_stride, const void* residual, int64_t residual_row_stride,
                               void* sum, int64_t sum_row_stride, const void* weight, void* out, int64_t out_row_stride,
                               int32_t rows, int32_t width, float eps, DType dtype, Stream stream);

// out[r, j] = dtype(silu(x[r, j])) * x[r, width + j] for j < width: the merged gate and up projections' output
// (gate first) to the down projection's input, as act_fn(gate_proj(x)) * up_proj(x) with act_fn SiLU.
WAVETUNE_API void silu_and_mul(const void* x, int64_t x_row_stride, void* out, int64_t out_row_stride, int32_t rows,
                               int32_t width, DType dtype, Stream stream);

// A tensor [batch, heads, seq, head_dim] with a contiguous last dimension (the layout transformers passes:
// [batch, seq, heads, head_dim] memory seen through transpose(1, 2)).
struct HeadsView {
  const void* data;
  int64_t batch_stride, head_stride, seq_stride;
};

// An output laid out as HeadsView says.
struct HeadsOut {
  void* data;
  int64_t batch_stride, head_stride, seq_stride;
};

struct RotaryProblem {
  int32_t batch, seq, heads_q, heads_k, head_dim;
  HeadsView q, k;
  HeadsOut q_out, k_out;
  const void* cos;  // [batch or 1, seq, head_dim], both halves (transformers' rotary embedding output)
  const void* sin;  // laid out as cos
  int64_t cos_batch_stride, cos_seq_stride;  // batch stride 0 broadcasts one row of positions to every sequence
  DType dtype;
};

// q_out = q * cos + rotate_half(q) * sin, and k_out from k, each product rounded to the dtype as transformers'
// apply_rotary_pos_emb rounds it (rotate_half(x) = [-x2, x1] of x's two halves).
WAVETUNE_API void rotary_embedding(const RotaryProblem& problem, Stream stream);

// A static key/value cache (transformers' StaticLayer): keys and values [batch, heads_k, capacity, head_dim] with
// a contiguous last dimension, one count of the tokens cached so far for every sequence.
struct StaticCacheWrite {
  HeadsView values;  // the new values, [batch, heads_k, seq, head_dim]
  void* key_cache;
  void* value_cache;  // laid out as key_cache
  int64_t cache_batch_stride, cache_head_stride, cache_seq_stride;
  int32_t capacity;
  int64_t* length;  // tokens cached (int64, on the GPU); the new ones go to positions length .. length + seq - 1
  uint32_t* arrivals;  // zero before a launch, and zero again after it (the CTAs count themselves done)
};

// rotary_embedding of q into q_out, with the rotated keys and the values written into the cache at positions
// *length + s (k_out is not used), and *length advanced by seq: apply_rotary_pos_emb followed by
// StaticLayer.update in one kernel. A position past the capacity stops the kernel with a device error, as
// index_copy_ does.
WAVETUNE_API void rotary_cache_write(const RotaryProblem& problem, const StaticCacheWrite& cache, Stream stream);

// A mixture-of-experts layer's routing: pair p = token * top_k + j of top_k_index [tokens, top_k] (int64 expert
// ids, as torch.topk returns them) sends token `token` to expert top_k_index[p]; ids outside [0, experts) (expert
// parallelism's sentinels) are dropped.
struct MoeRouting {
  const int64_t* expert_ids;  // [tokens * top_k]
  int32_t tokens, top_k, experts;
};

// The pairs sorted by expert: offsets[e] = the rows of experts 0..e (cumulative ends, torch._grouped_mm's offs)
// and positions[p] = pair p's row, the rows of one expert contiguous and in expert order, dropped pairs after
// them all. One CTA; experts at most kMoeMaxExperts. A pair's place among its expert's rows follows the order
// of atomics: the rows of one expert come in any order, which changes no row's product.
constexpr int32_t kMoeMaxExperts = 1024;
WAVETUNE_API void moe_align(const MoeRouting& routing, int32_t* offsets, int32_t* positions, Stream stream);

// rows[positions[p], :] = x[p / top_k, :] for every pair: each token's hidden state to the rows of its experts.
WAVETUNE_API void moe_gather(const void* x, int64_t x_row_stride, const int32_t* positions, int32_t pairs,
                             int32_t top_k, void* rows, int64_t rows_row_stride, int32_t width, DType dtype,
                             Stream stream);

// out[t, :] = dtype(sum over j of weights[t * top_k + j] * rows[positions[t * top_k + j], :]) over the pairs
// kept, in fp32 and in order of j: the experts' outputs weighted and summed per token. weights: fp32.
WAVETUNE_API void moe_combine(const void* rows, int64_t rows_row_stride, const int32_t* positions,
                              const MoeRouting& routing, const float* weights, void* out, int64_t out_row_stride,
                              int32_t width, DType dtype, Stream stream);

// Empty when the sizes, pointers and strides are valid, else the reason. Need no GPU.
WAVETUNE_API std::string rows_error(const void* x, int64_t x_row_stride, const void* out, int64_t out_row_stride,
                                    int32_t rows, int32_t width);
WAVETUNE_API std::string rotary_problem_error(const RotaryProblem& problem);
WAVETUNE_API std::string cache_write_error(const RotaryProblem& problem, const StaticCacheWrite& cache);
WAVETUNE_API std::string moe_routing_error(const MoeRouting& routing);

}  // namespace wavetune

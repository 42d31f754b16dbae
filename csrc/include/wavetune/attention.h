// Attention forward for inference (docs/attention.md): out = softmax(scale * q k^T [+ causal mask]) v per
// head, with grouped-query heads, in the FlashAttention layout [batch, seq, heads, head_dim].
//
//   wavetune::AttentionProblem p{...};                                   // sizes, pointers, strides
//   wavetune::AttentionLaunch how = wavetune::attention_choice(p, &table);  // variant and KV splits
//   size_t bytes = wavetune::attention_workspace_bytes(p, how.splits);      // device memory the caller owns
//   wavetune::attention(p, how, workspace, bytes, stream);
//
// Attention variants have ids of their own (cutlass_configs/sm90_attention.toml). Beside them the family
// lists two candidates that run outside attention(), per dtype and head dim, so that attention tables can
// price them with the same model: cuDNN's attention (schedule cudnn; the caller runs it, as PyTorch's SDPA
// does) and the paged decode kernel on the dense cache (schedule paged; paged_attention.h, one page per
// sequence). attention_choice returns them only to a caller that says it runs them (AttentionRoutes).
// Every function throws wavetune::InvalidArgument or wavetune::RuntimeError (errors.h) on failure.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "wavetune/types.h"

namespace wavetune {

// Strides are in elements, for [batch, seq, heads, head_dim] with head_dim contiguous (stride 1).
struct AttentionTensor {
  const void* data;
  int64_t batch_stride, seq_stride, head_stride;
};

struct AttentionProblem {
  int32_t batch, seqlen_q, seqlen_k;
  int32_t heads_q, heads_kv;  // heads_q a multiple of heads_kv: each KV head serves heads_q / heads_kv query heads
  int32_t head_dim;
  AttentionTensor q, k, v;
  AttentionTensor out;  // written; its data pointer is cast from const
  float scale;          // of q.k before the softmax (usually 1 / sqrt(head_dim))
  // Bottom-right causal mask: query i sees keys j <= i + seqlen_k - seqlen_q (the queries are the newest
  // tokens), so it needs seqlen_q <= seqlen_k. With seqlen_q == 1 it masks nothing.
  bool causal;
  DType dtype;
};

// A choice: the variant, and how many chunks the keys are cut into (each run as part of one grid, then
// merged by a combine kernel by their log-sum-exp). splits > 1 is for decode (seqlen_q == 1).
struct AttentionLaunch {
  int32_t variant;
  int32_t splits;
};

// Attention variants compiled into this build, ordered by id: tile_m x tile_n x tile_k is the FMHA tile,
// query rows x KV rows x head dim; b_layout col, no swap, cluster 1x1. Then the cuDNN and paged candidates
// (ids from kLibraryVariantIds, types.h), whose tile is nominal: 128 query rows x 64 keys, for the mapping.
// NOTES: the nominal tile gives both the grid they run on decode, a CTA per sequence and KV head (for the
// paged kernel before its splits, which the table's per-wave fits then price).
WAVETUNE_API const std::vector<VariantInfo>& attention_variants();

// The cuDNN and paged candidates as attention_variants() lists them: one per dtype and head dim.
inline std::vector<VariantInfo> attention_candidates() {
  static const char* const kNames[2][2][3] = {
      {{"attn_cudnn_bf16_hd64", "attn_cudnn_bf16_hd128", "attn_cudnn_bf16_hd256"},
       {"attn_cudnn_fp16_hd64", "attn_cudnn_fp16_hd128", "attn_cudnn_fp16_hd256"}},
      {{"attn_paged_bf16_hd64", "attn_paged_bf16_hd128", "attn_paged_bf16_hd256"},
       {"attn_paged_fp16_hd64", "attn_paged_fp16_hd128", "attn_paged_fp16_hd256"}}};
  std::vector<VariantInfo> out;
  int32_t id = kLibraryVariantIds;
  for (int route = 0; route < 2; ++route) {
    for (DType dtype : {DType::bf16, DType::fp16}) {
      for (int d = 0; d < 3; ++d) {
        out.push_back({id++, kNames[route][int(dtype)][d], dtype, BLayout::col, false,
                       route == 0 ? Schedule::cudnn : Schedule::paged, 128, 64, 64 << d, 1, 1,
                       TileScheduler::data_parallel});
      }
    }
  }
  return out;
}
// The hash of cutlass_configs/sm90_attention.toml as compiled.
WAVETUNE_API const char* attention_config_space_hash();
// The attention variant with this id, or nullptr when it is not compiled in.
WAVETUNE_API const VariantInfo* find_attention_variant(int32_t id);

// Empty when the problem's sizes, pointers, strides and alignment are valid, else the reason. No GPU.
WAVETUNE_API std::string attention_problem_error(const AttentionProblem& problem);
// Whether the keys of a (valid) problem can be split: decode only, and with batch > 1 K and V must hold a
// key's heads side by side (seq_stride == heads_kv * head_stride).
WAVETUNE_API bool attention_kv_splittable(const AttentionProblem& problem);
// Empty when `how` can run the (valid) problem: the variant's dtype and head dim, the split count. The
// cuDNN and paged candidates never run here (attention() refuses them; the reason names what runs them).
WAVETUNE_API std::string attention_launch_error(const AttentionProblem& problem, const AttentionLaunch& how);

// The built-in choice for the current device (attention_heuristic.h), from the sizes only: a few
// microseconds (it evaluates the model for every compiled variant and split count), so keep it per shape.
// Variant -1 where no compiled variant takes the problem's dtype and head dim (the default install compiles
// none until a table or `python -m wavetune build` asks): the caller runs its framework's attention instead.
WAVETUNE_API AttentionLaunch attention_default_launch(const AttentionProblem& problem);

class Selector;  // lookup.h

// The candidates outside attention() a caller of attention_choice can run on a problem.
struct AttentionRoutes {
  bool cudnn = false;         // cuDNN's attention: decode, or a mask cuDNN's top-left causal mask matches
  bool paged = false;         // the paged decode kernel (decode only; K and V with one set of strides)
  bool cudnn_copies = false;  // cuDNN writes its own output, which the caller then copies into problem.out
};

// The launch a call with no forced config makes on the current device (Python's and C++'s alike): the
// built-in choice, unless `table` (an attention table bound to this build, lookup.h; nullptr: none) predicts
// a candidate that can run the problem more than 5% faster than the built-in's choice, which must then be
// one of its configs (docs/attention.md). The built-in choice, among the routes allowed: cuDNN's attention
// for prefill, and for decode up to head dim 128 on K and V under 1 GiB (without cudnn_copies; always at
// head dim 64 with 16 or more query heads per KV head); else the paged kernel for decode; else the FMHA
// model's choice (attention_default_launch; variant -1 where none is compiled). A decode problem of 128 keys or more is chosen for its key
// count rounded down to whole 64-key tiles, so one choice serves many steps of a growing cache. Choices are
// cached per thread, device, table, shape and routes.
WAVETUNE_API AttentionLaunch attention_choice(const AttentionProblem& problem, const Selector* table,
                                              const AttentionRoutes& routes = {});

// Device memory an attention call needs: the log-sum-exp rows, and with splits the partial outputs.
WAVETUNE_API size_t attention_workspace_bytes(const AttentionProblem& problem, int32_t splits);

// Launches on `stream`. The workspace must stay untouched until the launch completes (stream order).
WAVETUNE_API void attention(const AttentionProblem& problem, const AttentionLaunch& how, void* workspace,
                            size_t workspace_bytes, Stream stream);

}  // namespace wavetune

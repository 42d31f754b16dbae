// Decode attention over a paged KV cache (docs/attention.md, "Paged decode"): one new query token per
// sequence against that sequence's cached keys and values, which live in fixed-size pages found through a
// block table (vLLM's and FlashInfer's layout), each sequence with its own length.
//
//   wavetune::PagedAttentionProblem p{...};                             // sizes, pointers, strides
//   wavetune::PagedAttentionLaunch how = wavetune::paged_attention_choice(p);  // kernel and KV splits
//   size_t bytes = wavetune::paged_attention_workspace_bytes(p, how);   // device memory the caller owns
//   wavetune::paged_attention(p, how, workspace, bytes, stream);
//
// The query heads that share a KV head are the rows of one tile, so each KV byte is read once (grouped-query
// attention); the keys of a sequence are cut into `splits` chunks run side by side and merged by their
// log-sum-exp. Every function throws wavetune::InvalidArgument or wavetune::RuntimeError (errors.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "wavetune/types.h"

namespace wavetune {

// The most KV splits a launch takes.
constexpr int32_t kPagedAttentionMaxSplits = 256;

struct PagedAttentionProblem {
  int32_t batch, heads_q, heads_kv, head_dim;  // head_dim 64, 128 or 256; heads_q a multiple of heads_kv
  const void* q;                               // [batch, heads_q, head_dim]
  int64_t q_batch_stride, q_head_stride;
  // K and V caches [pages, page_size, heads_kv, head_dim], both with these strides (elements).
  const void* k_cache;
  const void* v_cache;
  int64_t page_stride, row_stride, head_stride;
  int32_t page_size;
  // [batch, table_stride] int32: sequence b's key j is row j % page_size of page block_table[b, j / page_size].
  // Null: sequence b's keys are page b (a dense cache [batch, seq, heads_kv, head_dim]; page_size >= max_seq_len).
  const int32_t* block_table;
  int64_t table_stride;
  // [batch] int32, each in [0, max_seq_len]: the keys each sequence attends to, read on the GPU. Null:
  // max_seq_len each. A sequence with no keys gets zeros.
  const int32_t* seq_lens;
  int32_t max_seq_len;  // a bound on seq_lens the caller knows on the host: the split count is chosen for it
  void* out;            // [batch, heads_q, head_dim], written
  int64_t out_batch_stride, out_head_stride;
  float scale;  // of q.k before the softmax
  DType dtype;  // of q, the caches and out
};

// A launch: the kernel (an id of paged_attention_variants) and how many chunks each sequence's keys are cut
// into (run side by side, then merged by their log-sum-exp).
struct PagedAttentionLaunch {
  int32_t variant;
  int32_t splits;
};

// The compiled paged attention kernels (two per dtype and head dim, one at head dim 256): tile_m is the
// query-head rows of a tile, tile_n the keys a CTA step reads (16 per warp), tile_k the head dim.
WAVETUNE_API const std::vector<VariantInfo>& paged_attention_variants();
// Identifies the compiled catalog.
WAVETUNE_API const char* paged_attention_config_space_hash();

// Empty when the problem's sizes, pointers, strides and alignment are valid, else the reason. No GPU.
WAVETUNE_API std::string paged_attention_problem_error(const PagedAttentionProblem& problem);

// Empty when `how` can run the (valid) problem: a compiled kernel of its dtype and head dim, 1-256 splits.
WAVETUNE_API std::string paged_attention_launch_error(const PagedAttentionProblem& problem,
                                                      const PagedAttentionLaunch& how);

// The kernel and KV split count the wave model picks for the current device: CTAs (batch x KV heads x
// query-head blocks x splits) in whole waves of the kernel's resident CTAs against the keys each one
// streams, plus the merge. From the sizes only.
WAVETUNE_API PagedAttentionLaunch paged_attention_choice(const PagedAttentionProblem& problem);

// CTAs of a kernel resident per SM on the current device: the size of its waves over the SM count.
WAVETUNE_API int32_t paged_attention_resident_ctas(int32_t variant);

// Device memory a launch needs (fp32 partial outputs and log-sum-exps; none unsplit).
WAVETUNE_API size_t paged_attention_workspace_bytes(const PagedAttentionProblem& problem,
                                                    const PagedAttentionLaunch& how);

// Launches on `stream` (with programmatic dependent launch where enabled, kernels.h). The workspace must
// stay untouched until the launch completes (stream order).
WAVETUNE_API void paged_attention(const PagedAttentionProblem& problem, const PagedAttentionLaunch& how,
                                  void* workspace, size_t workspace_bytes, Stream stream);

}  // namespace wavetune

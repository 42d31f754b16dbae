// Attention over a paged KV cache (docs/attention.md, "Paged attention"): each sequence's new query tokens
// (one in decode; a prompt or a chunk of one in prefill) against that sequence's keys and values, which live
// in fixed-size pages found through a block table (vLLM's and FlashInfer's layout), in a dense cache, or
// ragged in one tensor (FlashAttention's variable-length layout), each sequence with its own lengths.
//
//   wavetune::PagedAttentionProblem p{...};                             // sizes, pointers, strides
//   wavetune::PagedAttentionLaunch how = wavetune::paged_attention_choice(p);  // kernel and KV splits
//   size_t bytes = wavetune::paged_attention_workspace_bytes(p, how);   // device memory the caller owns
//   wavetune::paged_attention(p, how, workspace, bytes, stream);
//
// The query heads that share a KV head are rows of one tile, so each KV byte is read once per tile
// (grouped-query attention); the keys of a sequence are cut into `splits` chunks run side by side and merged
// by their log-sum-exp. Every function throws wavetune::InvalidArgument or wavetune::RuntimeError (errors.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "wavetune/types.h"

namespace wavetune {

// The most KV splits a launch takes, and the most that merge in the attention kernel's clusters.
constexpr int32_t kPagedAttentionMaxSplits = 256;
constexpr int32_t kPagedAttentionMaxClusterSplits = 8;

struct PagedAttentionProblem {
  int32_t batch, heads_q, heads_kv, head_dim;  // head_dim 64, 128 or 256; heads_q a multiple of heads_kv
  const void* q;                               // [batch, heads_q, head_dim], or [q_tokens, ...] with q_starts
  int64_t q_batch_stride, q_head_stride;       // (the batch stride is per token with q_starts)
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
  // max_seq_len each (or key_starts' counts). A sequence with no keys gets zeros.
  const int32_t* seq_lens;
  int32_t max_seq_len;  // a bound on seq_lens the caller knows on the host: the split count is chosen for it
  void* out;            // shaped and strided as q, written
  int64_t out_batch_stride, out_head_stride;
  float scale;  // of q.k before the softmax
  DType dtype;  // of q, the caches and out
  // Several queries per sequence (prefill, a chunk after a cached prefix, speculative tokens): [batch + 1]
  // int32 on the GPU, sequence b's queries are rows q_starts[b] .. q_starts[b + 1] - 1 of q and out, its
  // newest tokens. Null: one query per sequence, row b.
  const int32_t* q_starts = nullptr;
  int32_t max_q_len = 1;  // a host bound on queries per sequence: those past it are neither computed nor written
  int32_t q_tokens = 0;   // rows of q and out (0: batch)
  // With the causal mask query t of a sequence's n sees keys j <= seq_len - n + t (the bottom-right mask:
  // the queries are the sequence's last tokens); without it, all of them.
  bool causal = true;
  // Ragged keys, no block table: [batch + 1] int32 on the GPU, sequence b's key j is row key_starts[b] + j of
  // the caches [total keys, heads_kv, head_dim] (page_stride unused), and it has key_starts[b + 1] -
  // key_starts[b] keys unless seq_lens says otherwise.
  const int32_t* key_starts = nullptr;
  // A host-side count of all sequences' keys together (the sum of seq_lens), or 0: batch x max_seq_len. The
  // split count is chosen for it: the splits the longest sequence wants cost a batch of shorter ones little.
  int64_t total_keys = 0;
};

// A launch: the kernel (an id of paged_attention_variants) and how many chunks each sequence's keys are cut
// into (run side by side, then merged by their log-sum-exp).
struct PagedAttentionLaunch {
  int32_t variant;
  int32_t splits;
};

// The compiled paged attention kernels (three per dtype and head dim, two at head dim 256): tile_m is the
// rows of a CTA ((token, query head) pairs; 16: its warps split the keys, 16 per warp: they split the rows),
// tile_n the keys a CTA step reads (16 per warp), tile_k the head dim.
WAVETUNE_API const std::vector<VariantInfo>& paged_attention_variants();
// Identifies the compiled catalog.
WAVETUNE_API const char* paged_attention_config_space_hash();

// Empty when the problem's sizes, pointers, strides and alignment are valid, else the reason. No GPU.
WAVETUNE_API std::string paged_attention_problem_error(const PagedAttentionProblem& problem);

// Empty when `how` can run the (valid) problem: a compiled kernel of its dtype and head dim, 1-256 splits.
WAVETUNE_API std::string paged_attention_launch_error(const PagedAttentionProblem& problem,
                                                      const PagedAttentionLaunch& how);

// The kernel and KV split count the wave model picks for the current device: CTAs (batch x KV heads x
// row blocks x splits) in whole waves of the kernel's resident CTAs against the keys each one streams and
// its tile math, plus the merge (in clusters or a kernel of its own). From the sizes only.
WAVETUNE_API PagedAttentionLaunch paged_attention_choice(const PagedAttentionProblem& problem);

// CTAs of a kernel resident per SM on the current device: the size of its waves over the SM count.
WAVETUNE_API int32_t paged_attention_resident_ctas(int32_t variant);

// CTAs of a kernel resident at once on the current device in clusters of `cluster` CTAs (2 to
// kPagedAttentionMaxClusterSplits; 0 for other sizes). A launch of 2 to that many splits whose grid fits them
// runs each row block's splits as one cluster, which merges them itself: no merge kernel follows.
WAVETUNE_API int64_t paged_attention_cluster_ctas(int32_t variant, int32_t cluster);

// Device memory a launch needs (fp32 partial outputs and log-sum-exps when split; an int32 per sequence, for
// their order, from 2 to 1,024 sequences; 0 for one sequence unsplit).
WAVETUNE_API size_t paged_attention_workspace_bytes(const PagedAttentionProblem& problem,
                                                    const PagedAttentionLaunch& how);

// Launches on `stream` (with programmatic dependent launch where enabled, kernels.h). The workspace must
// stay untouched until the launch completes (stream order).
WAVETUNE_API void paged_attention(const PagedAttentionProblem& problem, const PagedAttentionLaunch& how,
                                  void* workspace, size_t workspace_bytes, Stream stream);

}  // namespace wavetune

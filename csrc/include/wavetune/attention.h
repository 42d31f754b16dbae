// Attention forward for inference (docs/attention.md), one family with two kinds of kernel:
//
// - attention(): out = softmax(scale * q k^T [+ causal mask]) v per head, with grouped-query heads, in the
//   FlashAttention layout [batch, seq, heads, head_dim] (CUTLASS's Hopper FMHA):
//
//   wavetune::AttentionProblem p{...};                                   // sizes, pointers, strides
//   wavetune::Launch how = wavetune::choose(p, &table);                    // variant and KV splits (micro.splits)
//   size_t bytes = wavetune::attention_workspace_bytes(p, how.micro.splits);  // device memory the caller owns
//   wavetune::attention(p, how, workspace, bytes, stream);
//
// - paged_attention(): each sequence's new query tokens (one in decode; a prompt or a chunk of one in
//   prefill) against that sequence's keys and values, which live in fixed-size pages found through a block
//   table (vLLM's and FlashInfer's layout), in a dense cache, or ragged in one tensor (FlashAttention's
//   variable-length layout), each sequence with its own lengths ("Paged attention", below).
//
// Attention variants have ids of their own (cutlass_configs/sm90_attention.toml). Beside them the family
// lists two candidates that run outside attention(), per dtype and head dim, so that attention tables can
// price them with the same model: cuDNN's attention (schedule cudnn; the caller runs it, as PyTorch's SDPA
// does) and the paged decode kernel on the dense cache (schedule paged; paged_attention(), one page per
// sequence). choose returns them only to a caller that says it runs them (AttentionRoutes).
// Every function throws wavetune::InvalidArgument or wavetune::RuntimeError (errors.h) on failure.
#pragma once

#include <cstddef>
#include <cstdint>
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
                       TileScheduler::data_parallel, route == 0 ? arch::any : arch::sm80});
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
// Empty when `how` can run the (valid) problem: the variant's dtype and head dim, the split count (how many
// chunks the keys are cut into, each run as part of one grid, then merged by a combine kernel by their
// log-sum-exp; more than one for decode, seqlen_q == 1, only). The cuDNN and paged candidates never run here
// (attention() refuses them; the reason names what runs them).
WAVETUNE_API std::string attention_launch_error(const AttentionProblem& problem, const Launch& how);

// The built-in choice for the current device (attention_heuristic.h), from the sizes only: a few
// microseconds (it evaluates the model for every compiled variant and split count), so keep it per shape.
// Variant -1 where no compiled variant that runs on the device (runs_here) takes the problem's dtype and head dim
// (the default install compiles none until a table or `python -m wavetune build` asks; the FMHA variants are
// sm90a): the caller runs its framework's attention instead.
WAVETUNE_API Launch attention_default_launch(const AttentionProblem& problem);

class Selector;  // lookup.h

// The candidates outside attention() a caller of choose can run on a problem.
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
// With options.batch_invariance on (batch_invariance.h), the kernel chosen for the same problem with batch 1, without
// the cudnn route (cuDNN picks its own KV splits), unsplit (the FMHA's splits take a sequence's keys in chunks at
// batch 1 and strided at larger batches): every batch size runs one kernel over each sequence's keys in one order.
// The paged route then runs its own batch-invariant choice (below).
WAVETUNE_API Launch choose(const AttentionProblem& problem, const Selector* table, const AttentionRoutes& routes = {},
                           const ChoiceOptions& options = {});

// Device memory an attention call needs: the log-sum-exp rows, and with splits the partial outputs.
WAVETUNE_API size_t attention_workspace_bytes(const AttentionProblem& problem, int32_t splits);

// Launches on `stream`. The workspace must stay untouched until the launch completes (stream order).
WAVETUNE_API void attention(const AttentionProblem& problem, const Launch& how, void* workspace,
                            size_t workspace_bytes, Stream stream);

// --- Paged attention (docs/attention.md, "Paged and variable-length attention") ----------------------------
//
//   wavetune::PagedAttentionProblem p{...};                             // sizes, pointers, strides
//   wavetune::Launch how = wavetune::choose(p, nullptr);                // kernel and KV splits (micro.splits)
//   size_t bytes = wavetune::paged_attention_workspace_bytes(p, how);   // device memory the caller owns
//   wavetune::paged_attention(p, how, workspace, bytes, stream);
//
// The query heads that share a KV head are rows of one tile, so each KV byte is read once per tile
// (grouped-query attention); the keys of a sequence are cut into `splits` chunks run side by side and merged
// by their log-sum-exp. The paged kernels have ids of their own (paged_attention_variants); the attention
// variant of schedule paged stands for them in attention tables.

// The most KV splits a launch takes, and the most that merge in the paged kernel's clusters.
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

// The compiled paged attention kernels (three per dtype and head dim, two at head dim 256): tile_m is the
// rows of a CTA ((token, query head) pairs; 16: its warps split the keys, 16 per warp: they split the rows),
// tile_n the keys a CTA step reads (16 per warp), tile_k the head dim.
WAVETUNE_API const std::vector<VariantInfo>& paged_attention_variants();

// Empty when the problem's sizes, pointers, strides and alignment are valid, else the reason. No GPU.
WAVETUNE_API std::string paged_attention_problem_error(const PagedAttentionProblem& problem);

// Empty when `how` can run the (valid) problem: a compiled kernel (an id of paged_attention_variants) of its
// dtype and head dim, and 1-256 splits: how many chunks each sequence's keys are cut into (run side by side,
// then merged by their log-sum-exp).
WAVETUNE_API std::string paged_attention_launch_error(const PagedAttentionProblem& problem, const Launch& how);

// The kernel and KV split count the wave model picks for the current device: CTAs (batch x KV heads x
// row blocks x splits) in whole waves of the kernel's resident CTAs against the keys each one streams and
// its tile math, plus the merge (in clusters or a kernel of its own). From the sizes only. The paged kernels
// have no tables of their own (attention tables price them through the schedule-paged candidate, which
// choose(AttentionProblem) returns): `table` must be nullptr (InvalidArgument otherwise).
// With options.batch_invariance on (batch_invariance.h), the kernel the model picks for one decode sequence of
// kPagedInvariantReferenceKeys keys and the problem's heads, dtype and head dim, unsplit: a split count is cut from
// max_seq_len and the merge runs in clusters only where the grid fits, both set by the other sequences.
WAVETUNE_API Launch choose(const PagedAttentionProblem& problem, const Selector* table,
                           const ChoiceOptions& options = {});
constexpr int32_t kPagedInvariantReferenceKeys = 4096;

// CTAs of a kernel resident per SM on the current device: the size of its waves over the SM count.
WAVETUNE_API int32_t paged_attention_resident_ctas(int32_t variant);

// CTAs of a kernel resident at once on the current device in clusters of `cluster` CTAs (2 to
// kPagedAttentionMaxClusterSplits; 0 for other sizes). A launch of 2 to that many splits whose grid fits them
// runs each row block's splits as one cluster, which merges them itself: no merge kernel follows.
WAVETUNE_API int64_t paged_attention_cluster_ctas(int32_t variant, int32_t cluster);

// Device memory a launch needs (fp32 partial outputs and log-sum-exps when split; an int32 per sequence, for
// their order, from 2 to 1,024 sequences; 0 for one sequence unsplit).
WAVETUNE_API size_t paged_attention_workspace_bytes(const PagedAttentionProblem& problem, const Launch& how);

// Launches on `stream` (with programmatic dependent launch where enabled, kernels.h). The workspace must
// stay untouched until the launch completes (stream order).
WAVETUNE_API void paged_attention(const PagedAttentionProblem& problem, const Launch& how, void* workspace,
                                  size_t workspace_bytes, Stream stream);

}  // namespace wavetune

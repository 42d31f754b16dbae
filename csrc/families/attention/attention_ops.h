// Internal interface between the attention runtime (registry.cpp, launch.cu) and the
// generated attention variant sources (sm90_attention.cuh).
#pragma once

#include <cstddef>
#include <cstdint>

#include "device.h"
#include "variant_registry.h"
#include "wavetune/attention.h"
#include "wavetune/attention_heuristic.h"

namespace wavetune::detail {

// One launch of CUTLASS's Hopper FMHA kernel, in its own terms: a problem (B, H, Q, K, D) whose two batch
// modes B and H each carry one stride per tensor (elements; the head dimension is contiguous). The
// runtime (launch.cu) maps a user's problem onto these modes: grouped-query heads, folded
// decode heads and KV splits are all stride choices.
struct FmhaCall {
  int32_t b, h, rows, keys, head_dim;
  const void* q;
  int64_t q_row, q_b, q_h;
  const void* k;
  int64_t k_row, k_b, k_h;
  const void* v;
  int64_t v_row, v_b, v_h;
  void* o;
  int64_t o_row, o_b, o_h;
  float* lse;  // fp32 log-sum-exp per row, rows contiguous; the kernel always writes it
  int64_t lse_b, lse_h;
  float scale;  // of q.k before the softmax
  // Bottom-right causal mask (the query rows are the last `rows` positions of the `keys`): row i sees
  // keys j <= i + keys - rows. Only for calls whose rows are one sequence's tokens (not folded heads).
  bool causal;
};

inline AttentionShape shape_of(const AttentionProblem& p) {
  return {p.batch, p.seqlen_q, p.seqlen_k, p.heads_q, p.heads_kv, p.causal};
}

// Where the parts of an attention call's workspace start (each 128-byte aligned): the log-sum-exp rows;
// with splits the partial outputs [batch, splits, heads_q, head_dim] and, for batch > 1, the queries
// repeated once per split in the same layout (the split is then part of the head mode, launch.cu);
// where expand_kv_heads, K and V copied out to [batch, seqlen_k, heads_q, head_dim] each.
struct AttentionWorkspace {
  size_t lse = 0, partial = 0, queries = 0, keys = 0, values = 0, total = 0;

  AttentionWorkspace(const AttentionProblem& p, int32_t splits) {
    const size_t rows = size_t(p.batch) * p.heads_q * (p.seqlen_q == 1 ? splits : p.seqlen_q);
    const size_t split_rows = splits > 1 ? size_t(p.batch) * splits * p.heads_q * p.head_dim * 2 : 0;
    const size_t expanded = expand_kv_heads(shape_of(p)) ? size_t(p.batch) * p.seqlen_k * p.heads_q * p.head_dim * 2 : 0;
    lse = take(rows * sizeof(float));
    partial = take(split_rows);
    queries = take(p.batch > 1 ? split_rows : 0);
    keys = take(expanded);
    values = take(expanded);
  }
  size_t take(size_t bytes) {
    const size_t offset = total;
    total = (total + bytes + 127) / 128 * 128;
    return offset;
  }
};

// What each generated attention variant exports; the registry holds one per compiled variant.
struct AttentionVariantOps {
  void (*run)(const FmhaCall&, const DeviceInfo&, Stream);
};

// The generated registry: the ops of a compiled attention variant, nullptr when not compiled in (and for the
// candidates of attention_candidate_entries).
const AttentionVariantOps* attention_variant_ops(int32_t id);
// The cuDNN and paged candidates (attention.h's attention_candidates) as registry entries without ops: they are
// chosen by choose (attention.h) and run elsewhere (registry.cpp).
std::vector<VariantRegistry<AttentionVariantOps>::Entry> attention_candidate_entries();

}  // namespace wavetune::detail

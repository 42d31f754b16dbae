// The rules of the attention family's run-time choice (choice.cpp) that read no device: the built-in decode rule
// between cuDNN and the paged kernel, and when a table overrides the built-in choice. Host-only, no CUDA, so the
// bindings give the Python replay (wavetune.families.attention.replay) these same rules. Their constants are the
// family's model data, the [model] table of cutlass_configs/sm90_attention.toml (AttentionModel,
// attention_model_data.h).
#pragma once

#include <cstdint>

#include "attention_model_data.h"
#include "wavetune/attention.h"

namespace wavetune::detail {

// cuDNN's causal mask is top-left: the same as the problem's bottom-right one only with as many queries as keys.
inline bool cudnn_mask_fits(const AttentionProblem& p) {
  return p.seqlen_q == 1 || !p.causal || p.seqlen_q == p.seqlen_k;
}

// NOTES: the built-in decode rule (no table prices cuDNN): on a dense cache cuDNN's decode kernel runs the
// paged kernel's grid (a CTA per sequence and KV head, the KV head's query heads in 16 rows) and reads K and
// V faster below about a gigabyte; the paged kernel wins at head dim 256 and on larger caches (its split
// counts). Replayed on four held-out decode logs (H100 seeds 53 and 59, H200 seeds 59 and 61), the rule took
// the call from 0.971-0.986x to 0.998-1.009x SDPA's fastest backend (any bound in 0.3-1.5 GB gave the same).
// Where the output is copied the copy costs what cuDNN gains, except with 16 or more query heads per 64-dim
// KV head, where cuDNN ran 1.07-1.37x faster than every paged kernel and split count (Falcon-40B's heads).
inline bool builtin_prefers_cudnn(const AttentionProblem& p, const AttentionRoutes& routes, const AttentionModel& model) {
  if (!routes.cudnn || !cudnn_mask_fits(p)) return false;
  if (p.seqlen_q > 1 || (p.head_dim == 64 && p.heads_q / p.heads_kv >= 16)) return true;
  const int64_t kv_bytes = int64_t(4) * p.batch * p.seqlen_k * p.heads_kv * p.head_dim;  // K and V, 2 bytes each
  return !routes.cudnn_copies && p.head_dim <= 128 && kv_bytes < model.cudnn_decode_max_bytes;
}

// NOTES: the built-in model's choice holds unless the table predicts a config more than table_margin faster.
// The table's per-config fits are closer to the cases they were fitted on than the built-in model (2% median
// error against 8%), but on other models' shapes they were sometimes far off: taken outright, the table's
// choices ran at 0.951 of the best on the H200's held-out cases where the built-in's ran at 0.965 (both read
// off one run's timings of every config). As an override they ran at 0.986 and 0.977 of the best on the
// held-out cases, the built-in alone at 0.976 and 0.974, in the same rounds (H100, H200, 2026-11-24). The
// margin ranked best of 0, 0.05, 0.1, 0.2, 0.3 on the named cases the tables were fitted to.
inline bool table_overrides(double builtin_us, double best_us, const AttentionModel& model) {
  return builtin_us > (1 + model.table_margin) * best_us;
}

}  // namespace wavetune::detail

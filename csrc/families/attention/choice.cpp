// The attention family's run-time choice between its built-in model and its tuned table (attention.h,
// attention_choice): one policy for every caller, C++ and Python.
#include <array>
#include <cstdint>
#include <functional>
#include <unordered_map>

#include "attention_ops.h"
#include "wavetune/attention.h"
#include "wavetune/errors.h"
#include "wavetune/lookup.h"

namespace wavetune {
namespace {

// NOTES: the built-in model's choice holds unless the table predicts a config more than kTableMargin faster.
// The table's per-config fits are closer to the cases they were fitted on than the built-in model (2% median
// error against 8%), but on other models' shapes they were sometimes far off: taken outright, the table's
// choices ran at 0.951 of the best on the H200's held-out cases where the built-in's ran at 0.965 (both read
// off one run's timings of every config). As an override they ran at 0.986 and 0.977 of the best on the
// held-out cases, the built-in alone at 0.976 and 0.974, in the same rounds (H100, H200, 2026-11-24). The
// margin ranked best of 0, 0.05, 0.1, 0.2, 0.3 on the named cases the tables were fitted to. KV splits also
// depend on the strides (attention_launch_error), so a table's config must be checked against the problem.
constexpr double kTableMargin = 0.05;
constexpr size_t kMaxCachedChoices = 4096;
// NOTES: cuDNN writes a tensor of its own, and copying it into the caller's output is one more launch:
// 1-2 us at decode sizes (H100 and H200, docs/attention.md). Tables price cuDNN as a call without an output
// given runs it, so a caller that copies pays this too.
constexpr double kCudnnCopyUs = 1.5;
// NOTES: the built-in decode rule (no table prices cuDNN): on a dense cache cuDNN's decode kernel runs the
// paged kernel's grid (a CTA per sequence and KV head, the KV head's query heads in 16 rows) and reads K and
// V faster below about a gigabyte; the paged kernel wins at head dim 256 and on larger caches (its split
// counts). Replayed on four held-out decode logs (H100 seeds 53 and 59, H200 seeds 59 and 61), the rule took
// the call from 0.971-0.986x to 0.998-1.009x SDPA's fastest backend (any bound in 0.3-1.5 GB gave the same).
// Where the output is copied the copy costs what cuDNN gains, except with 16 or more query heads per 64-dim
// KV head, where cuDNN ran 1.07-1.37x faster than every paged kernel and split count (Falcon-40B's heads).
constexpr int64_t kCudnnDecodeMaxBytes = int64_t(1) << 30;

struct ChoiceKey {
  std::array<int64_t, 11> fields;
  bool operator==(const ChoiceKey& o) const { return fields == o.fields; }
};
struct ChoiceKeyHash {
  size_t operator()(const ChoiceKey& k) const {
    size_t h = 0;
    for (int64_t f : k.fields) h = h * 1000003u ^ std::hash<int64_t>{}(f);
    return h;
  }
};

// cuDNN's causal mask is top-left: the same as the problem's bottom-right one only with as many queries as keys.
bool cudnn_mask_fits(const AttentionProblem& p) { return p.seqlen_q == 1 || !p.causal || p.seqlen_q == p.seqlen_k; }

bool builtin_prefers_cudnn(const AttentionProblem& p, const AttentionRoutes& routes) {
  if (!routes.cudnn || !cudnn_mask_fits(p)) return false;
  if (p.seqlen_q > 1 || (p.head_dim == 64 && p.heads_q / p.heads_kv >= 16)) return true;
  const int64_t kv_bytes = int64_t(4) * p.batch * p.seqlen_k * p.heads_kv * p.head_dim;  // K and V, 2 bytes each
  return !routes.cudnn_copies && p.head_dim <= 128 && kv_bytes < kCudnnDecodeMaxBytes;
}

// The candidate of a schedule (cudnn, paged) for the problem's dtype and head dim.
int32_t candidate_id(Schedule schedule, const AttentionProblem& p) {
  for (const VariantInfo& v : attention_variants()) {
    if (v.schedule == schedule && v.dtype == p.dtype && v.tile_k == p.head_dim) return v.id;
  }
  WAVETUNE_INVALID("no ", to_string(schedule), " attention candidate for head_dim ", p.head_dim);
}

AttentionLaunch builtin_launch(const AttentionProblem& p, const AttentionRoutes& routes) {
  if (builtin_prefers_cudnn(p, routes)) return {candidate_id(Schedule::cudnn, p), 1};
  if (routes.paged && p.seqlen_q == 1) return {candidate_id(Schedule::paged, p), 1};
  return attention_default_launch(p);
}

// NOTES: where cuDNN or the paged kernel runs, the FMHA configs are left out. Their table fits extrapolate
// badly to what the named cases lack: decode bound by HBM (the H200's fits put large batches 10-15% under
// what the configs ran) and batched grouped-query prefill at head dim 256 (K and V copied out to the query
// heads). On three held-out samples (H200, 2026-11-28, docs/attention.md) the table chose them at 0.48-0.96x
// of cuDNN or the paged kernel and ran 0.984-1.004x SDPA's fastest backend against 0.988-1.003x without
// them; one of cuDNN and the paged kernel beat the best FMHA config and split count on every held-out decode
// case (the FMHA won in the named suite only: single sequences of 512 keys by up to 20%, long single-
// sequence prefill by up to 13%).
bool runs(const AttentionProblem& p, const AttentionLaunch& how, const AttentionRoutes& routes) {
  const VariantInfo* v = find_attention_variant(how.variant);
  if (v && v->schedule == Schedule::cudnn) return routes.cudnn && how.splits == 1 && cudnn_mask_fits(p);
  if (v && v->schedule == Schedule::paged) return routes.paged && how.splits == 1 && p.seqlen_q == 1;
  const bool library_runs = (routes.paged && p.seqlen_q == 1) || (routes.cudnn && cudnn_mask_fits(p));
  return !library_runs && attention_launch_error(p, how).empty();
}

AttentionLaunch uncached_choice(const AttentionProblem& p, const Selector* table, const AttentionRoutes& routes) {
  const AttentionLaunch builtin = builtin_launch(p, routes);
  if (!table || table->candidate_count(p.dtype, BLayout::col) == 0) return builtin;
  const Problem q{p.dtype, BLayout::col, p.seqlen_q, p.seqlen_k, p.head_dim, p.batch, p.heads_q, p.heads_kv, p.causal};
  double builtin_us = 0, best_us = 0;
  AttentionLaunch best{-1, 1};
  for (const Prediction& r : table->explain(q)) {
    const AttentionLaunch how{r.variant, table->table().configs[r.config].splits};
    const bool copies = routes.cudnn_copies && find_attention_variant(how.variant)->schedule == Schedule::cudnn;
    const double us = r.predicted_us + (copies ? kCudnnCopyUs : 0.0);
    if (how.variant == builtin.variant && how.splits == builtin.splits) builtin_us = us;
    if ((best.variant < 0 || us < best_us) && runs(p, how, routes)) best = how, best_us = us;
  }
  if (builtin.variant < 0) return best.variant >= 0 ? best : builtin;  // no compiled FMHA variant of its own
  return builtin_us > (1 + kTableMargin) * best_us && best.variant >= 0 ? best : builtin;
}

}  // namespace

// NOTES: kept per thread, so the eager path takes no lock. Decode's key count grows by one each step, so
// from 128 keys on the choice is made for the count rounded down to whole 64-key tiles: still valid (each
// split keeps a whole KV tile), and reused by the next steps.
AttentionLaunch attention_choice(const AttentionProblem& p, const Selector* table, const AttentionRoutes& routes) {
  thread_local std::unordered_map<ChoiceKey, AttentionLaunch, ChoiceKeyHash> cache;
  AttentionProblem rounded = p;
  if (p.seqlen_q == 1 && p.seqlen_k >= 128) rounded.seqlen_k = p.seqlen_k / 64 * 64;
  const int64_t device = detail::current_device_info().device;
  const ChoiceKey key{{device, int64_t(reinterpret_cast<uintptr_t>(table)), int64_t(p.dtype), p.batch, p.seqlen_q,
                       rounded.seqlen_k, int64_t(p.heads_q) << 32 | p.heads_kv, p.head_dim, p.causal,
                       attention_kv_splittable(p), routes.cudnn | routes.paged << 1 | routes.cudnn_copies << 2}};
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  if (cache.size() >= kMaxCachedChoices) cache.clear();
  return cache[key] = uncached_choice(rounded, table, routes);
}

}  // namespace wavetune

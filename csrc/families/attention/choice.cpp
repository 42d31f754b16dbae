// The attention family's run-time choices (attention.h, choose): for attention() between its built-in model and
// its tuned table, for the paged kernels their wave model; one policy for every caller, C++ and Python.
#include <array>
#include <cstdint>
#include <functional>
#include <unordered_map>

#include "attention_ops.h"
#include "choice_rules.h"
#include "paged_ops.h"
#include "wavetune/attention.h"
#include "wavetune/attention_heuristic.h"
#include "wavetune/errors.h"
#include "wavetune/lookup.h"

namespace wavetune {
namespace {

// The choice's constants (choice_rules.h; the [model] table of sm90_attention.toml).
constexpr AttentionModel kModel{};
constexpr size_t kMaxCachedChoices = 4096;

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

// The candidate of a schedule (cudnn, paged) for the problem's dtype and head dim.
int32_t candidate_id(Schedule schedule, const AttentionProblem& p) {
  for (const VariantInfo& v : attention_variants()) {
    if (v.schedule == schedule && v.dtype == p.dtype && v.tile_k == p.head_dim) return v.id;
  }
  WAVETUNE_INVALID("no ", to_string(schedule), " attention candidate for head_dim ", p.head_dim);
}

Launch builtin_launch(const AttentionProblem& p, const AttentionRoutes& routes) {
  if (detail::builtin_prefers_cudnn(p, routes, kModel)) return kv_split_launch(candidate_id(Schedule::cudnn, p), 1);
  if (routes.paged && p.seqlen_q == 1) return kv_split_launch(candidate_id(Schedule::paged, p), 1);
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
bool runs(const AttentionProblem& p, const Launch& how, const AttentionRoutes& routes) {
  const VariantInfo* v = find_attention_variant(how.variant);
  const bool unsplit = how.micro.splits == 1;
  if (v && v->schedule == Schedule::cudnn) return routes.cudnn && unsplit && detail::cudnn_mask_fits(p);
  if (v && v->schedule == Schedule::paged) return routes.paged && unsplit && p.seqlen_q == 1;
  const bool library_runs = (routes.paged && p.seqlen_q == 1) || (routes.cudnn && detail::cudnn_mask_fits(p));
  return !library_runs && attention_launch_error(p, how).empty();
}

// NOTES: cuDNN writes a tensor of its own, and copying it into the caller's output is one more launch:
// 1-2 us at decode sizes (H100 and H200, docs/attention.md). Tables price cuDNN as a call without an output
// given runs it, so a caller that copies pays cudnn_copy_us too. KV splits also depend on the strides
// (attention_launch_error), so a table's config must be checked against the problem (runs).
Launch uncached_choice(const AttentionProblem& p, const Selector* table, const AttentionRoutes& routes) {
  const Launch builtin = builtin_launch(p, routes);
  if (!table || table->candidate_count(p.dtype, BLayout::col) == 0) return builtin;
  double builtin_us = 0, best_us = 0;
  Launch best = kv_split_launch(-1, 1);
  for (const Prediction& r : table->explain(attention_lookup_problem(p.dtype, detail::shape_of(p), p.head_dim))) {
    const Launch how = kv_split_launch(r.variant, table->table().configs[r.config].splits);
    const bool copies = routes.cudnn_copies && find_attention_variant(how.variant)->schedule == Schedule::cudnn;
    const double us = r.predicted_us + (copies ? kModel.cudnn_copy_us : 0.0);
    if (how.variant == builtin.variant && how.micro.splits == builtin.micro.splits) builtin_us = us;
    if ((best.variant < 0 || us < best_us) && runs(p, how, routes)) best = how, best_us = us;
  }
  if (builtin.variant < 0) return best.variant >= 0 ? best : builtin;  // no compiled FMHA variant of its own
  return detail::table_overrides(builtin_us, best_us, kModel) && best.variant >= 0 ? best : builtin;
}

}  // namespace

// NOTES: kept per thread, so the eager path takes no lock. Decode's key count grows by one each step, so
// from 128 keys on the choice is made for the count rounded down to whole 64-key tiles: still valid (each
// split keeps a whole KV tile), and reused by the next steps.
// NOTES: a batch-invariant choice is the kernel chosen for one sequence, unsplit: the FMHA's KV splits take a
// sequence's keys in chunks at batch 1 and strided across the splits at larger batches (decode_call, launch.cu),
// two orders, and the paged route takes its own batch-invariant choice. cuDNN's attention picks its kernel and
// splits by the batch, so it is left out.
Launch choose(const AttentionProblem& p, const Selector* table, const AttentionRoutes& routes,
              const ChoiceOptions& options) {
  if (options.batch_invariance != BatchInvariance::off) {
    AttentionProblem one = p;
    one.batch = 1;
    AttentionRoutes without_cudnn = routes;
    without_cudnn.cudnn = without_cudnn.cudnn_copies = false;
    return kv_split_launch(choose(one, table, without_cudnn).variant, 1);
  }
  thread_local std::unordered_map<ChoiceKey, Launch, ChoiceKeyHash> cache;
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

Launch choose(const PagedAttentionProblem& p, const Selector* table, const ChoiceOptions& options) {
  if (table) {
    WAVETUNE_INVALID("the paged attention kernels have no tables of their own (attention tables price them through ",
                     "choose(AttentionProblem) with the paged route): their choice takes none (pass nullptr)");
  }
  if (options.batch_invariance == BatchInvariance::off) return detail::paged_choice(p);
  const std::string error = paged_attention_problem_error(p);
  if (!error.empty()) WAVETUNE_INVALID(error);
  return kv_split_launch(detail::paged_model_choice(detail::paged_invariant_reference(p)).variant, 1);
}

}  // namespace wavetune

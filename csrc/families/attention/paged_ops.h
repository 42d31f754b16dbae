// Internal interface between the paged attention launch (paged_launch.cu) and its host-only parts (registry.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "device.h"
#include "paged_model.h"
#include "variant_registry.h"
#include "wavetune/attention.h"

namespace wavetune::detail {

struct PagedVariantOps {
  // CTAs of this kernel resident per SM (its shared memory and registers), read once per device.
  int32_t (*ctas_per_sm)(const DeviceInfo&);
  // CTAs of this kernel resident at once in clusters of `cluster` (2 to kPagedAttentionMaxClusterSplits), read once
  // per device; 0 for other sizes.
  int64_t (*cluster_ctas)(const DeviceInfo&, int32_t cluster);
  void (*run)(const PagedAttentionProblem&, int32_t splits, void* workspace, const DeviceInfo&, Stream);
};

// The compiled kernels (paged_launch.cu), ids from 0; none without CUDA.
std::vector<VariantRegistry<PagedVariantOps>::Entry> paged_variant_entries();
// Registry (registry.cpp): the kernel of this id, nullptr when not compiled in.
const VariantRegistry<PagedVariantOps>::Entry* paged_variant(int32_t id);
// The kernel and KV splits choose takes for a paged problem (attention.h; paged_launch.cu); paged_model_choice the
// same for a problem already checked, or made up (paged_invariant_reference).
Launch paged_choice(const PagedAttentionProblem& p);
Launch paged_model_choice(const PagedAttentionProblem& p);

// The problem whose kernel the batch-invariant choice takes (choose, attention.h): one decode sequence of
// kPagedInvariantReferenceKeys keys, with p's heads, head dim, dtype and mask.
inline PagedAttentionProblem paged_invariant_reference(const PagedAttentionProblem& p) {
  PagedAttentionProblem one = p;
  one.batch = 1;
  one.max_seq_len = kPagedInvariantReferenceKeys;
  one.seq_lens = one.q_starts = one.key_starts = nullptr;
  one.max_q_len = 1;
  one.q_tokens = 0;
  one.total_keys = 0;
  return one;
}

// The launch's workspace: the splits' partial outputs and log-sum-exps (splits > 1), then the sequences'
// order (kMaxOrderedBatch >= batch >= 2: int32, longest first), at these byte offsets.
constexpr int32_t kMaxOrderedBatch = 1024;
struct PagedWorkspace {
  size_t order, bytes;
};
PagedWorkspace paged_workspace(const PagedAttentionProblem& p, const PagedSplits& s);

}  // namespace wavetune::detail

// The compiled attention variants, as listed by the generated attention_registry.inc (see
// python/wavetune/codegen/config_space.py), and the problem checks that need no GPU.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "attention_ops.h"
#include "attention_registry.inc"
#include "registered.h"
#include "variant_registry.h"
#include "wavetune/attention.h"
#include "wavetune/attention_heuristic.h"
#include "wavetune/errors.h"
#include "wavetune/family.h"

namespace wavetune {
namespace detail {

#define WAVETUNE_DECLARE_OPS(ID, NAME, ...) extern const AttentionVariantOps variant_##NAME;
WAVETUNE_ATTENTION_VARIANT_LIST(WAVETUNE_DECLARE_OPS)
#undef WAVETUNE_DECLARE_OPS

namespace {
// The generated FMHA variants, then the cuDNN and paged candidates (ascending ids: the list stays sorted).
VariantRegistry<AttentionVariantOps>& registry() {
  static VariantRegistry<AttentionVariantOps> list([] {
    std::vector<VariantRegistry<AttentionVariantOps>::Entry> entries{
        WAVETUNE_ATTENTION_VARIANT_LIST(WAVETUNE_REGISTRY_ENTRY)};
    for (const VariantInfo& info : attention_candidates()) entries.push_back({info, nullptr});  // no ops: not run here
    return entries;
  }());
  return list;
}
}  // namespace

const AttentionVariantOps* attention_variant_ops(int32_t id) {
  const auto* e = registry().find(id);
  return e ? e->ops : nullptr;
}

}  // namespace detail

const std::vector<VariantInfo>& attention_variants() { return detail::registry().infos(); }

const char* attention_config_space_hash() { return WAVETUNE_ATTENTION_CONFIG_SPACE_HASH; }

const VariantInfo* find_attention_variant(int32_t id) {
  const auto* e = detail::registry().find(id);
  return e ? &e->info : nullptr;
}

namespace {

// The reason a tensor cannot be read (or written) by TMA, or empty.
std::string tensor_error(const char* name, const AttentionTensor& t) {
  std::ostringstream os;
  constexpr int64_t kMaxStride = std::numeric_limits<int32_t>::max();
  if (!t.data) {
    os << name << " is a null pointer";
  } else if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) {
    os << name << " must be 16-byte aligned for TMA; a sliced view may not be: use .contiguous()";
  } else if (t.batch_stride % 8 || t.seq_stride % 8 || t.head_stride % 8) {
    os << name << "'s strides (" << t.batch_stride << ", " << t.seq_stride << ", " << t.head_stride
       << ") must be multiples of 8 elements: TMA moves 16-byte rows";
  } else if (t.batch_stride < 0 || t.seq_stride < 0 || t.head_stride < 0 || t.batch_stride > kMaxStride ||
             t.seq_stride > kMaxStride || t.head_stride > kMaxStride) {
    os << name << "'s strides (" << t.batch_stride << ", " << t.seq_stride << ", " << t.head_stride
       << ") must be non-negative and below 2^31 elements (CUTLASS's FMHA strides are 32-bit)";
  }
  return os.str();
}

}  // namespace

std::string attention_problem_error(const AttentionProblem& p) {
  std::ostringstream os;
  if (p.batch < 1 || p.seqlen_q < 1 || p.seqlen_k < 1 || p.heads_q < 1 || p.heads_kv < 1) {
    os << "batch, seqlen_q, seqlen_k and the head counts must be positive, got batch=" << p.batch
       << " seqlen_q=" << p.seqlen_q << " seqlen_k=" << p.seqlen_k << " heads_q=" << p.heads_q
       << " heads_kv=" << p.heads_kv;
  } else if (p.heads_q % p.heads_kv != 0) {
    os << "heads_q=" << p.heads_q << " must be a multiple of heads_kv=" << p.heads_kv << " (grouped-query attention)";
  } else if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) {
    os << "head_dim=" << p.head_dim << " is not supported (64, 128 or 256)";
  } else if (p.causal && p.seqlen_q > p.seqlen_k) {
    os << "a causal mask needs seqlen_q <= seqlen_k (the queries are the last seqlen_q of the keys' positions), "
       << "got seqlen_q=" << p.seqlen_q << " seqlen_k=" << p.seqlen_k;
  } else if (!(p.scale > 0.0f) || p.scale == std::numeric_limits<float>::infinity()) {
    os << "scale must be positive and finite, got " << p.scale;
  }
  for (const auto& [name, t] : {std::pair{"q", p.q}, {"k", p.k}, {"v", p.v}, {"out", p.out}}) {
    if (os.tellp() == 0) os << tensor_error(name, t);
  }
  return os.str();
}

// NOTES: with batch > 1, a split's keys are a batch-mode stride of CUTLASS's kernel folded into the head
// mode (index head + heads_kv * split), which needs each key's heads side by side: seq_stride ==
// heads_kv * head_stride, true of [batch, seq, heads, dim] tensors and of a KV cache sliced along seq.
bool attention_kv_splittable(const AttentionProblem& p) {
  if (p.seqlen_q != 1) return false;
  if (p.batch == 1) return true;
  return p.k.seq_stride == p.heads_kv * p.k.head_stride && p.v.seq_stride == p.heads_kv * p.v.head_stride;
}

std::string attention_launch_error(const AttentionProblem& p, const AttentionLaunch& how) {
  std::ostringstream os;
  const VariantInfo* v = find_attention_variant(how.variant);
  if (!v) {
    os << "attention variant id " << how.variant << " is not compiled into this build; "
       << "wavetune.attention_configs() lists the compiled ones";
  } else if (v->schedule == Schedule::cudnn) {
    os << "attention candidate " << v->name << " is cuDNN's attention, which the caller runs (wavetune.attention "
       << "through PyTorch's SDPA), not wavetune::attention";
  } else if (v->schedule == Schedule::paged) {
    os << "attention candidate " << v->name << " is the paged decode kernel: run it with paged_attention "
       << "(paged_attention.h), not wavetune::attention";
  } else if (v->dtype != p.dtype) {
    os << "attention variant " << v->name << " takes " << to_string(v->dtype) << ", the problem is " << to_string(p.dtype);
  } else if (v->tile_k != p.head_dim) {
    os << "attention variant " << v->name << " is for head_dim " << v->tile_k << ", the problem has " << p.head_dim;
  } else if (how.splits < 1 || how.splits > kMaxAttentionSplits) {
    os << "splits must be 1 to " << kMaxAttentionSplits << ", got " << how.splits;
  } else if (how.splits > 1 && p.seqlen_q != 1) {
    os << "KV splits are for decode (seqlen_q == 1), got seqlen_q=" << p.seqlen_q;
  } else if (how.splits > 1 && p.seqlen_k / how.splits < 1) {
    os << "splits=" << how.splits << " exceeds seqlen_k=" << p.seqlen_k;
  } else if (how.splits > 1 && std::max(p.k.seq_stride, p.v.seq_stride) * how.splits > std::numeric_limits<int32_t>::max()) {
    os << "splits=" << how.splits << " times the keys' seq_stride exceeds 2^31 elements (CUTLASS's FMHA strides are 32-bit)";
  } else if (how.splits > 1 && !attention_kv_splittable(p)) {
    os << "KV splits with batch > 1 need k and v with seq_stride == heads_kv * head_stride "
       << "([batch, seq, heads, dim] with the heads side by side)";
  }
  return os.str();
}

size_t attention_workspace_bytes(const AttentionProblem& p, int32_t splits) {
  return detail::AttentionWorkspace(p, std::max(splits, 1)).total;
}

namespace {
const KernelFamily kAttention{"attention", &attention_variants, &attention_config_space_hash,
                              [](const VariantInfo* infos, const void* const* ops, int32_t count) {
                                return detail::registry().add(infos, ops, count);
                              }};
const detail::Registration<KernelFamily> registration(&kAttention);
}  // namespace

}  // namespace wavetune

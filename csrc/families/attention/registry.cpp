// The attention family's paged kernels (paged_variants.h), with ids of their own; the
// cuDNN and paged candidates of the FMHA registry (which is generated from cutlass_configs/sm90_attention.toml's
// [family] table); the paged launch's split arithmetic and the problem checks that need no GPU.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "attention_ops.h"
#include "device.h"
#include "paged_ops.h"
#include "wavetune/attention.h"
#include "wavetune/attention_heuristic.h"
#include "wavetune/errors.h"

namespace wavetune {
namespace detail {

std::vector<VariantRegistry<AttentionVariantOps>::Entry> attention_candidate_entries() {
  std::vector<VariantRegistry<AttentionVariantOps>::Entry> entries;
  for (const VariantInfo& info : attention_candidates()) entries.push_back({info, nullptr});  // no ops: not run here
  return entries;
}

namespace {
constexpr int32_t kMaxGridY = 65535;

// The paged kernels (paged_launch.cu), ids from 0.
VariantRegistry<PagedVariantOps>& paged_registry() {
  static VariantRegistry<PagedVariantOps> list(paged_variant_entries());
  return list;
}
}  // namespace

const VariantRegistry<PagedVariantOps>::Entry* paged_variant(int32_t id) { return paged_registry().find(id); }

PagedWorkspace paged_workspace(const PagedAttentionProblem& p, const PagedSplits& s) {
  const size_t splits_bytes =
      s.splits > 1 ? size_t(paged_query_tokens(p)) * p.heads_q * s.splits * (size_t(p.head_dim) + 1) * sizeof(float)
                   : 0;
  const bool ordered = p.batch >= 2 && p.batch <= kMaxOrderedBatch;
  return {splits_bytes, splits_bytes + (ordered ? size_t(p.batch) * sizeof(int32_t) : 0)};
}

}  // namespace detail

namespace {

// The reason positive head counts and a head dim do not fit either kind of kernel, or empty: heads_q a multiple
// of heads_kv (grouped-query attention), head_dim 64, 128 or 256.
std::string heads_error(int32_t heads_q, int32_t heads_kv, int32_t head_dim) {
  std::ostringstream os;
  if (heads_q % heads_kv != 0) {
    os << "heads_q=" << heads_q << " must be a multiple of heads_kv=" << heads_kv << " (grouped-query attention)";
  } else if (head_dim != 64 && head_dim != 128 && head_dim != 256) {
    os << "head_dim=" << head_dim << " is not supported (64, 128 or 256)";
  }
  return os.str();
}

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
  } else if (const std::string heads = heads_error(p.heads_q, p.heads_kv, p.head_dim); !heads.empty()) {
    os << heads;
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

std::string attention_launch_error(const AttentionProblem& p, const Launch& how) {
  const int32_t splits = how.micro.splits;
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
       << "(attention.h), not wavetune::attention";
  } else if (const std::string arch = detail::arch_error(*v); !arch.empty()) {
    os << "attention " << arch;
  } else if (v->dtype != p.dtype) {
    os << "attention variant " << v->name << " takes " << to_string(v->dtype) << ", the problem is " << to_string(p.dtype);
  } else if (v->tile_k != p.head_dim) {
    os << "attention variant " << v->name << " is for head_dim " << v->tile_k << ", the problem has " << p.head_dim;
  } else if (splits < 1 || splits > kMaxAttentionSplits) {
    os << "splits must be 1 to " << kMaxAttentionSplits << ", got " << splits;
  } else if (splits > 1 && p.seqlen_q != 1) {
    os << "KV splits are for decode (seqlen_q == 1), got seqlen_q=" << p.seqlen_q;
  } else if (splits > 1 && p.seqlen_k / splits < 1) {
    os << "splits=" << splits << " exceeds seqlen_k=" << p.seqlen_k;
  } else if (splits > 1 && std::max(p.k.seq_stride, p.v.seq_stride) * splits > std::numeric_limits<int32_t>::max()) {
    os << "splits=" << splits << " times the keys' seq_stride exceeds 2^31 elements (CUTLASS's FMHA strides are 32-bit)";
  } else if (splits > 1 && !attention_kv_splittable(p)) {
    os << "KV splits with batch > 1 need k and v with seq_stride == heads_kv * head_stride "
       << "([batch, seq, heads, dim] with the heads side by side)";
  }
  return os.str();
}

size_t attention_workspace_bytes(const AttentionProblem& p, int32_t splits) {
  return detail::AttentionWorkspace(p, std::max(splits, 1)).total;
}

const std::vector<VariantInfo>& paged_attention_variants() { return detail::paged_registry().infos(); }

std::string paged_attention_problem_error(const PagedAttentionProblem& p) {
  auto misaligned = [](const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes != 0; };
  auto whole_chunks = [](int64_t stride) { return stride % 8 == 0 && stride >= 0; };
  std::ostringstream os;
  if (p.batch < 1 || p.heads_q < 1 || p.heads_kv < 1 || p.max_seq_len < 0 || p.page_size < 1) {
    os << "batch, the head counts and page_size must be positive and max_seq_len non-negative, got batch=" << p.batch
       << " heads_q=" << p.heads_q << " heads_kv=" << p.heads_kv << " page_size=" << p.page_size
       << " max_seq_len=" << p.max_seq_len;
  } else if (const std::string heads = heads_error(p.heads_q, p.heads_kv, p.head_dim); !heads.empty()) {
    os << heads;
  } else if (p.batch > detail::kMaxGridY || p.heads_kv > detail::kMaxGridY) {
    os << "batch and heads_kv must be at most " << detail::kMaxGridY << " (grid limits), got " << p.batch << " and "
       << p.heads_kv;
  } else if (p.dtype != DType::bf16 && p.dtype != DType::fp16) {
    os << "q, the caches and out must be bf16 or fp16";
  } else if (p.max_q_len < 1 || p.q_tokens < 0 || (!p.q_starts && p.max_q_len != 1)) {
    os << "max_q_len must be positive (1 without q_starts: one query per sequence) and q_tokens non-negative, got "
       << "max_q_len=" << p.max_q_len << " q_tokens=" << p.q_tokens;
  } else if (int64_t(p.max_q_len) * (p.heads_q / p.heads_kv) > int64_t(1) << 30) {
    os << "max_q_len=" << p.max_q_len << " times " << p.heads_q / p.heads_kv << " query heads per KV head is too many rows";
  } else if (p.q_starts && p.q_tokens < 1) {
    os << "with q_starts, q_tokens must give the rows of q and out (they size the split outputs and their merge)";
  } else if (p.total_keys < 0) {
    os << "total_keys must be non-negative (0: batch x max_seq_len), got " << p.total_keys;
  } else if (p.key_starts && p.block_table) {
    os << "ragged keys (key_starts) take no block table";
  } else if (!p.block_table && !p.key_starts && p.page_size < p.max_seq_len) {
    os << "without a block table each sequence is one page: page_size=" << p.page_size
       << " must hold max_seq_len=" << p.max_seq_len;
  } else if (p.block_table && p.table_stride < (int64_t(p.max_seq_len) + p.page_size - 1) / p.page_size) {
    os << "the block table's rows (" << p.table_stride << " pages) must cover max_seq_len=" << p.max_seq_len
       << " keys of pages of " << p.page_size;
  } else if (!p.q || !p.k_cache || !p.v_cache || !p.out) {
    os << "null q, cache or out pointer";
  } else if (misaligned(p.q, 16) || misaligned(p.k_cache, 16) || misaligned(p.v_cache, 16) || misaligned(p.out, 2) ||
             misaligned(p.block_table, 4) || misaligned(p.seq_lens, 4) || misaligned(p.q_starts, 4) ||
             misaligned(p.key_starts, 4)) {
    os << "q and the caches must be 16-byte aligned (16-byte loads; a sliced view may not be: use .contiguous()), "
          "out 2-byte and the table, lengths and starts 4-byte aligned";
  } else if (!whole_chunks(p.q_batch_stride) || !whole_chunks(p.q_head_stride) || !whole_chunks(p.page_stride) ||
             !whole_chunks(p.row_stride) || !whole_chunks(p.head_stride)) {
    os << "the strides of q (" << p.q_batch_stride << ", " << p.q_head_stride << ") and of the caches ("
       << p.page_stride << ", " << p.row_stride << ", " << p.head_stride
       << ") must be non-negative multiples of 8 elements: rows move in 16-byte chunks";
  } else if (p.out_batch_stride < 0 || p.out_head_stride < 0) {
    os << "out's strides must be non-negative";
  }
  return os.str();
}

std::string paged_attention_launch_error(const PagedAttentionProblem& p, const Launch& how) {
  const auto* variant = detail::paged_variant(how.variant);
  std::ostringstream os;
  if (!variant) {
    os << "no paged attention kernel of id " << how.variant << " in this build (paged_attention_variants)";
  } else if (variant->info.dtype != p.dtype || variant->info.tile_k != p.head_dim) {
    os << "kernel " << variant->info.name << " takes " << to_string(variant->info.dtype) << " with head dim "
       << variant->info.tile_k << ", not " << to_string(p.dtype) << " with " << p.head_dim;
  } else if (const std::string arch = detail::arch_error(variant->info); !arch.empty()) {
    os << "paged attention " << arch;
  } else if (how.micro.splits < 1 || how.micro.splits > kPagedAttentionMaxSplits) {
    os << "splits must be in [1, " << kPagedAttentionMaxSplits << "], got " << how.micro.splits;
  }
  return os.str();
}

size_t paged_attention_workspace_bytes(const PagedAttentionProblem& p, const Launch& how) {
  const auto* variant = detail::paged_variant(how.variant);
  if (!variant) return 0;
  return detail::paged_workspace(p, detail::paged_splits(p, variant->info.tile_n, how.micro.splits)).bytes;
}

}  // namespace wavetune

// The paged attention's compiled kernels, the catalog's hash, the split arithmetic and the problem checks
// that need no GPU.
#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "paged_ops.h"
#include "paged_variants.h"
#include "registered.h"
#include "variant_registry.h"
#include "wavetune/errors.h"
#include "wavetune/family.h"
#include "wavetune/paged_attention.h"

namespace wavetune {
namespace detail {
namespace {

constexpr int32_t kMaxGridY = 65535;

VariantRegistry<PagedVariantOps>& registry() {
  static VariantRegistry<PagedVariantOps> list(paged_variant_entries());
  return list;
}

}  // namespace

const VariantRegistry<PagedVariantOps>::Entry* paged_variant(int32_t id) { return registry().find(id); }

PagedSplits paged_splits(const PagedAttentionProblem& p, int32_t step_keys, int32_t requested) {
  const int32_t steps = std::max(1, (p.max_seq_len + step_keys - 1) / step_keys);
  const int32_t per_split = (steps + std::clamp(requested, 1, steps) - 1) / std::clamp(requested, 1, steps);
  return {(steps + per_split - 1) / per_split, per_split * step_keys};
}

PagedWorkspace paged_workspace(const PagedAttentionProblem& p, const PagedSplits& s) {
  const size_t splits_bytes =
      s.splits > 1 ? size_t(paged_query_tokens(p)) * p.heads_q * s.splits * (size_t(p.head_dim) + 1) * sizeof(float)
                   : 0;
  const bool ordered = p.batch >= 2 && p.batch <= kMaxOrderedBatch;
  return {splits_bytes, splits_bytes + (ordered ? size_t(p.batch) * sizeof(int32_t) : 0)};
}

}  // namespace detail

const std::vector<VariantInfo>& paged_attention_variants() { return detail::registry().infos(); }

const char* paged_attention_config_space_hash() {
#define WAVETUNE_PAGED_NAME(DTYPE, HEAD_DIM, WARPS, SPLIT, STEP_KEYS, NAME) NAME,
  static const std::string hash = detail::catalog_hash({WAVETUNE_PAGED_VARIANTS(WAVETUNE_PAGED_NAME)});
#undef WAVETUNE_PAGED_NAME
  return hash.c_str();
}

std::string paged_attention_problem_error(const PagedAttentionProblem& p) {
  auto misaligned = [](const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes != 0; };
  auto whole_chunks = [](int64_t stride) { return stride % 8 == 0 && stride >= 0; };
  std::ostringstream os;
  if (p.batch < 1 || p.heads_q < 1 || p.heads_kv < 1 || p.max_seq_len < 0 || p.page_size < 1) {
    os << "batch, the head counts and page_size must be positive and max_seq_len non-negative, got batch=" << p.batch
       << " heads_q=" << p.heads_q << " heads_kv=" << p.heads_kv << " page_size=" << p.page_size
       << " max_seq_len=" << p.max_seq_len;
  } else if (p.heads_q % p.heads_kv != 0) {
    os << "heads_q=" << p.heads_q << " must be a multiple of heads_kv=" << p.heads_kv << " (grouped-query attention)";
  } else if (p.batch > detail::kMaxGridY || p.heads_kv > detail::kMaxGridY) {
    os << "batch and heads_kv must be at most " << detail::kMaxGridY << " (grid limits), got " << p.batch << " and "
       << p.heads_kv;
  } else if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) {
    os << "head_dim must be 64, 128 or 256, got " << p.head_dim;
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

std::string paged_attention_launch_error(const PagedAttentionProblem& p, const PagedAttentionLaunch& how) {
  const auto* variant = detail::paged_variant(how.variant);
  std::ostringstream os;
  if (!variant) {
    os << "no paged attention kernel of id " << how.variant << " in this build (paged_attention_variants)";
  } else if (variant->info.dtype != p.dtype || variant->info.tile_k != p.head_dim) {
    os << "kernel " << variant->info.name << " takes " << to_string(variant->info.dtype) << " with head dim "
       << variant->info.tile_k << ", not " << to_string(p.dtype) << " with " << p.head_dim;
  } else if (how.splits < 1 || how.splits > kPagedAttentionMaxSplits) {
    os << "splits must be in [1, " << kPagedAttentionMaxSplits << "], got " << how.splits;
  }
  return os.str();
}

size_t paged_attention_workspace_bytes(const PagedAttentionProblem& p, const PagedAttentionLaunch& how) {
  const auto* variant = detail::paged_variant(how.variant);
  if (!variant) return 0;
  return detail::paged_workspace(p, detail::paged_splits(p, variant->info.tile_n, how.splits)).bytes;
}

namespace {
const KernelFamily kPagedAttention{"paged_attention", &paged_attention_variants, &paged_attention_config_space_hash,
                                   [](const VariantInfo*, const void* const*, int32_t) { return int32_t(0); }};
const detail::Registration<KernelFamily> registration(&kPagedAttention);
}  // namespace

}  // namespace wavetune

// The layer ops as a kernel family (fixed kernels: no variants, no tables) and the checks that need no GPU.
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "registered.h"
#include "variant_registry.h"
#include "wavetune/family.h"
#include "wavetune/layer_ops.h"

namespace wavetune {
namespace {

bool misaligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 != 0; }

template <typename Heads>
bool chunked(const Heads& v) {
  return v.batch_stride % 8 == 0 && v.head_stride % 8 == 0 && v.seq_stride % 8 == 0 && !misaligned(v.data);
}

// rotary_problem_error, with k_out required only where the kernel writes it.
std::string rotary_error(const RotaryProblem& p, bool writes_k_out) {
  std::ostringstream os;
  if (p.batch < 0 || p.seq < 0 || p.heads_q < 1 || p.heads_k < 1) {
    os << "batch and seq must be non-negative and the head counts positive, got batch=" << p.batch
       << " seq=" << p.seq << " heads_q=" << p.heads_q << " heads_k=" << p.heads_k;
  } else if (p.head_dim < 16 || p.head_dim % 16 != 0) {
    os << "head_dim must be a positive multiple of 16 (8-element halves), got " << p.head_dim;
  } else if (int64_t(p.batch) * p.seq > INT32_MAX) {
    os << "batch x seq must fit the grid, got " << int64_t(p.batch) * p.seq;
  } else if (!p.q.data || !p.k.data || !p.q_out.data || (writes_k_out && !p.k_out.data) || !p.cos || !p.sin) {
    os << "null pointer";
  } else if (!chunked(p.q) || !chunked(p.k) || !chunked(p.q_out) || (writes_k_out && !chunked(p.k_out)) ||
             misaligned(p.cos) || misaligned(p.sin) || p.cos_batch_stride % 8 != 0 || p.cos_seq_stride % 8 != 0) {
    os << "q, k, cos, sin and the outputs must be 16-byte aligned with strides in multiples of 8 elements";
  }
  return os.str();
}

}  // namespace

std::string rows_error(const void* x, int64_t x_row_stride, const void* out, int64_t out_row_stride, int32_t rows,
                       int32_t width) {
  std::ostringstream os;
  if (rows < 0 || width < 8 || width % 8 != 0) {
    os << "rows must be non-negative and the width a positive multiple of 8, got rows=" << rows << " width=" << width;
  } else if (x_row_stride % 8 != 0 || out_row_stride % 8 != 0 || x_row_stride < width || out_row_stride < width) {
    os << "row strides must be multiples of 8 of at least the width, got " << x_row_stride << " and "
       << out_row_stride;
  } else if (!x || !out || misaligned(x) || misaligned(out)) {
    os << "x and out must be 16-byte aligned (a sliced view may not be: use .contiguous())";
  }
  return os.str();
}

std::string rotary_problem_error(const RotaryProblem& p) { return rotary_error(p, true); }

std::string cache_write_error(const RotaryProblem& p, const StaticCacheWrite& c) {
  if (std::string error = rotary_error(p, false); !error.empty()) return error;
  std::ostringstream os;
  if (c.capacity < 0) {
    os << "the cache's capacity must be non-negative, got " << c.capacity;
  } else if (!c.values.data || !c.key_cache || !c.value_cache || !c.length || !c.arrivals) {
    os << "null pointer";
  } else if (!chunked(c.values) || misaligned(c.key_cache) || misaligned(c.value_cache) ||
             c.cache_batch_stride % 8 != 0 || c.cache_head_stride % 8 != 0 || c.cache_seq_stride % 8 != 0) {
    os << "the values and the cache must be 16-byte aligned with strides in multiples of 8 elements";
  } else if (reinterpret_cast<uintptr_t>(c.length) % 8 != 0 || reinterpret_cast<uintptr_t>(c.arrivals) % 4 != 0) {
    os << "length and arrivals must be aligned to their sizes (int64 and uint32)";
  }
  return os.str();
}

std::string moe_routing_error(const MoeRouting& r) {
  std::ostringstream os;
  if (r.tokens < 0 || r.top_k < 1 || r.experts < 1 || r.experts > kMoeMaxExperts) {
    os << "tokens must be non-negative, top_k positive and the experts 1 to " << kMoeMaxExperts
       << ", got tokens=" << r.tokens << " top_k=" << r.top_k << " experts=" << r.experts;
  } else if (int64_t(r.tokens) * r.top_k > INT32_MAX) {
    os << "tokens x top_k must fit 32 bits, got " << int64_t(r.tokens) * r.top_k;
  } else if (!r.expert_ids && r.tokens > 0) {
    os << "null expert ids";
  }
  return os.str();
}

namespace {

const std::vector<VariantInfo>& no_variants() {
  static const std::vector<VariantInfo> none;
  return none;
}

const char* kernels_hash() {
  static const std::string hash = detail::catalog_hash(
      {"rms_norm", "add_rms_norm", "silu_and_mul", "rotary_embedding", "rotary_cache_write", "moe_align",
       "moe_gather", "moe_combine"});
  return hash.c_str();
}

const KernelFamily kLayerOps{"layer_ops", &no_variants, &kernels_hash,
                             [](const VariantInfo*, const void* const*, int32_t) { return int32_t(0); }};
const detail::Registration<KernelFamily> registration(&kLayerOps);

}  // namespace
}  // namespace wavetune

// The problem checks that need no GPU and the built-in heuristic's buckets (the generated registry.inc; the
// registry of the compiled variants is generated from cutlass_configs/sm90_gemm.toml's [family] table).
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "registry.inc"
#include "variant_ops.h"
#include "wavetune/errors.h"
#include "wavetune/kernels.h"

namespace wavetune {

const char* detail::kernel_set_name() { return WAVETUNE_KERNEL_SET_NAME; }

namespace {
// What the epilogue needs of the sizes (types.h, Epilogue); empty when it has what it needs.
std::string epilogue_shape_error(const GemmProblem& p) {
  std::ostringstream os;
  if (p.epilogue < Epilogue::none || p.epilogue > Epilogue::silu_and_mul) {
    os << "unknown epilogue " << int32_t(p.epilogue) << " (none, residual or silu_and_mul)";
  } else if (p.epilogue == Epilogue::silu_and_mul && p.n % 16 != 0) {
    os << "the silu_and_mul epilogue takes N=" << p.n << " columns of gate and up side by side: N must be a "
       << "multiple of 16 (each half a multiple of 8)";
  } else if (p.epilogue == Epilogue::residual && (p.ldr < p.n || p.ldr % 8 != 0)) {
    os << "the residual's leading dimension ldr=" << p.ldr << " must be at least N=" << p.n
       << " and a multiple of 8 elements (16 bytes); make the residual contiguous";
  }
  return os.str();
}
}  // namespace

std::string shape_error(const GemmProblem& p) {
  std::string layout = p.b_layout == BLayout::col ? "column-major" : "row-major";
  int64_t b_min_ld = p.b_layout == BLayout::col ? p.k : p.n;
  std::ostringstream os;
  if (p.m < 1 || p.n < 1 || p.k < 1) {
    os << "M, N, K must be positive, got M=" << p.m << " N=" << p.n << " K=" << p.k;
  } else if (p.k % 8 != 0 || p.n % 8 != 0) {
    os << "K=" << p.k << " and N=" << p.n << " must be multiples of 8: the kernels move 16-byte rows with TMA "
       << "(pad K and N to a multiple of 8, or use torch.matmul for this shape)";
  } else if (std::string epilogue = epilogue_shape_error(p); !epilogue.empty()) {
    os << epilogue;
  } else if (p.lda < p.k || p.ldb < b_min_ld || p.ldd < output_columns(p)) {
    os << "leading dimensions too small: lda=" << p.lda << " (needs >= K=" << p.k << "), ldb=" << p.ldb
       << " (needs >= " << b_min_ld << " for " << layout << " B), ldd=" << p.ldd << " (needs >= "
       << (p.epilogue == Epilogue::silu_and_mul ? "N/2=" : "N=") << output_columns(p) << ")";
  } else if (p.lda % 8 != 0 || p.ldb % 8 != 0 || p.ldd % 8 != 0) {
    os << "leading dimensions lda=" << p.lda << ", ldb=" << p.ldb << ", ldd=" << p.ldd
       << " must be multiples of 8 elements (16 bytes) for TMA; make the tensors contiguous";
  }
  return os.str();
}

std::string problem_error(const GemmProblem& p) {
  std::string error = shape_error(p);
  if (!error.empty()) return error;
  const auto misaligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 != 0; };
  std::ostringstream os;
  if (!p.a || !p.b || !p.d) {
    os << "null data pointer";
  } else if (misaligned(p.a) || misaligned(p.b) || misaligned(p.d)) {
    os << "data pointers must be 16-byte aligned for TMA (A " << (misaligned(p.a) ? "is not" : "is") << ", B "
       << (misaligned(p.b) ? "is not" : "is") << ", D " << (misaligned(p.d) ? "is not" : "is")
       << "); a sliced view may be misaligned: use .contiguous() or .clone()";
  } else if (misaligned(p.bias)) {
    os << "the bias must be 16-byte aligned (the epilogue loads it in 16-byte vectors); use bias.contiguous() "
       << "or .clone()";
  } else if (p.epilogue == Epilogue::residual && (!p.residual || misaligned(p.residual))) {
    os << "the residual epilogue needs R: a non-null, 16-byte aligned pointer (use .contiguous() or .clone())";
  } else if (p.epilogue == Epilogue::residual && p.residual == p.d && p.ldr != p.ldd) {
    os << "D is R (an in-place residual update) with another leading dimension (ldd=" << p.ldd << ", ldr=" << p.ldr
       << "): the same matrix needs the same one";
  }
  return os.str();
}

std::string detail::variant_error(const VariantInfo& v, const GemmProblem& p, const MicroParams& micro) {
  std::ostringstream os;
  if (v.dtype != p.dtype || v.b_layout != p.b_layout) {
    os << "variant " << v.name << " takes " << to_string(v.dtype) << " with " << to_string(v.b_layout)
       << "-major B, the problem is " << to_string(p.dtype) << " with " << to_string(p.b_layout) << "-major B";
  } else if (!runs_epilogue(v, p.epilogue)) {
    os << "variant " << v.name << " has no " << to_string(p.epilogue) << " epilogue (the decode GEMM's variants "
       << "run it): run the GEMM, then the " << (p.epilogue == Epilogue::residual ? "addition" : "silu_and_mul");
  } else if (v.scheduler == TileScheduler::persistent && micro.decomposition != Decomposition::heuristic &&
             micro.decomposition != Decomposition::data_parallel) {
    os << "variant " << v.name << " uses the persistent (data-parallel) tile scheduler; decomposition "
       << to_string(micro.decomposition) << " needs a stream_k variant";
  } else if (v.schedule == Schedule::multistage && micro.decomposition == Decomposition::stream_k) {
    os << "variant " << v.name << " runs one CTA per tile and K split; decomposition stream_k needs a stream_k "
       << "variant";
  } else if (v.schedule == Schedule::multistage && micro.raster != Raster::heuristic) {
    os << "variant " << v.name << " visits its tiles in CUTLASS 2.x's swizzled order (max_swizzle sets it); raster "
       << to_string(micro.raster) << " needs a Hopper variant (raster heuristic here)";
  } else if (micro.splits < 1 || (micro.splits > 1 && micro.decomposition != Decomposition::split_k)) {
    os << "splits=" << micro.splits << " needs decomposition split_k (and splits >= 1)";
  } else if (micro.splits > (p.k + v.tile_k - 1) / v.tile_k) {
    os << "splits=" << micro.splits << " exceeds the " << (p.k + v.tile_k - 1) / v.tile_k << " K tiles of K=" << p.k
       << " with tile K " << v.tile_k;
  } else if (micro.max_swizzle != 1 && micro.max_swizzle != 2 && micro.max_swizzle != 4 && micro.max_swizzle != 8) {
    os << "max_swizzle=" << micro.max_swizzle << " must be 1, 2, 4 or 8";
  }
  return os.str();
}

const std::vector<FallbackBucket>& fallback_buckets() {
  // The built-in heuristic's M buckets, as data in cutlass_configs/ ([fallback]); only compiled ones.
#define WAVETUNE_FALLBACK_ROW(DT, BL, MAX_M, ID) FallbackBucket{DType::DT, BLayout::BL, MAX_M, ID},
  static const std::vector<FallbackBucket> buckets{WAVETUNE_FALLBACK_LIST(WAVETUNE_FALLBACK_ROW)};
#undef WAVETUNE_FALLBACK_ROW
  return buckets;
}

const VariantInfo* detail::bucket_variant(const GemmProblem& p) {
  for (const FallbackBucket& b : fallback_buckets()) {
    if (b.dtype == p.dtype && b.b_layout == p.b_layout && (b.max_m == 0 || p.m <= b.max_m) &&
        runs_here(*find_variant(b.variant))) {
      return find_variant(b.variant);
    }
  }
  for (const auto& v : variants()) {
    if (v.dtype == p.dtype && v.b_layout == p.b_layout && v.schedule != Schedule::cublas && runs_here(v)) return &v;
  }
  return nullptr;
}

int32_t bucket_variant(const GemmProblem& p) {
  const VariantInfo* v = detail::bucket_variant(p);
  return v ? v->id : -1;
}

int32_t default_variant(const GemmProblem& p) {
  // NOTES: with no table there is no fitted model to predict a gain over cuBLAS, the kernel torch.matmul runs,
  // so cuBLAS is kept: no GPU without a table is worse off than with PyTorch. The M buckets serve where
  // libcublas cannot be loaded.
  for (const auto& v : variants()) {
    if (v.dtype == p.dtype && v.b_layout == p.b_layout && v.schedule == Schedule::cublas && runs_here(v)) return v.id;
  }
  if (const VariantInfo* bucket = detail::bucket_variant(p)) return bucket->id;
  WAVETUNE_INVALID("no compiled variant that runs on this device takes ", to_string(p.dtype), " with ",
                   to_string(p.b_layout), "-major B (kernel set '", detail::kernel_set_name(),
                   "'): compile some with python -m wavetune build "
                   "(--table PATH: what a table chooses; --family gemm: every variant)");
}

}  // namespace wavetune

// Plain value types shared by the kernel library, the bindings and (later) the lookup engine.
// No CUDA or Python types here, so any C++ program can include it.
#pragma once

#include <cstdint>
#include <string>

// The library is built with hidden symbols; only what carries WAVETUNE_API is exported.
#if defined(_WIN32)
#define WAVETUNE_API
#else
#define WAVETUNE_API __attribute__((visibility("default")))
#endif

struct CUstream_st;

namespace wavetune {

// The same type as cudaStream_t, spelled without including the CUDA headers.
using Stream = CUstream_st*;

// Enumerator names match the vocabulary of cutlass_configs/*.toml (see python/wavetune/codegen/config_space.py):
// generated code refers to them by those names.
enum class DType : int32_t { bf16 = 0, fp16 = 1 };
// col: B[K,N] column-major, i.e. an nn.Linear weight W[N,K] row-major (x @ W.T). row: B[K,N] row-major.
enum class BLayout : int32_t { col = 0, row = 1 };
// cublas: the cuBLAS candidate, whose kernel and schedule cuBLAS picks per problem. decode: the decode
// GEMM (few tokens; its K splits are one thread-block cluster). cudnn and paged: the attention family's
// candidates that run outside its FMHA kernels, cuDNN's attention and the paged decode kernel (attention.h).
// multistage: a CUTLASS 2.x kernel (mma.sync, a cp.async pipeline of `stages` tiles), one CTA per tile and K split.
enum class Schedule : int32_t { cooperative = 0, pingpong = 1, cublas = 2, decode = 3, cudnn = 4, paged = 5,
                                multistage = 6 };
// data_parallel: one CTA per tile, scheduled by the hardware (the attention family's non-persistent kernels).
enum class TileScheduler : int32_t { persistent = 0, stream_k = 1, data_parallel = 2 };

// Run-time ("micro") parameters: they change how a variant walks its tiles, not the variant.
enum class Decomposition : int32_t { heuristic = 0, data_parallel = 1, split_k = 2, stream_k = 3 };
enum class Raster : int32_t { heuristic = 0, along_m = 1, along_n = 2 };

// Names, in the vocabulary of the config space and of table files.
inline const char* to_string(DType v) { return v == DType::bf16 ? "bf16" : "fp16"; }
inline const char* to_string(BLayout v) { return v == BLayout::col ? "col" : "row"; }
inline const char* to_string(Schedule v) {
  switch (v) {
    case Schedule::cooperative: return "cooperative";
    case Schedule::pingpong: return "pingpong";
    case Schedule::decode: return "decode";
    case Schedule::cudnn: return "cudnn";
    case Schedule::paged: return "paged";
    case Schedule::multistage: return "multistage";
    default: return "cublas";
  }
}
inline const char* to_string(TileScheduler v) {
  switch (v) {
    case TileScheduler::persistent: return "persistent";
    case TileScheduler::stream_k: return "stream_k";
    default: return "data_parallel";
  }
}
inline const char* to_string(Decomposition v) {
  switch (v) {
    case Decomposition::data_parallel: return "data_parallel";
    case Decomposition::split_k: return "split_k";
    case Decomposition::stream_k: return "stream_k";
    default: return "heuristic";
  }
}
inline const char* to_string(Raster v) {
  switch (v) {
    case Raster::along_m: return "along_m";
    case Raster::along_n: return "along_n";
    default: return "heuristic";
  }
}

// A compiled kernel. `id` is the variant's position in the config space, stable across kernel sets; ids
// from kDecodeVariantIds on are the decode GEMM's, from kLibraryVariantIds on the cuBLAS candidates
// (present when libcublas can be loaded) and the attention family's cuDNN and paged candidates.
// With swap_ab the kernel computes D^T = B^T A^T: its tile M runs over the problem's N and its tile N
// over the problem's M, so a few tokens (decode) sit on a narrow tile side instead of wasting a wide one.
constexpr int32_t kDecodeVariantIds = 1 << 19;
constexpr int32_t kLibraryVariantIds = 1 << 20;

// The architecture a variant's code was built for (docs/kernels.md, "Architectures"): the compute capability it
// needs, as major * 10 + minor (0: a library candidate, which runs wherever its library does), and whether the
// code is architecture-specific (sm_90a: wgmma, TMA, thread-block clusters), which runs on that compute
// capability alone. Portable code (sm80: mma.sync, cp.async) runs on every later one.
struct Arch {
  int32_t cc;
  bool specific;
};
namespace arch {
constexpr Arch any{0, false};
constexpr Arch sm80{80, false};
constexpr Arch sm89{89, false};
constexpr Arch sm90a{90, true};
}  // namespace arch

// Whether code built for `a` runs on a GPU of compute capability `cc` (major * 10 + minor).
constexpr bool runs_on(Arch a, int32_t cc) { return a.specific ? cc == a.cc : cc >= a.cc; }

// "sm90a", "sm80", "sm89", ...; "any" for a library candidate.
inline std::string to_string(Arch a) {
  return a.cc == 0 ? "any" : "sm" + std::to_string(a.cc) + (a.specific ? "a" : "");
}

struct VariantInfo {
  int32_t id;
  const char* name;
  DType dtype;
  BLayout b_layout;
  bool swap_ab;
  Schedule schedule;
  int32_t tile_m, tile_n, tile_k;
  int32_t cluster_m, cluster_n;
  TileScheduler scheduler;
  Arch arch;
};

inline bool runs_on(const VariantInfo& v, int32_t cc) { return runs_on(v.arch, cc); }

// A variant's description from its X-macro row (the generated registry lists and variant libraries).
#define WAVETUNE_VARIANT_INFO(ID, NAME, DT, BL, SWAP, SCHED, TM, TN, TK, CM, CN, TS, ARCH)                    \
  ::wavetune::VariantInfo {                                                                                   \
    ID, #NAME, ::wavetune::DType::DT, ::wavetune::BLayout::BL, SWAP, ::wavetune::Schedule::SCHED, TM, TN, TK, CM, CN, \
        ::wavetune::TileScheduler::TS, ::wavetune::arch::ARCH                                                 \
  }

struct MicroParams {
  Decomposition decomposition = Decomposition::heuristic;
  int32_t splits = 1;       // split-K factor; only with Decomposition::split_k
  Raster raster = Raster::heuristic;
  int32_t max_swizzle = 1;  // 1, 2, 4 or 8 tiles
};

// A launch configuration: what every family's `choose` returns (one overload per problem type, in the family's
// header) and what a profile times. Variant -1 means the same in every family: no wavetune variant takes the
// problem, and the caller runs its framework's op instead (cuBLAS, SDPA, torch._scaled_mm, ...). The attention
// family's KV splits (the chunks the keys are cut into, merged by their log-sum-exp) are micro.splits, with
// decomposition split_k where there are several (kv_split_launch).
struct Launch {
  int32_t variant;
  MicroParams micro;
};

// Batch-invariant choices (batch_invariance.h): whether a row's result may depend on the batch it runs in.
// reduction_order: every M of one (N, K) (tokens per expert; one sequence's keys) gets configs of one reduction
// order class, chosen per (N, K); config: one config per (N, K), for every M.
enum class BatchInvariance : int32_t { off = 0, reduction_order = 1, config = 2 };
inline const char* to_string(BatchInvariance v) {
  switch (v) {
    case BatchInvariance::reduction_order: return "reduction_order";
    case BatchInvariance::config: return "config";
    default: return "off";
  }
}

// What every family's `choose` takes beside its problem and table.
struct ChoiceOptions {
  BatchInvariance batch_invariance = BatchInvariance::off;
};

// The launch of `variant` with the keys cut into `splits` chunks (the attention family's kernels).
inline Launch kv_split_launch(int32_t variant, int32_t splits) {
  return {variant, {splits > 1 ? Decomposition::split_k : Decomposition::data_parallel, splits}};
}

// What a GEMM does with its fp32 sums (plus the bias) before it stores D (docs/kernels.md, "Decode GEMM"):
//   none: D = A B (+ bias), rounded once to the dtype.
//   residual: D = A B (+ bias) + R, the addition in fp32 and rounded once; R [m, n] row-major in the dtype with
//     leading dimension ldr. D may be R itself (same pointer and leading dimension: an in-place residual update).
//   silu_and_mul: B's n columns are a gate and an up projection side by side (the gate's n / 2 first, n a multiple
//     of 16), and D [m, n / 2] = silu(G) * U, as silu_and_mul (layer_ops.h) computes it from the stored G and U.
// Every variant runs none; the decode GEMM (Schedule::decode) runs each (runs_epilogue, kernels.h). Elsewhere a
// caller runs the GEMM and then the addition or silu_and_mul.
enum class Epilogue : int32_t { none = 0, residual = 1, silu_and_mul = 2 };
inline const char* to_string(Epilogue v) {
  switch (v) {
    case Epilogue::residual: return "residual";
    case Epilogue::silu_and_mul: return "silu_and_mul";
    default: return "none";
  }
}

// D[m,n] = A[m,k] @ B[k,n] (+ bias[n]), then `epilogue`. A and D are row-major with leading dimensions lda,
// ldd (in elements); B is column-major (ldb >= k) or row-major (ldb >= n) as b_layout says. All in `dtype`.
// The optional bias (n elements, 16-byte aligned) is added to the fp32 accumulator before the one
// rounding to `dtype`, as cuBLAS's bias epilogue does.
struct GemmProblem {
  int32_t m, n, k;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  void* d;
  int64_t ldd;
  DType dtype;
  BLayout b_layout;
  const void* bias = nullptr;
  Epilogue epilogue = Epilogue::none;
  const void* residual = nullptr;  // R of Epilogue::residual
  int64_t ldr = 0;
};

// The columns of D: n, or n / 2 where the epilogue pairs gate and up columns (Epilogue::silu_and_mul).
inline int32_t output_columns(const GemmProblem& p) {
  return p.epilogue == Epilogue::silu_and_mul ? p.n / 2 : p.n;
}

}  // namespace wavetune

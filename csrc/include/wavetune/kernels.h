// The kernel library: list the compiled GEMM variants and launch one on a caller's stream.
//
//   wavetune::GemmProblem p{m, n, k, a, k, w, k, d, n, wavetune::DType::bf16, wavetune::BLayout::col};
//   const wavetune::Launch l = wavetune::choose(p, table);             // table: a gemm Selector, or nullptr
//   size_t bytes = wavetune::gemm_workspace_bytes(p, l.variant, l.micro);  // scratch memory, often 0
//   wavetune::gemm(p, l.variant, l.micro, workspace, bytes, stream);   // D = A @ W.T
//
// Every function throws wavetune::InvalidArgument or wavetune::RuntimeError (errors.h) on failure.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "wavetune/types.h"

namespace wavetune {

// Variants compiled into this build, ordered by id. Empty when the library was built without nvcc.
WAVETUNE_API const std::vector<VariantInfo>& variants();
// The variant with this id, or nullptr when it is not compiled in.
WAVETUNE_API const VariantInfo* find_variant(int32_t id);

struct BuildInfo {
  bool kernels_compiled;
  const char* kernel_set;         // "full", "ci", ... or "none" without nvcc
  const char* config_space_hash;  // identifies cutlass_configs/ as compiled; tables are checked against it
  int cuda_version;               // CUDART_VERSION at build time, 0 without nvcc
  int cutlass_version;            // e.g. 420 for 4.2.0, 0 without nvcc
};
WAVETUNE_API BuildInfo build_info();

// Empty when the problem itself is valid (sizes, leading dimensions, 16-byte alignment, its epilogue's operands),
// else the reason and what would work. Needs no GPU.
WAVETUNE_API std::string problem_error(const GemmProblem& problem);
// The same without the data pointers: sizes and leading dimensions only.
WAVETUNE_API std::string shape_error(const GemmProblem& problem);

// Whether variant `v` runs epilogue `e` (types.h): every variant runs none, the decode GEMM each.
inline bool runs_epilogue(const VariantInfo& v, Epilogue e) {
  return e == Epilogue::none || v.schedule == Schedule::decode;
}

// Empty when `variant_id` can run `problem` with `micro` on the current device, else the reason.
WAVETUNE_API std::string why_not(const GemmProblem& problem, int32_t variant_id, const MicroParams& micro);

// Bytes of device scratch memory that `gemm` needs for this problem, variant and micro parameters on the
// current device: split-K and stream-K partials, cuBLAS's workspace; 0 for most data-parallel launches.
// It depends on the sizes, never on the data pointers.
WAVETUNE_API size_t gemm_workspace_bytes(const GemmProblem& problem, int32_t variant_id, const MicroParams& micro);

// CTAs of the variant resident per SM of the current device, from its registers and shared memory (read once per
// device): a wave of a non-persistent kernel (the multistage variants) is that many per SM; 1 for the persistent
// kernels and the library candidates; 0 where the kernel does not fit the device's SM (why_not says why).
WAVETUNE_API int32_t gemm_ctas_per_sm(int32_t variant_id);

// D = A @ B (+ bias) with the given variant and micro parameters, launched on `stream` on the current
// device. `workspace` holds at least gemm_workspace_bytes(...) bytes of device memory (may be null when
// that is 0) that no other work uses until this launch ends in stream order; the library allocates
// nothing, so launches can be captured into CUDA graphs whose memory the caller's allocator owns.
WAVETUNE_API void gemm(const GemmProblem& problem, int32_t variant_id, const MicroParams& micro, void* workspace,
                       size_t workspace_bytes, Stream stream);

// The choice when no tuned table covers the GPU: cuBLAS where libcublas loads (with no fitted model, nothing
// predicts a gain over it), else a small M-bucket heuristic (registry.cpp).
WAVETUNE_API int32_t default_variant(const GemmProblem& problem);

// One M bucket of that heuristic (cutlass_configs/ [fallback]): problems of this dtype and B layout with
// M <= max_m (0: every larger M) get `variant`. Compiled variants only, in bucket order. Tuned tables
// keep them as the model's priors (docs/model.md).
struct FallbackBucket {
  DType dtype;
  BLayout b_layout;
  int64_t max_m;
  int32_t variant;
};
WAVETUNE_API const std::vector<FallbackBucket>& fallback_buckets();
// That heuristic's variant for the problem: the first bucket that holds M and runs on this device, else the first
// compiled non-library variant of the problem's dtype and B layout that runs here; -1 if none.
WAVETUNE_API int32_t bucket_variant(const GemmProblem& problem);

struct DeviceProperties {
  std::string name;
  int32_t sm_count;
  int64_t l2_bytes;
  int32_t cc_major, cc_minor;
  double memory_bytes_per_s;  // peak DRAM bandwidth (twice the memory clock times the bus width)
};
// The current CUDA device as the current context sees it: in a green context (or an MPS partition) of fewer SMs,
// sm_count is the context's and the name ends in " (<n> SMs)", so tables (found by name, checked by SM count)
// and the wave mapping treat it as the smaller GPU it stands for.
WAVETUNE_API DeviceProperties device_properties();

// Why this process can use no CUDA device (no GPU, no driver, a driver older than the runtime, a build
// without kernels), in the CUDA runtime's words; empty when it can use one.
WAVETUNE_API std::string no_device_reason();

// --- Architectures (docs/kernels.md, "Architectures") ---
// wavetune serves GPUs of compute capability 8.0 (Ampere) and later: each variant runs where its VariantInfo::arch
// runs (runs_on, types.h), and every family's choice takes only those; the vendor candidates run everywhere.
constexpr int32_t kMinComputeCapability = 80;

// The compute capability (major * 10 + minor) that an architecture name of WAVETUNE_ARCH's form names: "sm" and
// two or three digits, as "sm80", "sm89", "sm90", "sm100", optionally ending in "a" ("sm90a"). InvalidArgument
// for anything else.
WAVETUNE_API int32_t parse_compute_capability(const std::string& arch);
// The Arch that to_string(Arch) names ("any", "sm80", "sm90a", ...); InvalidArgument for anything else.
WAVETUNE_API Arch parse_arch(const std::string& name);

// The compute capability the environment variable WAVETUNE_ARCH names (0 where it is unset or empty), read once
// per process: the kernels then serve the current GPU as a GPU of that (older) architecture, so that only the
// variants that run there are chosen and run, and programmatic dependent launch is off below 9.0. That tests
// the portable kernels on a newer GPU. InvalidArgument for a malformed value (parse_compute_capability); a
// value above the GPU's own is refused by the device check.
WAVETUNE_API int32_t arch_override();

// Why a GPU of compute capability major.minor cannot run wavetune, naming it (device ordinal and name) and what
// wavetune needs; empty for compute capability 8.0 and later.
WAVETUNE_API std::string unsupported_device_error(int device, const std::string& name, int major, int minor);

// The compute capability the kernels serve the current device as: WAVETUNE_ARCH's where it is set, else the
// device's own. Where no device can be used (a build host), WAVETUNE_ARCH's, or 0 where it is unset: the choices
// are then those of a GPU that runs every variant. InvalidArgument for a device older than 8.0 or a
// WAVETUNE_ARCH it refuses.
WAVETUNE_API int32_t served_compute_capability();

// Whether variant `v` is chosen and run on the current device (served_compute_capability; every variant where
// that is 0).
WAVETUNE_API bool runs_here(const VariantInfo& v);

// Programmatic dependent launch (Hopper): while on, every wavetune kernel (cuBLAS and cuBLASLt launch their own)
// launches with cudaLaunchAttributeProgrammaticStreamSerialization, so a launch's prologue overlaps the end of
// the kernel before it in the stream; each waits (griddepcontrol.wait) before it reads what an earlier kernel
// may have written, so results are those of plain launches. Kept inside CUDA graphs. Initially on unless the
// environment sets WAVETUNE_PDL=0; always off in a process that serves a GPU below compute capability 9.0 (an
// older GPU, or WAVETUNE_ARCH naming an older architecture).
WAVETUNE_API void set_programmatic_launch(bool on);
WAVETUNE_API bool programmatic_launch();

class Selector;  // lookup.h

// The launch a call with no forced config makes (Python's and C++'s alike): the choice of `table` (a gemm
// table bound to this build; nullptr: none), else default_variant with default micro parameters where there
// is no table or none of its compiled configs takes the problem's dtype and B layout. Reads sizes only.
// With options.batch_invariance on (batch_invariance.h), the table's Selector::select_invariant, or without a table
// the heuristic's variant where it shares the reduction order of the heuristic's variant for the largest M (with
// BatchInvariance::config, that one), launched data-parallel; InvalidArgument where that order is not fixed.
WAVETUNE_API Launch choose(const GemmProblem& problem, const Selector* table, const ChoiceOptions& options = {});

struct ProfileOptions {
  int32_t warmup = 3;        // eager launches per config before capture
  int32_t replays = 5;       // timed rounds, one replay of each config's graph per round; the median is reported
  int32_t min_launches = 8;  // launches per graph, rounded up to whole passes over the operand copies
  int64_t cold_bytes = 0;    // the rotated operand copies total at least this many bytes; 0: twice the L2
  uint64_t seed = 1;         // operands are fresh pseudo-random values in [-1, 1) drawn from this seed, and
                             // the order of each round of replays
  int32_t lead_in = 0;       // untimed launches of a config's own right before each of its timed replays
};

// Median microseconds per launch of each config on D[m,n] = A[m,k] @ B[k,n], timed as inference runs
// them: CUDA-graph replays (no host launch cost) over operand copies rotated so weights come from DRAM,
// on a private stream of the current device, the configs' replays interleaved round by round, each
// round in a fresh order, so drift in clocks affects them alike. NaN for a config that cannot run the
// problem.
WAVETUNE_API std::vector<double> profile(int32_t m, int32_t n, int32_t k, DType dtype, BLayout b_layout,
                                         const std::vector<Launch>& launches, const ProfileOptions& options);

}  // namespace wavetune

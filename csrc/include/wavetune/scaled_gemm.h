// FP8 scaled GEMM (docs/scaled_gemm.md): D[m, n] = sa[m] sb[n] (A[m, :] . B[n, :]) (+ bias[n]) with A and B in
// e4m3 (OCP FP8), fp32 scales per tensor or per row of either operand, or per 128-block of both, and D and
// bias in bf16 or fp16: what torch._scaled_mm computes with a column-major B, i.e. x @ W.T for an nn.Linear
// weight W.
//
//   wavetune::ScaledGemmProblem p{m, n, k, a, k, b, k, d, n, wavetune::DType::bf16,
//                                 sa, wavetune::ScaleKind::row, sb, wavetune::ScaleKind::row};
//   int32_t variant = wavetune::choose(p, nullptr).variant;  // -1: no variant takes M; run another GEMM
//   wavetune::scaled_gemm(p, variant, 0, workspace, wavetune::scaled_gemm_workspace_bytes(p, variant, 0), stream);
//
// Its variants: CUTLASS FP8 kernels generated from cutlass_configs/sm90_scaled_gemm.toml (ids from 0), the
// decode GEMM's kernel with e4m3 inputs (8 or 16 tokens per tile; ids from kDecodeVariantIds), and cuBLASLt
// (ids from kLibraryVariantIds, one per output dtype and a bf16 one that scales per row in a second pass; where
// libcublasLt can be opened). Every function throws wavetune::InvalidArgument or wavetune::RuntimeError (errors.h) on failure.
#pragma once

#include <string>
#include <vector>

#include "wavetune/types.h"

namespace wavetune {

// The most tokens (M) the default choice gives the decode variants, on layers too narrow for the CUTLASS
// variants to fill the GPU: beyond, the decode kernels read the weights once more per 8-token tile and the CUTLASS
// variants' tensor-core kernels run (docs/scaled_gemm.md).
constexpr int32_t kScaledGemmDecodeTokens = 16;
// The most tokens the default choice gives the variants: beyond, torch._scaled_mm's kernels were faster than
// the CUTLASS variants (docs/scaled_gemm.md).
constexpr int32_t kScaledGemmMaxTokens = 64;
// In a build without the block-scaled CUTLASS variants, the most tokens the default choice gives the decode
// variants with 128-block scales: beyond, the block-scaled grouped GEMM's CUTLASS kernel with one expert
// (grouped.h, block128 scales) was faster, 1.3-1.7x at 17-64 tokens on the design split (docs/scaled_gemm.md).
constexpr int32_t kScaledGemmMaxBlockTokens = 16;
// In such a build, with 128-block scales past one 8-token tile of the decode variants, the weight size (N x K
// bytes) from which the block-scaled grouped kernel with one expert (or cuBLASLt's block-scaled kernels) ran
// faster than the decode variants: 0.86-0.94x their best time at 58-68 MB on the design split, 1.01-1.12x at
// 26-42 MB (docs/scaled_gemm.md).
constexpr int64_t kScaledGemmBlockDecodeMaxWeightBytes = 45'000'000;

// How a scale tensor covers its operand. block128: A's scales are [m, ceil(k / 128)] (1x128 groups of a
// token), B's [ceil(n / 128), ceil(k / 128)] (128x128 blocks of the weight, as FP8 checkpoints store them);
// both operands or neither.
enum class ScaleKind : int32_t { tensor = 0, row = 1, block128 = 2 };

struct ScaledGemmProblem {
  int32_t m, n, k;
  const void* a;  // [m, k] e4m3, row-major, leading dimension lda
  int64_t lda;
  const void* b;  // [n, k] e4m3, row-major (an nn.Linear weight; torch._scaled_mm's column-major B)
  int64_t ldb;
  void* d;  // [m, n] row-major in out_dtype
  int64_t ldd;
  DType out_dtype;         // bf16 or fp16; the bias's too
  const float* scale_a;  // row-major, as scale_a_kind says
  ScaleKind scale_a_kind;
  const float* scale_b;
  ScaleKind scale_b_kind;
  const void* bias = nullptr;  // n values, or null
};

// Variants compiled into this build, ordered by id; dtype is the output's.
WAVETUNE_API const std::vector<VariantInfo>& scaled_gemm_variants();
// Identifies the compiled catalog (scaled GEMM tables are checked against it).
WAVETUNE_API const char* scaled_gemm_config_space_hash();

// Empty when the sizes, pointers and alignment are valid, else the reason. Needs no GPU.
WAVETUNE_API std::string scaled_gemm_problem_error(const ScaledGemmProblem& problem);

class Selector;  // lookup.h

// The launch a call with no forced variant makes on the current device, from the sizes alone (wave models of
// the launch): a CUTLASS variant up to kScaledGemmMaxTokens, or a decode one up to kScaledGemmDecodeTokens on a
// layer too narrow for the CUTLASS tiles to fill the GPU (with both scales per tensor, only where they would
// occupy under a sixth of the SMs); with 128-block scales in a build without the block-scaled CUTLASS
// variants, a decode variant up to kScaledGemmMaxBlockTokens tokens (up to 8 on weights of
// kScaledGemmBlockDecodeMaxWeightBytes or more). Beyond those limits, and for other problems with both scales
// per tensor, a cuBLASLt variant where one takes the problem: with per-row scales and a bf16 output up to K / 8
// tokens its per-tensor kernel and a second pass for the scales (cublaslt_e4m3_bf16_rescaled), else its own
// scaling. -1 otherwise: callers run another GEMM (torch._scaled_mm; for 128-blocks the grouped GEMM with block128
// scales and one expert, as Python's scaled_gemm does). Default micro parameters: scaled_gemm takes its K splits
// as an argument of its own (0: the variant's wave-aware count). The family has no tables: `table` must be
// nullptr (InvalidArgument otherwise).
// options.batch_invariance must be off (InvalidArgument otherwise): the choice moves between the decode kernels,
// CUTLASS and cuBLASLt by M, and no one of them serves every M.
WAVETUNE_API Launch choose(const ScaledGemmProblem& problem, const Selector* table, const ChoiceOptions& options = {});

// CTAs of a decode variant resident per SM on the current device: the size of the waves its choice counts
// (0 for the other variants).
WAVETUNE_API int32_t scaled_gemm_resident_ctas(int32_t variant_id);

// The device workspace a launch of the variant with `splits` needs: 0 but for the cuBLASLt candidate.
WAVETUNE_API size_t scaled_gemm_workspace_bytes(const ScaledGemmProblem& problem, int32_t variant_id, int32_t splits);

// Launches the variant on `stream` with `splits` K splits (0: the variant's own wave-aware count; the CUTLASS
// variants and cuBLASLt take 0 or 1), with `workspace` of at least scaled_gemm_workspace_bytes (null when that is
// 0), stream-ordered with the launch. Programmatic dependent launch follows set_programmatic_launch (kernels.h).
WAVETUNE_API void scaled_gemm(const ScaledGemmProblem& problem, int32_t variant_id, int32_t splits, void* workspace,
                              size_t workspace_bytes, Stream stream);

// x [m, k] (bf16 or fp16, row-major, leading dimension ldx) to e4m3 q [m, k] (contiguous), scaled per row
// (group_size 0) or per group of 128 elements of a row (group_size 128: block-scaled activations), the
// scales written to `scale` (m floats, or m x ceil(k / 128) row-major): scale = max|group| / 448, 1 for a
// zero group. With `static_scale` set, one given scale for all (`scale` unused, group_size 0).
// q = x / scale, saturated to the e4m3 range.
WAVETUNE_API void quantize_fp8(const void* x, int64_t ldx, DType x_dtype, int32_t m, int32_t k, int32_t group_size,
                               void* q, float* scale, const float* static_scale, Stream stream);

}  // namespace wavetune

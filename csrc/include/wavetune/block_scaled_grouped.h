// Block-scaled FP8 grouped GEMM for mixture-of-experts layers (docs/grouped.md, "FP8"): the layout of FP8
// checkpoints with 128-block scales (DeepSeek-V3, Qwen3 FP8). For every expert e and 128-wide k-block b,
// out[rows of e] = sum_b scale_x[rows of e, b] * (x[rows of e, b] @ w[e, :, b].T) * scale_w[e, n / 128, b],
// x and w in e4m3, fp32 accumulation, out in bf16 or fp16; the rows of each expert given by offsets that stay
// on the GPU.
//
//   wavetune::BlockScaledGroupedGemmProblem p{{rows, experts, n, k, x, w, offsets, out, wavetune::DType::bf16},
//                                             scale_x, scale_w};
//   size_t bytes = wavetune::block_scaled_grouped_workspace_bytes(experts);
//   wavetune::block_scaled_grouped_gemm(p, wavetune::block_scaled_grouped_default_variant(p), workspace, bytes,
//                                       stream);
//
// Its variants have ids of their own (cutlass_configs/sm90_block_scaled_grouped_gemm.toml). Every function
// throws wavetune::InvalidArgument or wavetune::RuntimeError (errors.h) on failure.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "wavetune/grouped.h"
#include "wavetune/types.h"

namespace wavetune {

struct BlockScaledGroupedGemmProblem {
  GroupedGemmProblem gemm;  // the sizes, offsets and pointers; x and w hold e4m3, gemm.dtype is out's type
  const float* scale_x;     // [rows, ceil(k / 128)], row-major: one scale per token and 128 values of K
  const float* scale_w;     // [experts, ceil(n / 128), ceil(k / 128)], row-major: one per 128x128 weight block
};

// The block-scaled FP8 grouped variants compiled into this build, ordered by id; dtype is the output's.
WAVETUNE_API const std::vector<VariantInfo>& block_scaled_grouped_variants();
// The hash of cutlass_configs/sm90_block_scaled_grouped_gemm.toml as compiled.
WAVETUNE_API const char* block_scaled_grouped_config_space_hash();
// The block-scaled FP8 grouped variant with this id, or nullptr when it is not compiled in.
WAVETUNE_API const VariantInfo* find_block_scaled_grouped_variant(int32_t id);

// Empty when the problem's sizes, pointers and alignment are valid, else the reason. Needs no GPU.
WAVETUNE_API std::string block_scaled_grouped_problem_error(const BlockScaledGroupedGemmProblem& problem);

// Device memory a block_scaled_grouped_gemm call with this many experts needs on the current device,
// whichever variant it runs.
WAVETUNE_API size_t block_scaled_grouped_workspace_bytes(int32_t experts);

// The built-in heuristic's choice for the current device (grouped_heuristic.h, for 1-byte operands), from
// the sizes only.
WAVETUNE_API int32_t block_scaled_grouped_default_variant(const BlockScaledGroupedGemmProblem& problem);

class Selector;  // lookup.h

// The variant a call with no forced variant runs on the current device (Python's and C++'s alike): the
// choice of `table` (a block-scaled grouped table bound to this build, wavetune::open_table(path,
// "block_scaled_grouped_gemm"); nullptr: none) from the sizes, else the built-in heuristic's where there is
// no table, no rows, or none of the table's compiled configs writes the dtype.
WAVETUNE_API int32_t block_scaled_grouped_choice(const BlockScaledGroupedGemmProblem& problem, const Selector* table);

// Launches the variant on `stream`, as grouped_gemm does (grouped.h).
WAVETUNE_API void block_scaled_grouped_gemm(const BlockScaledGroupedGemmProblem& problem, int32_t variant_id,
                                            void* workspace, size_t workspace_bytes, Stream stream);

}  // namespace wavetune

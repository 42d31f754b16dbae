// FP8 grouped GEMM for mixture-of-experts layers (docs/grouped.md, "FP8"): for every expert e,
// out[rows of e] = scale_x[rows of e] * (x[rows of e] @ w[e].T) * scale_w[e], x and w in e4m3 with a scale
// per token and per expert output channel (the rowwise scales of torch._scaled_grouped_mm), fp32
// accumulation, out in bf16 or fp16; the rows of each expert given by offsets that stay on the GPU.
//
//   wavetune::ScaledGroupedGemmProblem p{{rows, experts, n, k, x, w, offsets, out, wavetune::DType::bf16},
//                                        scale_x, scale_w};
//   size_t bytes = wavetune::scaled_grouped_workspace_bytes(experts);
//   wavetune::scaled_grouped_gemm(p, wavetune::scaled_grouped_default_variant(p), workspace, bytes, stream);
//
// Its variants have ids of their own (cutlass_configs/sm90_scaled_grouped_gemm.toml). Every function throws
// wavetune::InvalidArgument or wavetune::RuntimeError (errors.h) on failure.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "wavetune/grouped.h"
#include "wavetune/types.h"

namespace wavetune {

struct ScaledGroupedGemmProblem {
  GroupedGemmProblem gemm;  // the sizes, offsets and pointers; x and w hold e4m3, gemm.dtype is out's type
  const float* scale_x;     // [rows]: one scale per row of x (per token)
  const float* scale_w;     // [experts, n]: one scale per expert and output channel
};

// The FP8 grouped variants compiled into this build, ordered by id; dtype is the output's.
WAVETUNE_API const std::vector<VariantInfo>& scaled_grouped_variants();
// The hash of cutlass_configs/sm90_scaled_grouped_gemm.toml as compiled.
WAVETUNE_API const char* scaled_grouped_config_space_hash();
// The FP8 grouped variant with this id, or nullptr when it is not compiled in.
WAVETUNE_API const VariantInfo* find_scaled_grouped_variant(int32_t id);

// Empty when the problem's sizes, pointers and alignment are valid, else the reason. Needs no GPU.
WAVETUNE_API std::string scaled_grouped_problem_error(const ScaledGroupedGemmProblem& problem);

// Device memory a scaled_grouped_gemm call with this many experts needs on the current device, whichever
// variant it runs.
WAVETUNE_API size_t scaled_grouped_workspace_bytes(int32_t experts);

// The built-in heuristic's choice for the current device (grouped_heuristic.h, for 1-byte operands), from
// the sizes only.
WAVETUNE_API int32_t scaled_grouped_default_variant(const ScaledGroupedGemmProblem& problem);

class Selector;  // lookup.h

// The variant a call with no forced variant runs on the current device (Python's and C++'s alike): the
// choice of `table` (an FP8 grouped table bound to this build, wavetune::open_table(path,
// "scaled_grouped_gemm"); nullptr: none) from the sizes, else the built-in heuristic's where there is no
// table, no rows, or none of the table's compiled configs writes the dtype.
WAVETUNE_API int32_t scaled_grouped_choice(const ScaledGroupedGemmProblem& problem, const Selector* table);

// Launches the variant on `stream`, as grouped_gemm does (grouped.h).
WAVETUNE_API void scaled_grouped_gemm(const ScaledGroupedGemmProblem& problem, int32_t variant_id, void* workspace,
                                      size_t workspace_bytes, Stream stream);

}  // namespace wavetune

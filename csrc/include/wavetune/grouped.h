// Grouped GEMM for mixture-of-experts layers (docs/grouped.md): for every expert e,
// out[rows of e] = x[rows of e] @ w[e].T, in one launch, with the rows of each expert given by offsets
// that stay on the GPU (torch._grouped_mm's `offs` convention).
//
//   wavetune::GroupedGemmProblem p{rows, experts, n, k, x, w, offsets, out, wavetune::DType::bf16};
//   size_t bytes = wavetune::grouped_workspace_bytes(experts);            // device memory the caller owns
//   wavetune::grouped_gemm(p, wavetune::grouped_default_variant(p), workspace, bytes, stream);
//
// Grouped variants have ids of their own (cutlass_configs/sm90_grouped_gemm.toml), apart from the dense
// GEMM's. Every function throws wavetune::InvalidArgument or wavetune::RuntimeError (errors.h) on failure.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "wavetune/types.h"

namespace wavetune {

struct GroupedGemmProblem {
  int32_t rows;     // rows of x and out, all experts together
  int32_t experts;  // groups; w holds one [n, k] matrix per expert
  int32_t n, k;
  const void* x;           // [rows, k] row-major, rows sorted by expert
  const void* w;           // [experts, n, k] row-major: an nn.Linear weight per expert
  const int32_t* offsets;  // [experts] on the device: expert e owns rows [offsets[e-1], offsets[e]), offsets[-1] = 0
  void* out;               // [rows, n] row-major; rows from offsets[experts-1] on are not written
  DType dtype;
};

// Grouped variants compiled into this build, ordered by id; b_layout is col and scheduler persistent.
WAVETUNE_API const std::vector<VariantInfo>& grouped_variants();
// The hash of cutlass_configs/sm90_grouped_gemm.toml as compiled: grouped tables are checked against it.
// A grouped table bound to the compiled variants: wavetune::open_table(path, "grouped_gemm") (family.h).
WAVETUNE_API const char* grouped_config_space_hash();
// The grouped variant with this id, or nullptr when it is not compiled in.
WAVETUNE_API const VariantInfo* find_grouped_variant(int32_t id);

// Empty when the problem's sizes, pointers and alignment are valid, else the reason. Needs no GPU; the
// offsets are not read (they are on the GPU): offsets out of order or past `rows` give experts no rows.
WAVETUNE_API std::string grouped_problem_error(const GroupedGemmProblem& problem);

// Device memory a grouped_gemm call with this many experts needs on the current device, whichever
// variant it runs: the per-expert arguments the launch builds on the GPU and CUTLASS's own workspace.
WAVETUNE_API size_t grouped_workspace_bytes(int32_t experts);

// The built-in heuristic's choice for the current device (grouped_heuristic.h), from the sizes only.
WAVETUNE_API int32_t grouped_default_variant(const GroupedGemmProblem& problem);

class Selector;  // lookup.h

// The variant a call with no forced variant runs on the current device (Python's and C++'s alike): the
// choice of `table` (a grouped table bound to this build; nullptr: none) from the sizes, else the built-in
// heuristic's where there is no table, no rows, or none of the table's compiled configs takes the dtype.
WAVETUNE_API int32_t grouped_choice(const GroupedGemmProblem& problem, const Selector* table);

// Launches the variant on `stream`: a small kernel writes each expert's problem size, pointers and strides
// from the offsets into `workspace`, then the grouped GEMM reads them; nothing is copied to the host.
// The workspace must stay untouched until the launch completes (stream order).
WAVETUNE_API void grouped_gemm(const GroupedGemmProblem& problem, int32_t variant_id, void* workspace,
                               size_t workspace_bytes, Stream stream);

}  // namespace wavetune

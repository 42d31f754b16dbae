// Grouped GEMM for mixture-of-experts layers (docs/grouped.md): for every expert e,
// out[rows of e] = x[rows of e] @ w[e].T, in one launch, with the rows of each expert given by offsets
// that stay on the GPU (torch._grouped_mm's `offs` convention); x and w in the output's 16-bit dtype, or in
// e4m3 with float32 scales (GroupedScales: per row, as torch._scaled_grouped_mm takes them, per 128-block or
// per tensor, as FP8 checkpoints store them), accumulated in fp32.
//
//   wavetune::GroupedGemmProblem p{rows, experts, n, k, x, w, offsets, out, wavetune::DType::bf16};
//   // FP8: p.scales = wavetune::GroupedScales::row; p.scale_x = scale_x; p.scale_w = scale_w;
//   size_t bytes = wavetune::grouped_workspace_bytes(experts);            // device memory the caller owns
//   wavetune::grouped_gemm(p, wavetune::choose(p, table).variant, workspace, bytes, stream);  // table: or nullptr
//
// Grouped variants have ids of their own (cutlass_configs/sm90_grouped_gemm.toml), apart from the dense
// GEMM's. Every function throws wavetune::InvalidArgument or wavetune::RuntimeError (errors.h) on failure.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "wavetune/types.h"

namespace wavetune {

// How x and w are scaled: an axis of the grouped variants (the config space's `scales`) and of the grouped
// tables (meta `scales`; one table per GPU model and mode). Each mode's scales are laid out as its
// GroupedScalesLayout says. Modes are only ever appended, within an ABI version: a program built against fewer
// modes meets a later one's value only from grouped_variant_scales of that mode's variants, and should skip
// values at or past std::size(kGroupedScales) of its own headers.
enum class GroupedScales : int32_t {
  none = 0,      // x, w and out in one 16-bit dtype
  row = 1,       // e4m3 x and w; scale_x [rows], one per token; scale_w [experts, n], one per expert output channel
  block128 = 2,  // e4m3 x and w; scale_x [rows, ceil(k/128)]; scale_w [experts, ceil(n/128), ceil(k/128)]
  tensor = 3,    // e4m3 x and w; scale_x [1], one for all of x; scale_w [experts], one per expert
};

// A mode's float32 scales, row-major: scale_x [blocks of rows, blocks of k], scale_w [experts, blocks of n,
// blocks of k], a block of x being x_block_m x x_block_k values and one of w[e] w_block_n x w_block_k (0: all of
// that extent, whose block count is then 1; x_block_m is 1, a token, or 0, all of x). Each mode applies its
// scales to every product of its block: out = sum over K of scale_x * x * w[e] * scale_w.
struct GroupedScalesLayout {
  const char* name;  // as the config space, the tables and Python spell it ("" for none)
  bool e4m3;         // x and w in e4m3 with scales (else in the output's dtype, with none)
  int32_t x_block_m;
  int32_t x_block_k;
  int32_t w_block_n;
  int32_t w_block_k;
};

// Every mode, in enumerator order.
inline constexpr GroupedScalesLayout kGroupedScales[] = {
    {"", false, 0, 0, 0, 0},               // none
    {"row", true, 1, 0, 1, 0},             // row
    {"block128", true, 1, 128, 128, 128},  // block128
    {"tensor", true, 0, 0, 0, 0},          // tensor
};

constexpr const GroupedScalesLayout& grouped_scales_layout(GroupedScales s) { return kGroupedScales[int32_t(s)]; }

// Blocks of `block` values along an extent (0: one block of all of it).
constexpr int64_t scale_blocks(int64_t extent, int32_t block) { return block ? (extent + block - 1) / block : 1; }

struct GroupedGemmProblem {
  int32_t rows;     // rows of x and out, all experts together
  int32_t experts;  // groups; w holds one [n, k] matrix per expert
  int32_t n, k;
  const void* x;           // [rows, k] row-major, rows sorted by expert
  const void* w;           // [experts, n, k] row-major: an nn.Linear weight per expert
  const int32_t* offsets;  // [experts] on the device: expert e owns rows [offsets[e-1], offsets[e]), offsets[-1] = 0
  void* out;               // [rows, n] row-major; rows from offsets[experts-1] on are not written
  DType dtype;             // out's; x's and w's too with no scales
  GroupedScales scales = GroupedScales::none;
  const float* scale_x = nullptr;  // with scales: laid out as the mode's GroupedScalesLayout says
  const float* scale_w = nullptr;
};

// Grouped variants compiled into this build, every scales mode's, ordered by id; b_layout is col and scheduler
// persistent, dtype the output's.
WAVETUNE_API const std::vector<VariantInfo>& grouped_variants();
// The scales mode a compiled grouped variant runs; InvalidArgument when it is not compiled in.
WAVETUNE_API GroupedScales grouped_variant_scales(int32_t id);
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

// CTAs of a compiled grouped variant resident per SM of the current device, from its registers and shared memory
// (read once per device): the grid of an Ampere-style (multistage) variant is that many per SM; 1 for the Hopper
// variants; 0 where the kernel does not fit the device's SM (a launch says why).
WAVETUNE_API int32_t grouped_ctas_per_sm(int32_t variant_id);

// The built-in heuristic's choice for the current device (grouped_heuristic.h) among the compiled variants of
// the problem's scales mode and dtype that run on it (runs_here), from the sizes only; -1 where none of them
// runs there (the caller runs its framework's grouped GEMM, as torch._grouped_mm); InvalidArgument where none is
// compiled.
WAVETUNE_API int32_t grouped_default_variant(const GroupedGemmProblem& problem);

class Selector;  // lookup.h

// The launch a call with no forced variant makes on the current device (Python's and C++'s alike): the variant
// `table` (a grouped table of the problem's scales mode bound to this build; nullptr: none) chooses from the
// sizes, else the built-in heuristic's where there is no table, no rows, or none of the table's compiled configs
// takes the dtype; default micro parameters (grouped_gemm takes none). Only variants that run on the device are
// chosen (variant -1 where none does). InvalidArgument for a table of another scales mode.
// With options.batch_invariance on (batch_invariance.h), rows play the part of M as for the dense GEMM (choose,
// kernels.h): the table's Selector::select_invariant, or the heuristic's variant within the reduction order of its
// variant for the most rows.
WAVETUNE_API Launch choose(const GroupedGemmProblem& problem, const Selector* table, const ChoiceOptions& options = {});

// Launches the variant (of the problem's scales mode and dtype) on `stream`: a small kernel writes each
// expert's problem size, pointers and strides (and where its scales start) from the offsets into `workspace`,
// then the grouped GEMM reads them; nothing is copied to the host. The workspace must stay untouched until the
// launch completes (stream order).
WAVETUNE_API void grouped_gemm(const GroupedGemmProblem& problem, int32_t variant_id, void* workspace,
                               size_t workspace_bytes, Stream stream);

}  // namespace wavetune

// The grouped GEMM's scales mode of a variant and the problem checks that need no GPU (the registry of its
// compiled variants of every scales mode is generated from cutlass_configs/sm90_grouped_gemm.toml's [family]
// table).
#include <cstdint>
#include <sstream>
#include <string>

#include "grouped_ops.h"
#include "wavetune/errors.h"
#include "wavetune/grouped.h"

namespace wavetune {
namespace detail {
namespace {

bool misaligned(const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes != 0; }

// The checks of every mode: sizes, data pointers and their alignment.
std::string data_error(const GroupedGemmProblem& p) {
  std::ostringstream os;
  if (p.rows < 0 || p.experts < 1 || p.n < 1 || p.k < 1) {
    os << "rows must be >= 0 and experts, N, K positive, got rows=" << p.rows << " experts=" << p.experts
       << " N=" << p.n << " K=" << p.k;
  } else if (p.k % 8 != 0 || p.n % 8 != 0) {
    os << "K=" << p.k << " and N=" << p.n << " must be multiples of 8: the kernels move 16-byte rows with TMA "
       << "(pad K and N to a multiple of 8)";
  } else if (!p.x || !p.w || !p.offsets || !p.out) {
    os << "null data pointer";
  } else if (misaligned(p.x, 16) || misaligned(p.w, 16) || misaligned(p.out, 16) || misaligned(p.offsets, 4)) {
    os << "x, w and out must be 16-byte aligned for TMA and offsets 4-byte aligned; a sliced view may be "
       << "misaligned: use .contiguous() or .clone()";
  }
  return os.str();
}

// The further checks of a mode with e4m3 operands and float32 scales.
std::string scales_error(const GroupedGemmProblem& p) {
  if (p.k % 16 != 0) {
    return "K=" + std::to_string(p.k) + " must be a multiple of 16: the kernels move 16-byte rows of e4m3 "
           "values with TMA (pad K to a multiple of 16)";
  }
  if (p.dtype != DType::bf16 && p.dtype != DType::fp16) return "the output must be bf16 or fp16";
  if (!p.scale_x || !p.scale_w) return "null scale pointer";
  if (misaligned(p.scale_x, 4) || misaligned(p.scale_w, 4)) return "the scales must be 4-byte aligned float32";
  return {};
}
}  // namespace
}  // namespace detail

GroupedScales grouped_variant_scales(int32_t id) {
  const detail::GroupedVariantOps* ops = detail::grouped_variant_ops(id);
  if (!ops) WAVETUNE_INVALID("grouped variant id ", id, " is not compiled into this build");
  return ops->scales;
}

std::string grouped_problem_error(const GroupedGemmProblem& p) {
  if (int32_t(p.scales) < 0 || int32_t(p.scales) >= int32_t(std::size(kGroupedScales))) {
    return "unknown scales mode " + std::to_string(int32_t(p.scales));
  }
  std::string error = detail::data_error(p);
  if (!error.empty() || !grouped_scales_layout(p.scales).e4m3) return error;
  return detail::scales_error(p);
}

}  // namespace wavetune

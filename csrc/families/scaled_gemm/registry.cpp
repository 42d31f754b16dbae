// The scaled GEMM's problem checks that need no GPU (the registry of its compiled variants is generated from
// cutlass_configs/sm90_scaled_gemm.toml's [family] table).
#include <cstdint>
#include <sstream>
#include <string>

#include "wavetune/scaled_gemm.h"

namespace wavetune {

std::string scaled_gemm_problem_error(const ScaledGemmProblem& p) {
  auto valid_kind = [](ScaleKind kind) { return int32_t(kind) >= 0 && int32_t(kind) <= int32_t(ScaleKind::block128); };
  auto misaligned = [](const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes != 0; };
  std::ostringstream os;
  if (p.m < 1 || p.n < 1 || p.k < 1) {
    os << "M, N, K must be positive, got M=" << p.m << " N=" << p.n << " K=" << p.k;
  } else if (p.k % 16 != 0) {
    os << "K=" << p.k << " must be a multiple of 16: the kernels load 16 e4m3 values at a time";
  } else if (p.lda < p.k || p.ldb < p.k || p.ldd < p.n || p.lda % 16 != 0 || p.ldb % 16 != 0) {
    os << "leading dimensions must cover the rows (lda, ldb >= K, ldd >= N) and lda, ldb be multiples of 16, got "
       << "lda=" << p.lda << " ldb=" << p.ldb << " ldd=" << p.ldd;
  } else if (p.out_dtype != DType::bf16 && p.out_dtype != DType::fp16) {
    os << "the output must be bf16 or fp16";
  } else if (!valid_kind(p.scale_a_kind) || !valid_kind(p.scale_b_kind)) {
    os << "unknown scale kind (tensor, row or block128)";
  } else if ((p.scale_a_kind == ScaleKind::block128) != (p.scale_b_kind == ScaleKind::block128)) {
    os << "128-block scales go with 128-block scales: scale_a [M, ceil(K/128)] and scale_b [ceil(N/128), "
       << "ceil(K/128)] both, or neither";
  } else if (!p.a || !p.b || !p.d || !p.scale_a || !p.scale_b) {
    os << "null data or scale pointer";
  } else if (misaligned(p.a, 16) || misaligned(p.b, 16)) {
    os << "a and b must be 16-byte aligned (16-byte loads); a sliced view may be misaligned: use .contiguous()";
  } else if (misaligned(p.d, 2) || misaligned(p.bias, 2) || misaligned(p.scale_a, 4) || misaligned(p.scale_b, 4)) {
    os << "the output and bias must be 2-byte and the scales 4-byte aligned";
  }
  return os.str();
}

}  // namespace wavetune

// Bindings of the scaled GEMM family (csrc/include/wavetune/scaled_gemm.h): tensors arrive as raw pointers and
// sizes; the Python entry point does the framework-level checks.
#include <pybind11/pybind11.h>

#include <cstdint>

#include "bindings.h"
#include "wavetune/scaled_gemm.h"

namespace py = pybind11;

namespace wavetune::bindings {
namespace {

void bind(py::module_& m);
FamilyBindings registration("scaled_gemm", &bind);

// Sizes, pointers and scale kinds (ScaleKind codes) as Python passes them: (m, n, k, a, lda, b, ldb, d, ldd,
// out_dtype, scale_a, scale_a_kind, scale_b, scale_b_kind, bias).
ScaledGemmProblem make_problem(int32_t m, int32_t n, int32_t k, uintptr_t a, int64_t lda, uintptr_t b, int64_t ldb,
                               uintptr_t d, int64_t ldd, int32_t out_dtype, uintptr_t scale_a, int32_t a_kind,
                               uintptr_t scale_b, int32_t b_kind, uintptr_t bias) {
  return {m,
          n,
          k,
          reinterpret_cast<const void*>(a),
          lda,
          reinterpret_cast<const void*>(b),
          ldb,
          reinterpret_cast<void*>(d),
          ldd,
          static_cast<DType>(out_dtype),
          reinterpret_cast<const float*>(scale_a),
          static_cast<ScaleKind>(a_kind),
          reinterpret_cast<const float*>(scale_b),
          static_cast<ScaleKind>(b_kind),
          reinterpret_cast<const void*>(bias)};
}

void bind(py::module_& m) {
  m.def("scaled_gemm_variants", [] {
    py::list out;
    for (const VariantInfo& v : scaled_gemm_variants()) out.append(variant_dict(v));
    return out;
  });
  m.def("scaled_gemm_config_space_hash", &scaled_gemm_config_space_hash,
        "Identifies the compiled scaled GEMM catalog (its tables are checked against it).");
  m.def(
      "scaled_gemm_max_tokens",
      [](bool block_scales) { return block_scales ? kScaledGemmMaxBlockTokens : kScaledGemmMaxTokens; },
      py::arg("block_scales") = false,
      "The most tokens the default choice gives the variants (with block_scales: the decode variants, in a build "
      "without the block-scaled CUTLASS ones).");
  m.def("scale_kinds", [] { return py::make_tuple("tensor", "row", "block128"); },
        "The ScaleKind names, by code.");
  m.def(
      "scaled_gemm_problem_error",
      [](int32_t m, int32_t n, int32_t k, uintptr_t a, int64_t lda, uintptr_t b, int64_t ldb, uintptr_t d, int64_t ldd,
         int32_t out_dtype, uintptr_t scale_a, int32_t a_kind, uintptr_t scale_b, int32_t b_kind, uintptr_t bias) {
        return scaled_gemm_problem_error(
            make_problem(m, n, k, a, lda, b, ldb, d, ldd, out_dtype, scale_a, a_kind, scale_b, b_kind, bias));
      },
      "Empty string when a scaled GEMM's sizes, pointers and alignment are valid, else the reason.");
  m.def(
      "scaled_gemm_choice",
      [](int32_t m, int32_t n, int32_t k, int32_t out_dtype, int32_t a_kind, int32_t b_kind, bool bias) {
        // The choice reads the sizes, the output dtype, the kinds of scales and whether there is a bias (cuBLASLt
        // then needs a kernel with its bias epilogue), never the data: a stand-in address marks the bias.
        const uintptr_t bias_mark = bias ? 256 : 0;
        return scaled_gemm_choice(
            make_problem(m, n, k, 0, k, 0, k, 0, n, out_dtype, 0, a_kind, 0, b_kind, bias_mark));
      },
      py::arg("m"), py::arg("n"), py::arg("k"), py::arg("out_dtype"), py::arg("scale_a_kind"),
      py::arg("scale_b_kind"), py::arg("bias") = false,
      "The variant a scaled_gemm call with no config runs on the current device; -1: another GEMM runs it "
      "(torch._scaled_mm, or for 128-block scales the block-scaled grouped GEMM).");
  m.def("scaled_gemm_resident_ctas", &scaled_gemm_resident_ctas, py::arg("variant"),
        "CTAs of a decode variant resident per SM on the current device (0 for the other variants).");
  m.def(
      "scaled_gemm_workspace_bytes",
      [](int32_t m, int32_t n, int32_t k, uintptr_t a, int64_t lda, uintptr_t b, int64_t ldb, uintptr_t d, int64_t ldd,
         int32_t out_dtype, uintptr_t scale_a, int32_t a_kind, uintptr_t scale_b, int32_t b_kind, uintptr_t bias,
         int32_t variant, int32_t splits) {
        return scaled_gemm_workspace_bytes(
            make_problem(m, n, k, a, lda, b, ldb, d, ldd, out_dtype, scale_a, a_kind, scale_b, b_kind, bias), variant,
            splits);
      },
      "The workspace bytes scaled_gemm needs with the given variant and K splits (0 but for stream-K variants).");
  m.def(
      "scaled_gemm",
      [](int32_t m, int32_t n, int32_t k, uintptr_t a, int64_t lda, uintptr_t b, int64_t ldb, uintptr_t d, int64_t ldd,
         int32_t out_dtype, uintptr_t scale_a, int32_t a_kind, uintptr_t scale_b, int32_t b_kind, uintptr_t bias,
         int32_t variant, int32_t splits, uintptr_t workspace, size_t workspace_bytes, uintptr_t stream) {
        const ScaledGemmProblem p =
            make_problem(m, n, k, a, lda, b, ldb, d, ldd, out_dtype, scale_a, a_kind, scale_b, b_kind, bias);
        scaled_gemm(p, variant, splits, reinterpret_cast<void*>(workspace), workspace_bytes,
                    reinterpret_cast<Stream>(stream));
      },
      py::call_guard<py::gil_scoped_release>(),
      "d = scale_a scale_b (a @ b.T) (+ bias) with the given variant and K splits (0: its own) on the current "
      "device and the given stream, with a workspace of workspace_bytes (0 and null where none is needed).");
  m.def(
      "quantize_fp8",
      [](uintptr_t x, int64_t ldx, int32_t dtype, int32_t rows, int32_t k, int32_t group_size, uintptr_t q,
         uintptr_t scale, uintptr_t static_scale, uintptr_t stream) {
        quantize_fp8(reinterpret_cast<const void*>(x), ldx, static_cast<DType>(dtype), rows, k, group_size,
                     reinterpret_cast<void*>(q), reinterpret_cast<float*>(scale),
                     reinterpret_cast<const float*>(static_scale), reinterpret_cast<Stream>(stream));
      },
      py::call_guard<py::gil_scoped_release>(),
      "x (bf16/fp16) to e4m3 per row or per 128-group (scales written) or with one static scale, on the given "
      "stream.");
}

}  // namespace
}  // namespace wavetune::bindings

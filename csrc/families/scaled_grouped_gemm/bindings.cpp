// Bindings of the FP8 grouped family (csrc/include/wavetune/scaled_grouped.h): tensors arrive as raw pointers
// and sizes; the Python entry point does the framework-level checks.
#include <pybind11/pybind11.h>

#include <cstdint>

#include "bindings.h"
#include "wavetune/scaled_grouped.h"

namespace py = pybind11;

namespace wavetune::bindings {
namespace {

void bind(py::module_& m);
FamilyBindings registration("scaled_grouped_gemm", &bind);

ScaledGroupedGemmProblem make_problem(int32_t rows, int32_t experts, int32_t n, int32_t k, uintptr_t x, uintptr_t w,
                                      uintptr_t scale_x, uintptr_t scale_w, uintptr_t offsets, uintptr_t out,
                                      int32_t out_dtype) {
  return {{rows, experts, n, k, reinterpret_cast<const void*>(x), reinterpret_cast<const void*>(w),
           reinterpret_cast<const int32_t*>(offsets), reinterpret_cast<void*>(out), static_cast<DType>(out_dtype)},
          reinterpret_cast<const float*>(scale_x),
          reinterpret_cast<const float*>(scale_w)};
}

// What a launch with no forced variant runs on `device` (scaled_grouped_choice, with the device's table).
int32_t choice_on(const ScaledGroupedGemmProblem& p, int device) {
  return scaled_grouped_choice(p, registration.active_table(device));
}

void bind(py::module_& m) {
  m.def("scaled_grouped_variants", [] {
    py::list out;
    for (const VariantInfo& v : scaled_grouped_variants()) out.append(variant_dict(v));
    return out;
  });
  m.def("scaled_grouped_config_space_hash", &scaled_grouped_config_space_hash,
        "The hash of the FP8 grouped config space this build was compiled from.");
  m.def(
      "scaled_grouped_problem_error",
      [](int32_t rows, int32_t experts, int32_t n, int32_t k, uintptr_t x, uintptr_t w, uintptr_t scale_x,
         uintptr_t scale_w, uintptr_t offsets, uintptr_t out, int32_t out_dtype) {
        return scaled_grouped_problem_error(
            make_problem(rows, experts, n, k, x, w, scale_x, scale_w, offsets, out, out_dtype));
      },
      "Empty string when an FP8 grouped problem's sizes, pointers and alignment are valid, else the reason.");
  m.def("scaled_grouped_workspace_bytes", &scaled_grouped_workspace_bytes, py::arg("experts"),
        "Workspace bytes a scaled_grouped_gemm call with this many experts needs on the current device.");
  m.def(
      "scaled_grouped_choice",
      [](int32_t out_dtype, int32_t rows, int32_t experts, int32_t n, int32_t k, int device) {
        return choice_on(make_problem(rows, experts, n, k, 0, 0, 0, 0, 0, 0, out_dtype), device);
      },
      py::arg("out_dtype"), py::arg("rows"), py::arg("experts"), py::arg("n"), py::arg("k"), py::arg("device"),
      "The FP8 grouped variant id a call with no config launches on that device: its FP8 grouped table's "
      "choice, else the built-in heuristic's.");
  m.def(
      "scaled_grouped_gemm",
      [](int32_t rows, int32_t experts, int32_t n, int32_t k, uintptr_t x, uintptr_t w, uintptr_t scale_x,
         uintptr_t scale_w, uintptr_t offsets, uintptr_t out, int32_t out_dtype, int32_t variant, uintptr_t workspace,
         size_t workspace_bytes, uintptr_t stream, int device) {
        ScaledGroupedGemmProblem p = make_problem(rows, experts, n, k, x, w, scale_x, scale_w, offsets, out, out_dtype);
        if (variant < 0) variant = choice_on(p, device);
        scaled_grouped_gemm(p, variant, reinterpret_cast<void*>(workspace), workspace_bytes,
                            reinterpret_cast<Stream>(stream));
      },
      py::call_guard<py::gil_scoped_release>(),
      "out = scale_x * (x @ w[e].T) * scale_w[e] per expert on the current device (ordinal `device`) and the "
      "given stream; "
      "variant -1: scaled_grouped_choice.");
}

}  // namespace
}  // namespace wavetune::bindings

// The Python bindings both FP8 grouped families (scaled_grouped_gemm, block_scaled_grouped_gemm) define, for
// their own problem type and functions: tensors arrive as raw pointers and sizes; the Python entry points do
// the framework-level checks. Each family's bindings.cpp binds them with its names.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bindings.h"

namespace wavetune::bindings {

// A family's C++ API (scaled_grouped.h, block_scaled_grouped.h), as the bindings call it.
template <class Problem>
struct E4m3GroupedApi {
  const char* prefix;  // of the Python names: "scaled_grouped" gives scaled_grouped_variants, ...
  const char* what;    // how docstrings name the family
  const std::vector<VariantInfo>& (*variants)();
  const char* (*config_space_hash)();
  std::string (*problem_error)(const Problem&);
  size_t (*workspace_bytes)(int32_t experts);
  int32_t (*choice)(const Problem&, const Selector*);
  void (*launch)(const Problem&, int32_t variant, void* workspace, size_t workspace_bytes, Stream);
};

template <class Problem>
Problem e4m3_grouped_problem(int32_t rows, int32_t experts, int32_t n, int32_t k, uintptr_t x, uintptr_t w,
                             uintptr_t scale_x, uintptr_t scale_w, uintptr_t offsets, uintptr_t out,
                             int32_t out_dtype) {
  return {{rows, experts, n, k, reinterpret_cast<const void*>(x), reinterpret_cast<const void*>(w),
           reinterpret_cast<const int32_t*>(offsets), reinterpret_cast<void*>(out), static_cast<DType>(out_dtype)},
          reinterpret_cast<const float*>(scale_x),
          reinterpret_cast<const float*>(scale_w)};
}

// Defines <prefix>_variants, _config_space_hash, _problem_error, _workspace_bytes, _choice and the launch,
// <prefix>_gemm; a launch with no forced variant (-1) runs the choice of the device's table (`registration`).
template <class Problem>
void bind_e4m3_grouped(pybind11::module_& m, const E4m3GroupedApi<Problem>& api, const FamilyBindings& registration) {
  namespace py = pybind11;
  const std::string p = api.prefix;
  const std::string what = api.what;
  m.def((p + "_variants").c_str(), [api] {
    py::list out;
    for (const VariantInfo& v : api.variants()) out.append(variant_dict(v));
    return out;
  });
  m.def((p + "_config_space_hash").c_str(), api.config_space_hash,
        ("The hash of the " + what + " config space this build was compiled from.").c_str());
  m.def(
      (p + "_problem_error").c_str(),
      [api](int32_t rows, int32_t experts, int32_t n, int32_t k, uintptr_t x, uintptr_t w, uintptr_t scale_x,
            uintptr_t scale_w, uintptr_t offsets, uintptr_t out, int32_t out_dtype) {
        return api.problem_error(
            e4m3_grouped_problem<Problem>(rows, experts, n, k, x, w, scale_x, scale_w, offsets, out, out_dtype));
      },
      ("Empty string when a " + what + " problem's sizes, pointers and alignment are valid, else the reason.").c_str());
  m.def((p + "_workspace_bytes").c_str(), api.workspace_bytes, py::arg("experts"),
        ("Workspace bytes a " + what + " call with this many experts needs on the current device.").c_str());
  const FamilyBindings* tables = &registration;
  m.def(
      (p + "_choice").c_str(),
      [api, tables](int32_t out_dtype, int32_t rows, int32_t experts, int32_t n, int32_t k, int device) {
        return api.choice(e4m3_grouped_problem<Problem>(rows, experts, n, k, 0, 0, 0, 0, 0, 0, out_dtype),
                          tables->active_table(device));
      },
      py::arg("out_dtype"), py::arg("rows"), py::arg("experts"), py::arg("n"), py::arg("k"), py::arg("device"),
      ("The " + what + " variant id a call with no config launches on that device: its table's choice, else the "
       "built-in heuristic's.").c_str());
  m.def(
      (p + "_gemm").c_str(),
      [api, tables](int32_t rows, int32_t experts, int32_t n, int32_t k, uintptr_t x, uintptr_t w, uintptr_t scale_x,
                    uintptr_t scale_w, uintptr_t offsets, uintptr_t out, int32_t out_dtype, int32_t variant,
                    uintptr_t workspace, size_t workspace_bytes, uintptr_t stream, int device) {
        Problem problem =
            e4m3_grouped_problem<Problem>(rows, experts, n, k, x, w, scale_x, scale_w, offsets, out, out_dtype);
        if (variant < 0) variant = api.choice(problem, tables->active_table(device));
        api.launch(problem, variant, reinterpret_cast<void*>(workspace), workspace_bytes,
                   reinterpret_cast<Stream>(stream));
      },
      py::call_guard<py::gil_scoped_release>(),
      ("The " + what + " GEMM on the current device (ordinal `device`) and the given stream; variant -1: the "
       "choice.").c_str());
}

}  // namespace wavetune::bindings

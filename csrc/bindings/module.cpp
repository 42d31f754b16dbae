// Python bindings (wavetune._C): thin wrappers over the kernel library's plain C++ API. Tensors arrive
// as raw pointers and sizes; python/wavetune/ does the framework-level checks.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <tuple>

#include <cstdint>

#include "wavetune/kernels.h"
#include "wavetune/mapping.h"

namespace py = pybind11;
using namespace wavetune;

namespace {

GemmProblem make_problem(int32_t m, int32_t n, int32_t k, uintptr_t a, int64_t lda, uintptr_t b, int64_t ldb,
                         uintptr_t d, int64_t ldd, int32_t dtype, int32_t b_layout) {
  return {m, n, k, reinterpret_cast<const void*>(a), lda, reinterpret_cast<const void*>(b), ldb,
          reinterpret_cast<void*>(d), ldd, static_cast<DType>(dtype), static_cast<BLayout>(b_layout)};
}

MicroParams make_micro(int32_t decomposition, int32_t splits, int32_t raster, int32_t max_swizzle) {
  return {static_cast<Decomposition>(decomposition), splits, static_cast<Raster>(raster), max_swizzle};
}

// Names in enumerator order, so Python maps a name to its code by position.
template <class Enum>
py::list names(int count) {
  py::list out;
  for (int i = 0; i < count; ++i) out.append(to_string(static_cast<Enum>(i)));
  return out;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "wavetune native module: CUTLASS Hopper GEMM variants and their launch path";
  m.attr("DTYPES") = names<DType>(2);
  m.attr("B_LAYOUTS") = names<BLayout>(2);
  m.attr("DECOMPOSITIONS") = names<Decomposition>(4);
  m.attr("RASTERS") = names<Raster>(3);

  m.def("variants", [] {
    py::list out;
    for (const VariantInfo& v : variants()) {
      py::dict d;
      d["id"] = v.id;
      d["name"] = v.name;
      d["dtype"] = to_string(v.dtype);
      d["b_layout"] = to_string(v.b_layout);
      d["swap_ab"] = v.swap_ab;
      d["schedule"] = to_string(v.schedule);
      d["tile"] = py::make_tuple(v.tile_m, v.tile_n, v.tile_k);
      d["cluster"] = py::make_tuple(v.cluster_m, v.cluster_n);
      d["scheduler"] = to_string(v.scheduler);
      out.append(d);
    }
    return out;
  });

  m.def("build_info", [] {
    BuildInfo info = build_info();
    py::dict d;
    d["kernels_compiled"] = info.kernels_compiled;
    d["kernel_set"] = info.kernel_set;
    d["config_space_hash"] = info.config_space_hash;
    d["cuda_version"] = info.cuda_version;
    d["cutlass_version"] = info.cutlass_version;
    return d;
  });

  m.def(
      "problem_error",
      [](int32_t m_, int32_t n, int32_t k, uintptr_t a, int64_t lda, uintptr_t b, int64_t ldb, uintptr_t d,
         int64_t ldd, int32_t dtype, int32_t b_layout) {
        return problem_error(make_problem(m_, n, k, a, lda, b, ldb, d, ldd, dtype, b_layout));
      },
      "Empty string when the problem's sizes, leading dimensions and alignment are valid, else the reason.");

  m.def("default_variant", [](int32_t dtype, int32_t b_layout) {
    return default_variant(make_problem(1, 8, 8, 0, 8, 0, 8, 0, 8, dtype, b_layout));
  });

  m.def(
      "why_not",
      [](int32_t m_, int32_t n, int32_t k, uintptr_t a, int64_t lda, uintptr_t b, int64_t ldb, uintptr_t d,
         int64_t ldd, int32_t dtype, int32_t b_layout, int32_t variant, int32_t decomposition, int32_t splits,
         int32_t raster, int32_t max_swizzle) {
        return why_not(make_problem(m_, n, k, a, lda, b, ldb, d, ldd, dtype, b_layout), variant,
                       make_micro(decomposition, splits, raster, max_swizzle));
      },
      "Empty string when the variant can run the problem on the current device, else the reason.");

  m.def("device_properties", [] {
    DeviceProperties p = device_properties();
    py::dict d;
    d["name"] = p.name;
    d["sm_count"] = p.sm_count;
    d["l2_bytes"] = p.l2_bytes;
    d["compute_capability"] = py::make_tuple(p.cc_major, p.cc_minor);
    return d;
  });

  m.def(
      "map_problem",
      [](int32_t variant, int64_t m_, int64_t n, int64_t k, int32_t decomposition, int32_t splits, int32_t sm_count) {
        const VariantInfo* v = find_variant(variant);
        if (!v) throw std::invalid_argument("variant id " + std::to_string(variant) + " is not compiled in");
        Coordinates c = map_problem(tile_shape(*v), m_, n, k, static_cast<Decomposition>(decomposition), splits, sm_count);
        return py::make_tuple(c.grid, c.k_iters, c.capacity, c.waves);
      },
      "(G, L, C, waves) of a problem under a compiled variant and decomposition (csrc/include/wavetune/mapping.h).");

  m.def(
      "profile",
      [](int32_t m_, int32_t n, int32_t k, int32_t dtype, int32_t b_layout,
         const std::vector<std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t>>& configs, int32_t warmup,
         int32_t replays, int32_t min_launches, int64_t cold_bytes, uint64_t seed) {
        std::vector<Launch> launches;
        for (const auto& [variant, decomposition, splits, raster, max_swizzle] : configs) {
          launches.push_back({variant, make_micro(decomposition, splits, raster, max_swizzle)});
        }
        return profile(m_, n, k, static_cast<DType>(dtype), static_cast<BLayout>(b_layout), launches,
                       {warmup, replays, min_launches, cold_bytes, seed});
      },
      py::call_guard<py::gil_scoped_release>(),
      "Median us per launch of each (variant, decomposition, splits, raster, max_swizzle) on one problem, "
      "timed with CUDA-graph replays over cold operand copies; NaN where a config cannot run.");

  m.def(
      "gemm",
      [](int32_t m_, int32_t n, int32_t k, uintptr_t a, int64_t lda, uintptr_t b, int64_t ldb, uintptr_t d,
         int64_t ldd, int32_t dtype, int32_t b_layout, int32_t variant, int32_t decomposition, int32_t splits,
         int32_t raster, int32_t max_swizzle, uintptr_t stream) {
        GemmProblem p = make_problem(m_, n, k, a, lda, b, ldb, d, ldd, dtype, b_layout);
        if (variant < 0) variant = default_variant(p);
        gemm(p, variant, make_micro(decomposition, splits, raster, max_swizzle), reinterpret_cast<Stream>(stream));
      },
      py::call_guard<py::gil_scoped_release>(),
      "D = A @ B on the current device and the given stream; variant -1 takes the default choice.");
}

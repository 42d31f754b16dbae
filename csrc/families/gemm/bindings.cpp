// Bindings of the dense GEMM family (csrc/include/wavetune/kernels.h): tensors arrive as raw pointers and
// sizes; the Python entry point does the framework-level checks.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "builtin_candidates.h"
#include "wavetune/kernels.h"
#include "wavetune/lookup.h"
#include "wavetune/mapping.h"

namespace py = pybind11;

namespace wavetune::bindings {
namespace {

GemmProblem make_problem(int32_t m, int32_t n, int32_t k, uintptr_t a, int64_t lda, uintptr_t b, int64_t ldb,
                         uintptr_t d, int64_t ldd, int32_t dtype, int32_t b_layout) {
  return {m, n, k, reinterpret_cast<const void*>(a), lda, reinterpret_cast<const void*>(b), ldb,
          reinterpret_cast<void*>(d), ldd, static_cast<DType>(dtype), static_cast<BLayout>(b_layout)};
}

// A problem of names and sizes alone, for the built-in choices: they read its dtype, B layout and M, no pointers.
GemmProblem named_problem(const std::string& dtype, const std::string& b_layout, int32_t m, int32_t n, int32_t k) {
  return make_problem(m, n, k, 0, k, 0, k, 0, n, int32_t(parse_name<DType>(dtype, 2, "dtype")),
                      int32_t(parse_name<BLayout>(b_layout, 2, "B layout")));
}

// `p` with an epilogue by name (types.h, Epilogue), its residual and that one's leading dimension.
GemmProblem with_epilogue(GemmProblem p, const std::string& epilogue, uintptr_t residual, int64_t ldr) {
  p.epilogue = parse_name<Epilogue>(epilogue, 3, "epilogue");
  p.residual = reinterpret_cast<const void*>(residual);
  p.ldr = ldr;
  return p;
}

MicroParams make_micro(int32_t decomposition, int32_t splits, int32_t raster, int32_t max_swizzle) {
  return {static_cast<Decomposition>(decomposition), splits, static_cast<Raster>(raster), max_swizzle};
}

// One problem shape's launch, resolved once: the variant and micro parameters (the device's table's choice,
// or the built-in heuristic without a table, when none is forced) and the workspace they need. Each call
// gives the data pointers, the workspace and the stream.
struct PreparedGemm {
  GemmProblem problem;  // data pointers null
  int32_t device;
  int32_t variant;
  MicroParams micro;
  size_t workspace_bytes;
};

PreparedGemm make_prepared(const FamilyBindings& registration, const GemmProblem& p, int32_t device, int32_t variant,
                           MicroParams micro, const ChoiceOptions& options) {
  if (variant < 0) {
    const Launch chosen = choose(p, registration.active_table(device), options);
    variant = chosen.variant;
    micro = chosen.micro;
  }
  return {p, device, variant, micro, gemm_workspace_bytes(p, variant, micro)};
}

}  // namespace

void bind_gemm(py::module_& m, const FamilyBindings& registration) {
  m.def(
      "problem_error",
      [](int32_t m_, int32_t n, int32_t k, uintptr_t a, int64_t lda, uintptr_t b, int64_t ldb, uintptr_t d,
         int64_t ldd, int32_t dtype, int32_t b_layout, const std::string& epilogue, uintptr_t residual, int64_t ldr) {
        return problem_error(
            with_epilogue(make_problem(m_, n, k, a, lda, b, ldb, d, ldd, dtype, b_layout), epilogue, residual, ldr));
      },
      py::arg("m"), py::arg("n"), py::arg("k"), py::arg("a"), py::arg("lda"), py::arg("b"), py::arg("ldb"),
      py::arg("d"), py::arg("ldd"), py::arg("dtype"), py::arg("b_layout"), py::arg("epilogue") = "none",
      py::arg("residual") = 0, py::arg("ldr") = 0,
      "Empty string when the problem's sizes, leading dimensions and alignment are valid, else the reason.");

  m.def(
      "shape_error",
      [](int32_t m_, int32_t n, int32_t k, int64_t lda, int64_t ldb, int64_t ldd, int32_t dtype, int32_t b_layout,
         const std::string& epilogue, int64_t ldr) {
        return shape_error(
            with_epilogue(make_problem(m_, n, k, 0, lda, 0, ldb, 0, ldd, dtype, b_layout), epilogue, 0, ldr));
      },
      py::arg("m"), py::arg("n"), py::arg("k"), py::arg("lda"), py::arg("ldb"), py::arg("ldd"), py::arg("dtype"),
      py::arg("b_layout"), py::arg("epilogue") = "none", py::arg("ldr") = 0,
      "Empty string when the problem's sizes and leading dimensions are valid, else the reason (no pointers).");
  m.def(
      "default_variant",
      [](const std::string& dtype, const std::string& b_layout, int32_t m_, int32_t n, int32_t k) {
        return default_variant(named_problem(dtype, b_layout, m_, n, k));
      },
      py::arg("dtype"), py::arg("b_layout"), py::arg("m"), py::arg("n"), py::arg("k"),
      "The variant id gemm launches where no table is loaded: cuBLAS where libcublas loads, else the built-in "
      "M-bucket heuristic's.");
  m.def(
      "bucket_variant",
      [](const std::string& dtype, const std::string& b_layout, int32_t m_, int32_t n, int32_t k) {
        return bucket_variant(named_problem(dtype, b_layout, m_, n, k));
      },
      py::arg("dtype"), py::arg("b_layout"), py::arg("m"), py::arg("n"), py::arg("k"),
      "The M-bucket heuristic's variant id for the problem (kernels.h, bucket_variant); -1 if none.");
  m.def(
      "fallback_buckets",
      [] {
        py::list out;
        for (const FallbackBucket& b : fallback_buckets()) {
          out.append(py::make_tuple(to_string(b.dtype), to_string(b.b_layout), b.max_m, b.variant));
        }
        return out;
      },
      "The heuristic's buckets, (dtype, b_layout, max_m or 0 for any larger M, variant id), compiled only.");

  m.def(
      "map_problem",
      [](int32_t variant, int64_t m_, int64_t n, int64_t k, int32_t decomposition, int32_t splits, int32_t sm_count,
         int32_t ctas_per_sm) {
        const VariantInfo* v = find_variant(variant);
        if (!v) throw std::invalid_argument("variant id " + std::to_string(variant) + " is not compiled in");
        if (ctas_per_sm < 1) throw std::invalid_argument("ctas_per_sm=" + std::to_string(ctas_per_sm) + " must be >= 1");
        TileShape tile = tile_shape(*v);
        tile.ctas_per_sm = ctas_per_sm;
        Coordinates c = map_problem(tile, m_, n, k, static_cast<Decomposition>(decomposition), splits, sm_count);
        return py::make_tuple(c.grid, c.k_iters, c.capacity, c.waves);
      },
      py::arg("variant"), py::arg("m"), py::arg("n"), py::arg("k"), py::arg("decomposition"), py::arg("splits"),
      py::arg("sm_count"), py::arg("ctas_per_sm") = 1,
      "(G, L, C, waves) of a problem under a compiled variant and decomposition with `ctas_per_sm` of its CTAs "
      "resident per SM (csrc/include/wavetune/mapping.h).");
  m.def("gemm_ctas_per_sm", &gemm_ctas_per_sm, py::arg("variant"),
        "CTAs of a compiled variant resident per SM of the current GPU (its registers and shared memory; 1 for the "
        "persistent kernels and cuBLAS, 0 where it does not fit).");
  m.def(
      "cublas_candidates",
      [] {
        const auto& [tile_m, tile_n, tile_k] = detail::kCublasNominalTile;
        py::list out;
        for (const auto& by_layout : detail::kCublasVariantNames) {
          for (const char* name : by_layout) out.append(py::make_tuple(name, py::make_tuple(tile_m, tile_n, tile_k)));
        }
        return out;
      },
      "(name, nominal tile (M, N, K)) of each cuBLAS candidate a dense table may name, whether or not libcublas "
      "loads here (builtin_candidates.h): the tile the model maps it through.");
  m.def(
      "stream_k_modeled",
      [](int64_t tiles, int64_t k_iters, int64_t L, int64_t C) {
        if (C < 1) throw std::invalid_argument("C (resident CTAs) must be >= 1, got " + std::to_string(C));
        return stream_k_modeled(tiles, k_iters, {0, L, C, 0});
      },
      py::arg("tiles"), py::arg("k_iters"), py::arg("L"), py::arg("C"),
      "Whether the lookup may choose a stream-K launch over `tiles` output tiles of `k_iters` K steps each, mapped "
      "to L K steps per CTA on C resident CTAs (mapping.h): CUTLASS runs it as stream-K, each tile split among few "
      "enough CTAs.");

  m.def(
      "profile",
      [](int32_t m_, int32_t n, int32_t k, int32_t dtype, int32_t b_layout,
         const std::vector<std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t>>& configs, int32_t warmup,
         int32_t replays, int32_t min_launches, int64_t cold_bytes, uint64_t seed, int32_t lead_in) {
        std::vector<Launch> launches;
        for (const auto& [variant, decomposition, splits, raster, max_swizzle] : configs) {
          launches.push_back({variant, make_micro(decomposition, splits, raster, max_swizzle)});
        }
        return profile(m_, n, k, static_cast<DType>(dtype), static_cast<BLayout>(b_layout), launches,
                       {warmup, replays, min_launches, cold_bytes, seed, lead_in});
      },
      py::arg("m"), py::arg("n"), py::arg("k"), py::arg("dtype"), py::arg("b_layout"), py::arg("configs"),
      py::arg("warmup") = 3, py::arg("replays") = 5, py::arg("min_launches") = 8, py::arg("cold_bytes") = 0,
      py::arg("seed") = 1, py::arg("lead_in") = 0, py::call_guard<py::gil_scoped_release>(),
      "Median us per launch of each (variant, decomposition, splits, raster, max_swizzle) on one problem, "
      "timed with CUDA-graph replays over cold operand copies; NaN where a config cannot run.");

  // NOTES: the eager hot path (torch_ops) keeps one PreparedGemm per shape and passes only what changes
  // between calls: a native call's host time grows with its argument count, and a decode step outside CUDA
  // graphs waits on it.
  py::class_<PreparedGemm>(m, "PreparedGemm",
                           "gemm's launch for one shape and device, resolved once (variant -1: the device's table's "
                           "choice, or the built-in heuristic without a table, batch-invariant as batch_invariance "
                           "says: off, reduction_order or config); each call gives the data pointers "
                           "(bias 0: none), a workspace of at least workspace_bytes and the stream; with_epilogue gives "
                           "the same launch with a fused epilogue where the chosen variant runs it.")
      .def(py::init([&registration](int32_t m_, int32_t n, int32_t k, int64_t lda, int64_t ldb, int64_t ldd,
                                    int32_t dtype, int32_t b_layout, int32_t device, int32_t variant,
                                    int32_t decomposition, int32_t splits, int32_t raster, int32_t max_swizzle,
                                    const std::string& batch_invariance) {
             return make_prepared(registration, make_problem(m_, n, k, 0, lda, 0, ldb, 0, ldd, dtype, b_layout), device,
                                  variant, make_micro(decomposition, splits, raster, max_swizzle),
                                  choice_options(batch_invariance));
           }),
           py::arg("m"), py::arg("n"), py::arg("k"), py::arg("lda"), py::arg("ldb"),
           py::arg("ldd"), py::arg("dtype"), py::arg("b_layout"), py::arg("device"), py::arg("variant") = -1,
           py::arg("decomposition") = 0, py::arg("splits") = 1, py::arg("raster") = 0, py::arg("max_swizzle") = 1,
           py::arg("batch_invariance") = "off")
      .def_readonly("device", &PreparedGemm::device)
      .def_readonly("variant", &PreparedGemm::variant)
      .def_readonly("workspace_bytes", &PreparedGemm::workspace_bytes)
      .def_property_readonly("from_library",
                             [](const PreparedGemm& g) { return find_variant(g.variant)->schedule == Schedule::cublas; })
      .def_property_readonly("epilogue", [](const PreparedGemm& g) { return to_string(g.problem.epilogue); })
      .def(
          "with_epilogue",
          [](const PreparedGemm& g, const std::string& epilogue, int64_t ldd, int64_t ldr) -> std::optional<PreparedGemm> {
            GemmProblem p = with_epilogue(g.problem, epilogue, 0, ldr);
            p.ldd = ldd;
            if (!runs_epilogue(*find_variant(g.variant), p.epilogue)) return std::nullopt;
            return PreparedGemm{p, g.device, g.variant, g.micro, gemm_workspace_bytes(p, g.variant, g.micro)};
          },
          py::arg("epilogue"), py::arg("ldd"), py::arg("ldr") = 0,
          "This launch (its variant and micro parameters) with an epilogue by name ('residual': D = A B + R, R of "
          "leading dimension ldr; 'silu_and_mul': D = silu(gate) * up of B's two halves) into D of leading dimension "
          "ldd; None where the chosen variant does not run it (the caller runs the GEMM, then the epilogue's op).")
      .def(
          "__call__",
          [](const PreparedGemm& g, uintptr_t a, uintptr_t b, uintptr_t bias, uintptr_t d, uintptr_t workspace,
             uintptr_t stream, uintptr_t residual) {
            GemmProblem p = g.problem;
            p.a = reinterpret_cast<const void*>(a);
            p.b = reinterpret_cast<const void*>(b);
            p.bias = reinterpret_cast<const void*>(bias);
            p.d = reinterpret_cast<void*>(d);
            p.residual = reinterpret_cast<const void*>(residual);
            gemm(p, g.variant, g.micro, reinterpret_cast<void*>(workspace), g.workspace_bytes,
                 reinterpret_cast<Stream>(stream));
          },
          py::arg("a"), py::arg("b"), py::arg("bias"), py::arg("d"), py::arg("workspace"), py::arg("stream"),
          py::arg("residual") = 0, py::call_guard<py::gil_scoped_release>());

}

}  // namespace wavetune::bindings

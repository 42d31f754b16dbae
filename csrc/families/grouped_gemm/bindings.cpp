// Bindings of the grouped-GEMM family (csrc/include/wavetune/grouped.h), every scales mode: tensors arrive as
// raw pointers and sizes, a scales mode as its enumerator's value; the Python entry points do the
// framework-level checks.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "wavetune/grouped.h"
#include "wavetune/grouped_heuristic.h"

namespace py = pybind11;

namespace wavetune::bindings {
namespace {

GroupedGemmProblem make_problem(int32_t rows, int32_t experts, int32_t n, int32_t k, uintptr_t x, uintptr_t w,
                                uintptr_t offsets, uintptr_t out, int32_t dtype, int32_t scales = 0,
                                uintptr_t scale_x = 0, uintptr_t scale_w = 0) {
  return {rows,
          experts,
          n,
          k,
          reinterpret_cast<const void*>(x),
          reinterpret_cast<const void*>(w),
          reinterpret_cast<const int32_t*>(offsets),
          reinterpret_cast<void*>(out),
          static_cast<DType>(dtype),
          static_cast<GroupedScales>(scales),
          reinterpret_cast<const float*>(scale_x),
          reinterpret_cast<const float*>(scale_w)};
}

// The sizes of a problem, for the choices (no data pointers).
GroupedGemmProblem sizes(int32_t dtype, int32_t rows, int32_t experts, int32_t n, int32_t k, int32_t scales) {
  return make_problem(rows, experts, n, k, 0, 0, 0, 0, dtype, scales);
}

py::dict scales_dict(const GroupedScalesLayout& s) {
  return py::dict(py::arg("name") = s.name, py::arg("e4m3") = s.e4m3, py::arg("x_block_m") = s.x_block_m,
                  py::arg("x_block_k") = s.x_block_k,
                  py::arg("w_block_n") = s.w_block_n, py::arg("w_block_k") = s.w_block_k);
}

// A tile shape as Python gives it: ((tile_m, tile_n, tile_k), (cluster_m, cluster_n), swap_ab).
using PyTileShape = std::tuple<std::tuple<int32_t, int32_t, int32_t>, std::tuple<int32_t, int32_t>, bool>;

// With `ctas_per_sm` of its CTAs resident per SM (grouped_ctas_per_sm).
TileShape make_tile_shape(const PyTileShape& s, int32_t ctas_per_sm = 1) {
  const auto& [tile, cluster, swap_ab] = s;
  TileShape shape{std::get<0>(tile),    std::get<1>(tile),    std::get<2>(tile),
                  std::get<0>(cluster), std::get<1>(cluster), swap_ab};
  shape.ctas_per_sm = ctas_per_sm;
  if (std::min({shape.tile_m, shape.tile_n, shape.tile_k, shape.cluster_m, shape.cluster_n}) < 1) {
    throw std::invalid_argument("a tile shape's sides and cluster sides must be >= 1");
  }
  if (ctas_per_sm < 1) throw std::invalid_argument("ctas_per_sm=" + std::to_string(ctas_per_sm) + " must be >= 1");
  return shape;
}

// What a launch with no forced variant runs on `device` (choose, with the device's table of the
// problem's scales mode: the family's table scales are GroupedScales' names in enumerator order).
int32_t choice_on(const FamilyBindings& registration, const GroupedGemmProblem& p, int device,
                  const std::string& batch_invariance) {
  return choose(p, registration.active_table(device, size_t(p.scales)), choice_options(batch_invariance)).variant;
}

}  // namespace

void bind_grouped_gemm(py::module_& m, const FamilyBindings& registration) {
  py::list modes;
  for (const GroupedScalesLayout& s : kGroupedScales) modes.append(scales_dict(s));
  m.attr("GROUPED_SCALES") = modes;  // every scales mode (grouped.h), by enumerator value

  m.def("grouped_variant_scales", [](int32_t id) { return int32_t(grouped_variant_scales(id)); }, py::arg("id"),
        "The scales mode (its GROUPED_SCALES index) of a compiled grouped variant.");

  m.def(
      "grouped_problem_error",
      [](int32_t rows, int32_t experts, int32_t n, int32_t k, uintptr_t x, uintptr_t w, uintptr_t offsets,
         uintptr_t out, int32_t dtype, int32_t scales, uintptr_t scale_x, uintptr_t scale_w) {
        return grouped_problem_error(make_problem(rows, experts, n, k, x, w, offsets, out, dtype, scales, scale_x,
                                                  scale_w));
      },
      py::arg("rows"), py::arg("experts"), py::arg("n"), py::arg("k"), py::arg("x"), py::arg("w"), py::arg("offsets"),
      py::arg("out"), py::arg("dtype"), py::arg("scales") = 0, py::arg("scale_x") = 0, py::arg("scale_w") = 0,
      "Empty string when a grouped problem's sizes, pointers and alignment are valid, else the reason.");

  m.def("grouped_workspace_bytes", &grouped_workspace_bytes, py::arg("experts"),
        "Workspace bytes a grouped_gemm call with this many experts needs on the current device.");

  m.def(
      "grouped_default_variant",
      [](int32_t dtype, int32_t rows, int32_t experts, int32_t n, int32_t k, int32_t scales) {
        return grouped_default_variant(sizes(dtype, rows, experts, n, k, scales));
      },
      py::arg("dtype"), py::arg("rows"), py::arg("experts"), py::arg("n"), py::arg("k"), py::arg("scales") = 0,
      "The grouped variant id the built-in heuristic picks on the current device.");

  m.def(
      "grouped_chosen_variant",
      [&registration](int32_t dtype, int32_t rows, int32_t experts, int32_t n, int32_t k, int device,
                      int32_t scales, const std::string& batch_invariance) {
        return choice_on(registration, sizes(dtype, rows, experts, n, k, scales), device, batch_invariance);
      },
      py::arg("dtype"), py::arg("rows"), py::arg("experts"), py::arg("n"), py::arg("k"), py::arg("device"),
      py::arg("scales") = 0, py::arg("batch_invariance") = "off",
      "The grouped variant id a call with no config launches on that device: its grouped table's (of that "
      "scales mode) choice, else the built-in heuristic's; batch-invariant as batch_invariance says.");

  m.def("grouped_ctas_per_sm", &grouped_ctas_per_sm, py::arg("variant"),
        "CTAs of a compiled grouped variant resident per SM of the current GPU (its registers and shared memory; 1 "
        "for the Hopper variants, 0 where it does not fit).");
  m.def(
      "map_grouped_balanced",
      [](const PyTileShape& shape, int64_t rows, int64_t experts, int64_t n, int64_t k, int32_t sm_count,
         int32_t ctas_per_sm) {
        Coordinates c = map_grouped_balanced(make_tile_shape(shape, ctas_per_sm), {rows, experts, n, k}, sm_count);
        return py::make_tuple(c.grid, c.k_iters, c.capacity, c.waves);
      },
      py::arg("shape"), py::arg("rows"), py::arg("experts"), py::arg("n"), py::arg("k"), py::arg("sm_count"),
      py::arg("ctas_per_sm") = 1,
      "(G, L, C, waves) of a grouped problem under a tile shape with `ctas_per_sm` of its CTAs resident per SM, "
      "rows spread evenly (grouped_mapping.h).");
  m.def(
      "grouped_expert_tiles",
      [](const PyTileShape& shape, int64_t rows, int64_t n) { return expert_tiles(make_tile_shape(shape), rows, n); },
      py::arg("shape"), py::arg("rows"), py::arg("n"),
      "Output tiles of one expert's GEMM with `rows` rows, its tile grid padded to whole clusters (grouped_mapping.h).");
  m.def(
      "grouped_coordinates",
      [](const PyTileShape& shape, int64_t tiles, int64_t k, int32_t sm_count, int32_t ctas_per_sm) {
        Coordinates c = grouped_coordinates(make_tile_shape(shape, ctas_per_sm), tiles, k, sm_count);
        return py::make_tuple(c.grid, c.k_iters, c.capacity, c.waves);
      },
      py::arg("shape"), py::arg("tiles"), py::arg("k"), py::arg("sm_count"), py::arg("ctas_per_sm") = 1,
      "(G, L, C, waves) of a grouped launch whose experts have `tiles` output tiles in all (grouped_mapping.h).");
  m.def(
      "balanced_groups",
      [](int64_t rows, int64_t groups) {
        const BalancedGroups spread = balanced_groups(rows, groups);
        return py::make_tuple(spread.busy, spread.rows_each);
      },
      py::arg("rows"), py::arg("groups"),
      "(busy groups, rows each): `rows` rows spread evenly over min(groups, rows) groups (grouped_mapping.h).");

  m.def(
      "grouped_heuristic",
      [](const std::vector<PyTileShape>& candidates, int64_t rows, int64_t experts, int64_t n, int64_t k,
         int32_t sm_count) {
        if (candidates.empty()) throw std::invalid_argument("no candidates");
        std::vector<TileShape> shapes;
        std::vector<double> costs;
        const GroupedShape problem{rows, experts, n, k};
        for (const PyTileShape& c : candidates) {
          shapes.push_back(make_tile_shape(c));
          costs.push_back(grouped_cost_cycles(shapes.back(), problem, sm_count));
        }
        return py::make_tuple(choose_grouped(shapes, problem, sm_count), costs);
      },
      "(index of the choice, predicted cycles of each) of the built-in heuristic over tile shapes "
      "(grouped_heuristic.h).");

  m.def(
      "grouped_gemm",
      [&registration](int32_t rows, int32_t experts, int32_t n, int32_t k, uintptr_t x, uintptr_t w,
                      uintptr_t offsets, uintptr_t out, int32_t dtype, int32_t scales, uintptr_t scale_x,
                      uintptr_t scale_w, int32_t variant, uintptr_t workspace, size_t workspace_bytes,
                      uintptr_t stream, int device, const std::string& batch_invariance) {
        GroupedGemmProblem p = make_problem(rows, experts, n, k, x, w, offsets, out, dtype, scales, scale_x, scale_w);
        if (variant < 0) variant = choice_on(registration, p, device, batch_invariance);
        grouped_gemm(p, variant, reinterpret_cast<void*>(workspace), workspace_bytes, reinterpret_cast<Stream>(stream));
      },
      py::arg("rows"), py::arg("experts"), py::arg("n"), py::arg("k"), py::arg("x"), py::arg("w"), py::arg("offsets"),
      py::arg("out"), py::arg("dtype"), py::arg("scales"), py::arg("scale_x"), py::arg("scale_w"), py::arg("variant"),
      py::arg("workspace"), py::arg("workspace_bytes"), py::arg("stream"), py::arg("device"),
      py::arg("batch_invariance") = "off", py::call_guard<py::gil_scoped_release>(),
      "out = x @ w[e].T per expert (scaled as the scales mode says) on the current device (ordinal `device`) and "
      "the given stream; variant -1: grouped_chosen_variant's (batch_invariance passed on).");
}

}  // namespace wavetune::bindings

// Python bindings (wavetune._C): thin wrappers over the kernel library's plain C++ API. Tensors arrive
// as raw pointers and sizes; python/wavetune/ does the framework-level checks.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <tuple>

#include <array>
#include <iterator>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "bindings.h"
#include "wavetune/attention.h"
#include "wavetune/grouped.h"
#include "wavetune/kernels.h"
#include "wavetune/lookup.h"
#include "wavetune/mapping.h"
#include "wavetune/variant_library.h"

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

// The tables launches consult per family and device when no config is forced. Selectors stay alive for
// the process (a replaced table is rare and small), so the launch path reads a plain atomic pointer, no lock.
constexpr int kMaxDevices = 64;
const char* const kTableFamilies[] = {"gemm", "grouped_gemm", "attention"};  // names of bindings::TableFamily
constexpr int kFamilyCount = int(std::size(kTableFamilies));
std::array<std::array<std::atomic<const Selector*>, kMaxDevices>, kFamilyCount> g_active_tables{};
std::mutex g_tables_mutex;
std::vector<std::shared_ptr<Selector>> g_tables;

bindings::TableFamily family_of(const std::string& family) {
  for (int i = 0; i < kFamilyCount; ++i) {
    if (family == kTableFamilies[i]) return bindings::TableFamily(i);
  }
  throw std::invalid_argument("unknown kernel family '" + family + "' (gemm, grouped_gemm, attention)");
}

// Make launches of the selector's family on `device` choose from it; nullptr: back to the heuristic
// (of `family`).
void use_table(int device, std::shared_ptr<Selector> selector, const std::string& family) {
  if (device < 0 || device >= kMaxDevices) throw std::invalid_argument("device ordinal out of range");
  const int f = int(family_of(selector ? selector->family() : family));
  std::lock_guard<std::mutex> lock(g_tables_mutex);
  if (selector) g_tables.push_back(selector);
  g_active_tables[f][device].store(selector.get(), std::memory_order_release);
}

// A Selector over a table file for the compiled variants of its family.
std::shared_ptr<Selector> open_selector(const std::string& path, const std::string& family) {
  switch (family_of(family)) {
    case bindings::TableFamily::gemm:
      return std::make_shared<Selector>(Table::load(path), variants(), build_info().config_space_hash, family);
    case bindings::TableFamily::grouped_gemm:
      return std::make_shared<Selector>(Table::load(path), grouped_variants(), grouped_config_space_hash(), family);
    default:
      return std::make_shared<Selector>(Table::load(path), attention_variants(), attention_config_space_hash(), family);
  }
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

PreparedGemm make_prepared(int32_t m, int32_t n, int32_t k, int64_t lda, int64_t ldb, int64_t ldd, int32_t dtype,
                           int32_t b_layout, int32_t device, int32_t variant, int32_t decomposition, int32_t splits,
                           int32_t raster, int32_t max_swizzle) {
  const GemmProblem p = make_problem(m, n, k, 0, lda, 0, ldb, 0, ldd, dtype, b_layout);
  MicroParams micro = make_micro(decomposition, splits, raster, max_swizzle);
  if (variant < 0) {
    const Selector* table = bindings::active_table(bindings::TableFamily::gemm, device);
    if (table && table->candidate_count(p.dtype, p.b_layout) > 0) {
      const Choice c = table->select({p.dtype, p.b_layout, p.m, p.n, p.k});
      variant = c.variant;
      micro = c.micro;
    } else {
      variant = default_variant(p);
    }
  }
  return {p, device, variant, micro, gemm_workspace_bytes(p, variant, micro)};
}

template <class Enum>
Enum parse_name(const std::string& name, int count, const char* what) {
  for (int i = 0; i < count; ++i) {
    if (name == to_string(static_cast<Enum>(i))) return static_cast<Enum>(i);
  }
  throw std::invalid_argument(std::string("unknown ") + what + " '" + name + "'");
}

Problem make_lookup_problem(const std::string& dtype, const std::string& b_layout, int64_t m, int64_t n, int64_t k,
                            int64_t groups = 1) {
  return {parse_name<DType>(dtype, 2, "dtype"), parse_name<BLayout>(b_layout, 2, "B layout"), m, n, k, groups};
}

// Names in enumerator order, so Python maps a name to its code by position.
template <class Enum>
py::list names(int count) {
  py::list out;
  for (int i = 0; i < count; ++i) out.append(to_string(static_cast<Enum>(i)));
  return out;
}

}  // namespace

const Selector* wavetune::bindings::active_table(TableFamily family, int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return g_active_tables[int(family)][device].load(std::memory_order_acquire);
}

py::dict wavetune::bindings::variant_dict(const VariantInfo& v) {
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
  return d;
}

PYBIND11_MODULE(_C, m) {
  m.doc() = "wavetune native module: CUTLASS Hopper GEMM variants and their launch path";
  m.attr("DTYPES") = names<DType>(2);
  m.attr("B_LAYOUTS") = names<BLayout>(2);
  m.attr("DECOMPOSITIONS") = names<Decomposition>(4);
  m.attr("RASTERS") = names<Raster>(3);

  m.def("variants", [] {
    py::list out;
    for (const VariantInfo& v : variants()) out.append(bindings::variant_dict(v));
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

  m.def("no_device_reason", &no_device_reason,
        "Why this process can use no CUDA device, in the CUDA runtime's words; empty when it can use one.");
  m.def(
      "shape_error",
      [](int32_t m_, int32_t n, int32_t k, int64_t lda, int64_t ldb, int64_t ldd, int32_t dtype, int32_t b_layout) {
        return shape_error(make_problem(m_, n, k, 0, lda, 0, ldb, 0, ldd, dtype, b_layout));
      },
      "Empty string when the problem's sizes and leading dimensions are valid, else the reason (no pointers).");
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
      "default_variant",
      [](const std::string& dtype, const std::string& b_layout, int32_t m_, int32_t n, int32_t k) {
        const Problem p = make_lookup_problem(dtype, b_layout, m_, n, k);
        // The heuristic reads the dtype, the B layout and M only: no data pointers are needed.
        return default_variant(make_problem(m_, n, k, 0, k, 0, k, 0, n, int32_t(p.dtype), int32_t(p.b_layout)));
      },
      py::arg("dtype"), py::arg("b_layout"), py::arg("m"), py::arg("n"), py::arg("k"),
      "The variant id the built-in M-bucket heuristic picks (what gemm launches where no table is loaded).");
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

  py::class_<Selector, std::shared_ptr<Selector>>(m, "Selector",
                                                  "A tuned table bound to this build's compiled variants.")
      .def(py::init(&open_selector), py::arg("path"), py::arg("family") = "gemm",
           "A table file of a kernel family (gemm, grouped_gemm, attention) bound to that family's compiled variants.")
      .def_property_readonly("family", &Selector::family)
      .def("check_device", &Selector::check_device, py::arg("gpu_name"), py::arg("sm_count"))
      .def("meta", [](const Selector& s) { return s.table().meta; })
      .def("config_count", [](const Selector& s) { return s.table().configs.size(); })
      .def("exact_count", [](const Selector& s) { return s.table().exact.size(); })
      .def("memory_bytes_per_us", [](const Selector& s) { return s.table().memory_bytes_per_us; })
      .def("traffic_bytes_per_us", [](const Selector& s) { return s.table().traffic_bytes_per_us; })
      .def("compute_flop_per_us", [](const Selector& s) { return s.table().compute_flop_per_us; })
      .def("skipped_configs", &Selector::skipped_configs)
      .def("sm_count", &Selector::sm_count)
      .def("select",
           [](const Selector& s, const std::string& dtype, const std::string& b_layout, int64_t m_, int64_t n,
              int64_t k, bool exact, int64_t groups, int64_t heads_q, int64_t heads_kv, bool causal) {
             Problem p = make_lookup_problem(dtype, b_layout, m_, n, k, groups);
             p.heads_q = heads_q, p.heads_kv = heads_kv, p.causal = causal;
             Choice c = exact ? s.select(p) : s.select_model(p);
             const TableConfig& config = s.table().configs[c.config];
             py::dict d;
             d["variant"] = c.variant;
             d["name"] = config.variant_name;
             d["config"] = c.config;
             d["decomposition"] = to_string(c.micro.decomposition);
             d["splits"] = c.micro.splits;
             d["raster"] = to_string(c.micro.raster);
             d["max_swizzle"] = c.micro.max_swizzle;
             d["predicted_us"] = c.predicted_us;
             d["source"] = to_string(c.source);
             return d;
           },
           py::arg("dtype"), py::arg("b_layout"), py::arg("m"), py::arg("n"), py::arg("k"), py::arg("exact") = true,
           py::arg("groups") = 1, py::arg("heads_q") = 1, py::arg("heads_kv") = 1, py::arg("causal") = false,
           "The table's choice for a problem (groups: experts, for a grouped table; M is then all their rows; for "
           "an attention table M, N, K, groups are seqlen_q, seqlen_k, head_dim, batch, with heads and mask); "
           "exact=False skips the exact entries (the model's choice alone).")
      .def("explain", [](const Selector& s, const std::string& dtype, const std::string& b_layout, int64_t m_,
                         int64_t n, int64_t k, int64_t groups, int64_t heads_q, int64_t heads_kv, bool causal) {
        py::list out;
        Problem problem = make_lookup_problem(dtype, b_layout, m_, n, k, groups);
        problem.heads_q = heads_q, problem.heads_kv = heads_kv, problem.causal = causal;
        for (const Prediction& p : s.explain(problem)) {
          const TableConfig& config = s.table().configs[p.config];
          py::dict d;
          d["config"] = p.config;
          d["name"] = config.variant_name + "/" + to_string(config.decomposition) + "/" +
                      std::to_string(config.splits);
          d["variant"] = p.variant;
          d["grid"] = p.coords.grid;
          d["k_iters"] = p.coords.k_iters;
          d["capacity"] = p.coords.capacity;
          d["waves"] = p.coords.waves;
          d["predicted_us"] = p.predicted_us;
          d["choosable"] = p.choosable;
          out.append(d);
        }
        return out;
      }, py::arg("dtype"), py::arg("b_layout"), py::arg("m"), py::arg("n"), py::arg("k"), py::arg("groups") = 1,
      py::arg("heads_q") = 1, py::arg("heads_kv") = 1, py::arg("causal") = false);

  m.def("use_table", &use_table, py::arg("device"), py::arg("selector").none(true), py::arg("family") = "gemm",
        "Make launches of the table's family (gemm, grouped_gemm, attention) choose from it on a device (None: back to "
        "the built-in heuristic of `family`).");

  // NOTES: the eager hot path (torch_ops) keeps one PreparedGemm per shape and passes only what changes
  // between calls: a native call's host time grows with its argument count, and a decode step outside CUDA
  // graphs waits on it.
  py::class_<PreparedGemm>(m, "PreparedGemm",
                           "gemm's launch for one shape and device, resolved once (variant -1: the device's table's "
                           "choice, or the built-in heuristic without a table); each call gives the data pointers "
                           "(bias 0: none), a workspace of at least workspace_bytes and the stream.")
      .def(py::init(&make_prepared), py::arg("m"), py::arg("n"), py::arg("k"), py::arg("lda"), py::arg("ldb"),
           py::arg("ldd"), py::arg("dtype"), py::arg("b_layout"), py::arg("device"), py::arg("variant") = -1,
           py::arg("decomposition") = 0, py::arg("splits") = 1, py::arg("raster") = 0, py::arg("max_swizzle") = 1)
      .def_readonly("device", &PreparedGemm::device)
      .def_readonly("variant", &PreparedGemm::variant)
      .def_readonly("workspace_bytes", &PreparedGemm::workspace_bytes)
      .def_property_readonly("from_library",
                             [](const PreparedGemm& g) { return find_variant(g.variant)->schedule == Schedule::cublas; })
      .def(
          "__call__",
          [](const PreparedGemm& g, uintptr_t a, uintptr_t b, uintptr_t bias, uintptr_t d, uintptr_t workspace,
             uintptr_t stream) {
            GemmProblem p = g.problem;
            p.a = reinterpret_cast<const void*>(a);
            p.b = reinterpret_cast<const void*>(b);
            p.bias = reinterpret_cast<const void*>(bias);
            p.d = reinterpret_cast<void*>(d);
            gemm(p, g.variant, g.micro, reinterpret_cast<void*>(workspace), g.workspace_bytes,
                 reinterpret_cast<Stream>(stream));
          },
          py::arg("a"), py::arg("b"), py::arg("bias"), py::arg("d"), py::arg("workspace"), py::arg("stream"),
          py::call_guard<py::gil_scoped_release>());

  m.def(
      "load_variant_library",
      [](const std::string& path) {
        LoadedVariants loaded;
        {
          py::gil_scoped_release release;  // dlopen runs the library's static initializers: other threads go on
          loaded = load_variant_library(path);
        }
        return py::make_tuple(loaded.family, loaded.names, loaded.added);
      },
      py::arg("path"),
      "Load a variant library compiled at run time (python/wavetune/jit.py) and register its variants with their "
      "family: (family, variant names, how many were new). ValueError when it does not fit this build.");

  bindings::bind_grouped(m);
  bindings::bind_attention(m);
}

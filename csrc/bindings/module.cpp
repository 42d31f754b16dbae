// Python bindings (wavetune._C): thin wrappers over the kernel library's plain C++ API. Tensors arrive
// as raw pointers and sizes; python/wavetune/ does the framework-level checks.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "wavetune/family.h"
#include "wavetune/kernels.h"
#include "wavetune/lookup.h"
#include "wavetune/variant_library.h"

namespace py = pybind11;
using namespace wavetune;

namespace {

// The tables launches consult per family, scales mode and device when no config is forced. Selectors stay alive
// for the process (a replaced table is rare and small), so the launch path reads a plain atomic pointer, no lock.
constexpr int kMaxDevices = 64;
using DeviceTables = std::array<std::atomic<const Selector*>, kMaxDevices>;
std::mutex g_tables_mutex;
std::vector<std::shared_ptr<Selector>> g_tables;

// The scales modes of a family's tables (TableFamily::scales), "" alone for a family without.
std::vector<std::string> table_scales(const std::string& family) {
  const TableFamily* f = find_table_family(family);
  return f && f->scales ? f->scales() : std::vector<std::string>{""};
}

// Per kernel family (in kernel_families() order), one DeviceTables per scales mode of its tables.
std::vector<std::unique_ptr<DeviceTables[]>> make_device_tables() {
  std::vector<std::unique_ptr<DeviceTables[]>> all;
  for (const KernelFamily* f : kernel_families()) {
    all.push_back(std::make_unique<DeviceTables[]>(table_scales(f->name).size()));
  }
  return all;
}

DeviceTables& device_tables(size_t family_index, size_t scales_index) {
  static const std::vector<std::unique_ptr<DeviceTables[]>> tables = make_device_tables();
  return tables[family_index][scales_index];
}

// The index of a scales mode among the family's table scales; std::invalid_argument naming them otherwise.
size_t scales_index(const std::string& family, const std::string& scales) {
  const std::vector<std::string> modes = table_scales(family);
  const auto found = std::find(modes.begin(), modes.end(), scales);
  if (found == modes.end()) {
    std::string known;
    for (const std::string& m : modes) known += (known.empty() ? "'" : ", '") + m + "'";
    throw std::invalid_argument("the " + family + " family's tables have no scales mode '" + scales + "' (" + known +
                                ")");
  }
  return size_t(found - modes.begin());
}

size_t family_index(const std::string& name) {
  const auto& all = kernel_families();
  for (size_t i = 0; i < all.size(); ++i) {
    if (name == all[i]->name) return i;
  }
  std::string known;
  for (const KernelFamily* f : all) known += (known.empty() ? "" : ", ") + std::string(f->name);
  throw std::invalid_argument("unknown kernel family '" + name + "' (" + known + ")");
}

// Make launches of the selector's family and scales mode on `device` choose from it; nullptr: back to the
// heuristic (of `family` and `scales`).
void use_table(int device, std::shared_ptr<Selector> selector, const std::string& family, const std::string& scales) {
  if (device < 0 || device >= kMaxDevices) throw std::invalid_argument("device ordinal out of range");
  const std::string& name = selector ? selector->family() : family;
  const size_t f = family_index(name);
  const size_t s = scales_index(name, selector ? selector->scales() : scales);
  std::lock_guard<std::mutex> lock(g_tables_mutex);
  if (selector) g_tables.push_back(selector);
  device_tables(f, s)[device].store(selector.get(), std::memory_order_release);
}

std::vector<bindings::FamilyBindings*>& family_bindings() {
  static std::vector<bindings::FamilyBindings*> all;
  return all;
}

// The most rows, columns or reduction steps a problem may have (Problem in lookup.h: the kernels take int32).
constexpr int64_t kMaxExtent = INT32_MAX;

// An integer as Python passes it, named `name`, in [min, max]. pybind11 refuses an int beyond 64 bits as
// "incompatible function arguments" with a dump of the signature; this names the argument and its range.
int64_t ranged_argument(const py::handle& value, const char* name, int64_t min, int64_t max) {
  const auto index = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
  if (!index) throw py::error_already_set();  // not an integer: Python's TypeError
  int overflow = 0;
  const long long number = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow || number < min || number > max) {
    throw std::invalid_argument(std::string(name) + "=" + py::str(index).cast<std::string>() +
                                " is out of range: it must be in [" + std::to_string(min) + ", " +
                                std::to_string(max) + "]");
  }
  return number;
}

// The fields of a family's problem key (TableFamily::key_fields) from keyword arguments, by name; each field
// not given takes its fallback. TypeError for a name the family does not define.
void read_key(const TableFamily& family, const py::kwargs& given, Problem& p) {
  for (const auto& [name, value] : given) {
    const std::string field = py::str(name);
    const auto& fields = family.key_fields;
    if (std::none_of(fields.begin(), fields.end(), [&](const TableFamily::KeyField& f) { return field == f.name; })) {
      std::string known;
      for (const TableFamily::KeyField& f : fields) known += std::string(known.empty() ? "" : ", ") + f.name;
      throw py::type_error("unexpected keyword argument '" + field + "' (the " + family.name + " family's problems " +
                           (known.empty() ? "have no key fields)" : "have the key fields " + known + ")"));
    }
  }
  for (size_t i = 0; i < family.key_fields.size() && i < size_t(kProblemKeyFields); ++i) {
    const TableFamily::KeyField& f = family.key_fields[i];
    p.key[i] = given.contains(f.name) ? ranged_argument(py::object(given[f.name]), f.name, f.min, f.max) : f.fallback;
  }
}

Problem make_lookup_problem(const Selector& selector, const std::string& dtype, const std::string& b_layout,
                            const py::handle& m, const py::handle& n, const py::handle& k, const py::handle& groups,
                            const py::kwargs& key) {
  Problem p{bindings::parse_name<DType>(dtype, 2, "dtype"), bindings::parse_name<BLayout>(b_layout, 2, "B layout"),
            ranged_argument(m, "m", 1, kMaxExtent), ranged_argument(n, "n", 1, kMaxExtent),
            ranged_argument(k, "k", 1, kMaxExtent), ranged_argument(groups, "groups", 1, kMaxGroups)};
  read_key(*find_table_family(selector.family()), key, p);
  return p;
}

// A table bound to `variants` (dicts as variant_dict makes them) instead of the compiled ones: what a build
// with those variants chooses, for explaining a table where its variants are not compiled.
std::shared_ptr<Selector> selector_over(const std::string& path, const std::string& family,
                                        const std::vector<py::dict>& variants) {
  const KernelFamily* f = find_kernel_family(family);
  if (!f) return open_table(path, family);  // its error names the known families
  std::vector<std::string> names;
  names.reserve(variants.size());  // the infos point into it
  std::vector<VariantInfo> infos;
  for (const py::dict& d : variants) {
    names.push_back(d["name"].cast<std::string>());
    const auto [tile_m, tile_n, tile_k] = d["tile"].cast<std::tuple<int32_t, int32_t, int32_t>>();
    const auto [cluster_m, cluster_n] = d["cluster"].cast<std::tuple<int32_t, int32_t>>();
    infos.push_back({d["id"].cast<int32_t>(), names.back().c_str(),
                     bindings::parse_name<DType>(d["dtype"].cast<std::string>(), 2, "dtype"),
                     bindings::parse_name<BLayout>(d["b_layout"].cast<std::string>(), 2, "B layout"),
                     d["swap_ab"].cast<bool>(),
                     bindings::parse_name<Schedule>(d["schedule"].cast<std::string>(), 7, "schedule"), tile_m, tile_n,
                     tile_k, cluster_m, cluster_n,
                     bindings::parse_name<TileScheduler>(d["scheduler"].cast<std::string>(), 3, "scheduler"),
                     d.contains("arch") ? parse_arch(d["arch"].cast<std::string>()) : arch::any});
  }
  return std::make_shared<Selector>(Table::load(path), runnable(infos), f->config_space_hash(), family);
}

// Names in enumerator order, so Python maps a name to its code by position.
template <class Enum>
py::list names(int count) {
  py::list out;
  for (int i = 0; i < count; ++i) out.append(to_string(static_cast<Enum>(i)));
  return out;
}

}  // namespace

wavetune::bindings::FamilyBindings::FamilyBindings(const char* family_name, void (*bind_family)(py::module_& m))
    : family(family_name), bind(bind_family) {
  family_bindings().push_back(this);
}

const Selector* wavetune::bindings::FamilyBindings::active_table(int device, size_t scales) const {
  if (device < 0 || device >= kMaxDevices || scales >= scales_count) return nullptr;
  return device_tables(index, scales)[device].load(std::memory_order_acquire);
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
  d["arch"] = to_string(v.arch);
  return d;
}

py::list wavetune::bindings::variant_dicts(const std::vector<VariantInfo>& variants) {
  py::list out;
  for (const VariantInfo& v : variants) out.append(variant_dict(v));
  return out;
}

PYBIND11_MODULE(_C, m) {
  m.doc() = "wavetune native module: CUTLASS Hopper GEMM variants and their launch path";
  m.attr("DTYPES") = names<DType>(2);
  m.attr("B_LAYOUTS") = names<BLayout>(2);
  m.attr("DECOMPOSITIONS") = names<Decomposition>(4);
  m.attr("RASTERS") = names<Raster>(3);
  m.attr("MAX_EXTENT") = kMaxExtent;  // a problem's M, N and K are in [1, MAX_EXTENT]
  m.attr("MAX_GROUPS") = kMaxGroups;  // its groups (experts, batch) and heads in [1, MAX_GROUPS]

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

  m.def("set_programmatic_launch", &set_programmatic_launch, py::arg("on"),
        "Programmatic dependent launch of the dense GEMM's CUTLASS variants on or off (kernels.h).");
  m.def("programmatic_launch", &programmatic_launch, "Whether programmatic dependent launch is on.");
  m.attr("MIN_COMPUTE_CAPABILITY") = kMinComputeCapability;
  m.def("parse_compute_capability", &parse_compute_capability, py::arg("arch"),
        "The compute capability (major * 10 + minor) an architecture name such as 'sm80' names (kernels.h).");
  m.def(
      "runs_on",
      [](const std::string& arch, int32_t cc) { return runs_on(parse_arch(arch), cc); }, py::arg("arch"),
      py::arg("compute_capability"),
      "Whether code built for `arch` (a variant dict's 'arch': 'any', 'sm80', 'sm90a', ...) runs on a GPU of that "
      "compute capability (major * 10 + minor).");
  m.def("arch_override", &arch_override,
        "The compute capability WAVETUNE_ARCH names, 0 where unset; read once per process (ValueError if malformed).");
  m.def("served_compute_capability", &served_compute_capability,
        "The compute capability the kernels serve the current device as (WAVETUNE_ARCH's where set); 0 on a host "
        "without a usable device and without WAVETUNE_ARCH.");
  m.def("unsupported_device_error", &unsupported_device_error, py::arg("device"), py::arg("name"), py::arg("major"),
        py::arg("minor"), "Why a GPU of that compute capability cannot run wavetune; empty from 8.0 on.");
  m.def("no_device_reason", &no_device_reason,
        "Why this process can use no CUDA device, in the CUDA runtime's words; empty when it can use one.");
  m.def("device_properties", [] {
    DeviceProperties p = device_properties();
    py::dict d;
    d["name"] = p.name;
    d["sm_count"] = p.sm_count;
    d["l2_bytes"] = p.l2_bytes;
    d["compute_capability"] = py::make_tuple(p.cc_major, p.cc_minor);
    d["memory_bytes_per_s"] = p.memory_bytes_per_s;
    return d;
  });

  py::class_<Selector, std::shared_ptr<Selector>>(m, "Selector",
                                                  "A tuned table bound to this build's compiled variants.")
      .def(py::init(&open_table), py::arg("path"), py::arg("family") = "gemm",
           "A table file of a kernel family (families()) bound to that family's compiled variants.")
      .def(py::init(&selector_over), py::arg("path"), py::arg("family"), py::arg("variants"),
           "A table file bound to the given variants (dicts as the family's variant listing gives them) instead of "
           "the compiled ones: the choices of a build with those variants, for explaining a table anywhere.")
      .def_property_readonly("family", &Selector::family)
      .def_property_readonly("scales", &Selector::scales)
      .def_property_readonly(
          "key_fields",
          [](const Selector& s) {
            std::vector<std::string> names;
            for (const TableFamily::KeyField& f : find_table_family(s.family())->key_fields) names.push_back(f.name);
            return names;
          },
          "The names of the family's problem key fields, which select and explain take by keyword.")
      .def_property_readonly(
          "selects_batch_invariantly",
          [](const Selector& s) {
            return find_table_family(s.family())->selection == TableFamily::Selection::priors_and_floors;
          },
          "Whether select takes batch_invariance (Selector::select_invariant): a family that selects by its own "
          "mapping (attention) keeps its choose from depending on the batch instead.")
      .def("check_device", &Selector::check_device, py::arg("gpu_name"), py::arg("sm_count"))
      .def("meta", [](const Selector& s) { return s.table().meta; })
      .def("config_count", [](const Selector& s) { return s.table().configs.size(); })
      .def("variant_names",
           [](const Selector& s) {
             std::vector<std::string> names;
             for (const TableConfig& c : s.table().configs) names.push_back(c.variant_name);
             return names;
           },
           "The variant each config names, in config-id order, compiled or not.")
      .def("exact_count", [](const Selector& s) { return s.table().exact.size(); })
      .def("memory_bytes_per_us", [](const Selector& s) { return s.table().memory_bytes_per_us; })
      .def("traffic_bytes_per_us", [](const Selector& s) { return s.table().traffic_bytes_per_us; })
      .def("compute_flop_per_us", [](const Selector& s) { return s.table().compute_flop_per_us; })
      .def("skipped_configs", &Selector::skipped_configs)
      .def("sm_count", &Selector::sm_count)
      .def("select",
           [](const Selector& s, const std::string& dtype, const std::string& b_layout, const py::handle& m_,
              const py::handle& n, const py::handle& k, bool exact, const py::handle& groups,
              const std::string& batch_invariance, const py::kwargs& key) {
             const Problem p = make_lookup_problem(s, dtype, b_layout, m_, n, k, groups, key);
             const BatchInvariance level = bindings::choice_options(batch_invariance).batch_invariance;
             if (level != BatchInvariance::off && !exact) {
               throw std::invalid_argument("a batch-invariant choice takes the exact entries of its class: exact=False "
                                           "goes with batch_invariance='off' only");
             }
             Choice c = level != BatchInvariance::off ? s.select_invariant(p, level) : exact ? s.select(p)
                                                                                              : s.select_model(p);
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
           py::arg("groups") = 1, py::arg("batch_invariance") = "off",
           "The table's choice for a problem (groups: experts, for a grouped table; M is then all their rows; for "
           "an attention table M, N, K, groups are seqlen_q, seqlen_k, head_dim, batch); the family's key fields "
           "(key_fields: an attention table's heads_q, heads_kv, causal) by keyword; exact=False skips the exact "
           "entries (the model's choice alone); batch_invariance: 'reduction_order' or 'config' for the "
           "batch-invariant choice (Selector::select_invariant, lookup.h).")
      .def("explain", [](const Selector& s, const std::string& dtype, const std::string& b_layout,
                         const py::handle& m_, const py::handle& n, const py::handle& k, const py::handle& groups,
                         const py::kwargs& key) {
        py::list out;
        const Problem problem = make_lookup_problem(s, dtype, b_layout, m_, n, k, groups, key);
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
          d["batch_invariant"] = p.order.fixed;
          d["order_class"] = p.order.order_class;
          d["reduction_order"] = p.order.condition;
          out.append(d);
        }
        return out;
      }, py::arg("dtype"), py::arg("b_layout"), py::arg("m"), py::arg("n"), py::arg("k"), py::arg("groups") = 1,
      "Every candidate's coordinates and prediction for a problem, as select takes it, and its launch's reduction "
      "order (batch_invariance.h): batch_invariant (whether fixed), order_class, reduction_order (in words).");

  m.def("table_slug", &table_slug, py::arg("gpu_name"),
        "The table file stem for a GPU name (docs/tables.md): \"NVIDIA H200\" -> \"nvidia-h200\".");
  m.def(
      "table_family",
      [](const std::string& path) {
        const Table table = Table::load(path);
        const auto family = table.meta.find("family");
        return family == table.meta.end() ? std::string("gemm") : family->second;  // the default (docs/tables.md)
      },
      py::arg("path"),
      "The kernel family a table file is for (its meta family, gemm where it names none), as the loader reads the "
      "file: ValueError where it is not a readable table.");

  m.def("use_table", &use_table, py::arg("device"), py::arg("selector").none(true), py::arg("family") = "gemm",
        py::arg("scales") = "",
        "Make launches of the table's family (families()) and scales mode choose from it on a device (None: back "
        "to the built-in heuristic of `family` and `scales`).");
  m.def("table_scales", &table_scales, py::arg("family"),
        "The scales modes of a family's tables, one table per GPU model and mode (\"\": unscaled operands).");

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
      "Load a variant library compiled at run time (the Python package's on-demand compiles) and register its "
      "variants with their family: (family, variant names, how many were new). ValueError when it does not fit "
      "this build.");

  m.def(
      "config_space",
      [](const std::string& family) -> py::object {
        const ConfigSpace* space = find_config_space(family);
        if (!space) return py::none();
        py::list variants, heuristic_set;
        for (const VariantInfo& v : space->variants) variants.append(bindings::variant_dict(v));
        for (const char* name : space->heuristic_set) heuristic_set.append(name);
        py::dict d;
        d["hash"] = space->hash;
        d["variants"] = variants;
        d["heuristic_set"] = heuristic_set;
        py::dict scales_hashes;
        for (const auto& [mode, hash] : space->scales_hashes) scales_hashes[mode] = hash;
        d["scales_hashes"] = scales_hashes;
        return d;
      },
      py::arg("family"),
      "The config space the family's variants were generated from, compiled or not: {hash, variants (dicts as the "
      "family's variant listing gives them), heuristic_set (the names of those its built-in choice takes)}; None "
      "for a family with built-in variants only.");
  m.def("families", [] {
    py::list out;
    for (const KernelFamily* f : kernel_families()) out.append(f->name);
    return out;
  }, "The kernel families compiled into this build (family.h), by name.");
  // Each family's own functions, in family order.
  std::vector<bindings::FamilyBindings*> families = family_bindings();
  std::sort(families.begin(), families.end(), [](const bindings::FamilyBindings* a,
                                                 const bindings::FamilyBindings* b) {
    return std::string(a->family) < std::string(b->family);
  });
  for (bindings::FamilyBindings* f : families) {
    f->index = family_index(f->family);
    f->scales_count = table_scales(f->family).size();
    f->bind(m);
  }
}

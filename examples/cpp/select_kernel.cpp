// Picks the GEMM kernel for one problem from a tuned table, as a C++ inference engine would, and prints it.
//
//   cmake -S examples/cpp -B build/example -DCMAKE_PREFIX_PATH=$(python -m wavetune --cmake-dir)
//   cmake --build build/example
//   build/example/select_kernel tables/nvidia-h200.wtt 16 4096 4096 bf16 col [--explain]
//
// An engine would then launch the choice on its own stream (this example does not, so it runs on machines
// without a GPU):
//   wavetune::GemmProblem problem{m, n, k, a, lda, b, ldb, d, ldd, wavetune::DType::bf16, wavetune::BLayout::col};
//   size_t bytes = wavetune::gemm_workspace_bytes(problem, choice.variant, choice.micro);
//   wavetune::gemm(problem, choice.variant, choice.micro, workspace, bytes, stream);  // workspace: the engine's
//
// Exits non-zero with the error message when the table is unusable (missing, corrupt, tuned against
// another build or GPU) or has no compiled config for the problem (an engine falls back to
// wavetune::default_variant then).
#include <charconv>
#include <cstdint>
#include <cstring>
#include <exception>
#include <iomanip>
#include <iostream>
#include <stdexcept>
#include <string>

#include "wavetune/kernels.h"
#include "wavetune/lookup.h"

namespace {

int64_t extent(const char* s, const char* what) {
  int64_t v = 0;
  const char* end = s + std::strlen(s);
  const auto [ptr, ec] = std::from_chars(s, end, v);
  if (ec != std::errc() || ptr != end || v < 1) {
    throw std::invalid_argument(std::string(what) + " must be a positive integer, got '" + s + "'");
  }
  return v;
}

const char* variant_name(int32_t id) {
  const wavetune::VariantInfo* v = wavetune::find_variant(id);
  return v ? v->name : "?";
}

int run(int argc, char** argv) {
  bool explain = false;
  const char* args[6] = {};
  int count = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--explain") == 0) {
      explain = true;
    } else if (count < 6) {
      args[count++] = argv[i];
    } else {
      count = 7;
    }
  }
  if (count < 4 || count > 6) {
    std::cerr << "usage: select_kernel <table.wtt> <M> <N> <K> [bf16|fp16] [col|row] [--explain]\n";
    return 2;
  }
  wavetune::Problem p{wavetune::DType::bf16, wavetune::BLayout::col, extent(args[1], "M"), extent(args[2], "N"),
                      extent(args[3], "K")};
  if (count > 4) {
    const std::string dtype = args[4];
    if (dtype != "bf16" && dtype != "fp16") {
      throw std::invalid_argument("dtype must be bf16 or fp16, got '" + dtype + "'");
    }
    p.dtype = dtype == "bf16" ? wavetune::DType::bf16 : wavetune::DType::fp16;
  }
  if (count > 5) {
    const std::string layout = args[5];
    if (layout != "col" && layout != "row") {
      throw std::invalid_argument("B layout must be col or row, got '" + layout + "'");
    }
    p.b_layout = layout == "col" ? wavetune::BLayout::col : wavetune::BLayout::row;
  }

  // Once per process: load the table, resolve it against this build, check it was tuned on this GPU.
  wavetune::Selector selector(wavetune::Table::load(args[0]), wavetune::variants(),
                              wavetune::build_info().config_space_hash);
  const wavetune::Table& table = selector.table();
  std::cout << "table: " << table.origin << " (" << table.meta_value("gpu_name") << ", " << selector.sm_count()
            << " SMs, " << table.configs.size() << " configs, " << selector.skipped_configs()
            << " skipped as not compiled)\n";
  try {
    const wavetune::DeviceProperties device = wavetune::device_properties();
    selector.check_device(device.name, device.sm_count);
    std::cout << "device: " << device.name << " matches the table\n";
  } catch (const wavetune::RuntimeError& e) {  // no GPU or no kernels: nothing to check against
    std::cout << "device: not checked (" << e.what() << ")\n";
  }

  // Per GEMM call: a cached lookup (tens of nanoseconds once warm).
  const wavetune::Choice c = selector.select(p);
  std::cout << std::setprecision(10);
  std::cout << "problem: " << to_string(p.dtype) << " " << to_string(p.b_layout) << " M=" << p.m << " N=" << p.n
            << " K=" << p.k << "\n"
            << "variant: " << variant_name(c.variant) << " (id " << c.variant << ")\n"
            << "config: " << c.config << "\n"
            << "decomposition: " << to_string(c.micro.decomposition) << " splits=" << c.micro.splits << "\n"
            << "raster: " << to_string(c.micro.raster) << " max_swizzle=" << c.micro.max_swizzle << "\n"
            << "predicted_us: " << c.predicted_us << "\n"
            << "source: " << to_string(c.source) << "\n";
  if (explain) {
    for (const wavetune::Prediction& x : selector.explain(p)) {
      std::cout << "candidate: config=" << x.config << " variant=" << variant_name(x.variant) << " G=" << x.coords.grid
                << " L=" << x.coords.k_iters << " C=" << x.coords.capacity << " w=" << x.coords.waves
                << " predicted_us=" << x.predicted_us << " choosable=" << x.choosable << "\n";
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "select_kernel: " << e.what() << "\n";
    return 1;
  }
}

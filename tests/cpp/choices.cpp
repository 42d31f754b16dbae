// Prints the launch a call with no forced config makes, per problem read from stdin, through the public C++
// API only (each family's wavetune::choose), for tests/test_choice_policy.py:
//
//   choices [--batch-invariance=LEVEL] [family=table.wtt ...] < problems
//   gemm <dtype> <b_layout> <m> <n> <k>                                -> <variant> <decomposition> <splits> <raster> <swizzle>
//   grouped_gemm <dtype> <rows> <experts> <n> <k> [<scales>]           -> <variant>   (scales: row, block128)
//   attention <dtype> <batch> <seqlen_q> <seqlen_k> <heads_q> <heads_kv> <head_dim> <causal>  -> <variant> <splits>
//   scaled_gemm <dtype> <m> <n> <k> <scales>                           -> <variant>   (scales: tensor, row; both operands)
//   paged_attention <dtype> <batch> <heads_q> <heads_kv> <head_dim> <seq_len>  -> <variant> <splits>
//
// The lines of `family` choose with the table given as family=path, opened as the family its file names (so a
// family without tables can be handed one, which it refuses), else with none. One output line per input line;
// an error prints "error: <message>" on that line. --batch-invariance (off, reduction_order, config) is every
// choice's ChoiceOptions (types.h).
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "wavetune/attention.h"
#include "wavetune/family.h"
#include "wavetune/grouped.h"
#include "wavetune/kernels.h"
#include "wavetune/scaled_gemm.h"

namespace {

wavetune::DType dtype_of(const std::string& s) { return s == "fp16" ? wavetune::DType::fp16 : wavetune::DType::bf16; }

std::string choice_line(const std::string& line,
                        const std::map<std::string, std::shared_ptr<wavetune::Selector>>& tables,
                        const wavetune::ChoiceOptions& options) {
  std::istringstream in(line);
  std::string family, dtype;
  in >> family >> dtype;
  const auto found = tables.find(family);
  const wavetune::Selector* table = found == tables.end() ? nullptr : found->second.get();
  std::ostringstream out;
  if (family == "gemm") {
    std::string layout;
    int32_t m = 0, n = 0, k = 0;
    in >> layout >> m >> n >> k;
    const auto b_layout = layout == "row" ? wavetune::BLayout::row : wavetune::BLayout::col;
    const wavetune::GemmProblem p{m, n, k, nullptr, k, nullptr, b_layout == wavetune::BLayout::col ? k : n, nullptr,
                                  n, dtype_of(dtype), b_layout};
    const wavetune::Launch l = wavetune::choose(p, table, options);
    out << l.variant << " " << to_string(l.micro.decomposition) << " " << l.micro.splits << " "
        << to_string(l.micro.raster) << " " << l.micro.max_swizzle;
  } else if (family == "grouped_gemm") {
    int32_t rows = 0, experts = 0, n = 0, k = 0;
    std::string scales;
    in >> rows >> experts >> n >> k >> scales;
    wavetune::GroupedGemmProblem p{rows, experts, n, k, nullptr, nullptr, nullptr, nullptr, dtype_of(dtype)};
    for (const wavetune::GroupedScalesLayout& layout : wavetune::kGroupedScales) {
      if (scales == layout.name) p.scales = static_cast<wavetune::GroupedScales>(&layout - wavetune::kGroupedScales);
    }
    out << wavetune::choose(p, table, options).variant;
  } else if (family == "attention") {
    wavetune::AttentionProblem p{};
    int causal = 0, routes = 0;  // routes: bits cudnn, paged, cudnn_copies (AttentionRoutes)
    in >> p.batch >> p.seqlen_q >> p.seqlen_k >> p.heads_q >> p.heads_kv >> p.head_dim >> causal >> routes;
    p.causal = causal != 0;
    // Contiguous [batch, seq, heads, head_dim] tensors, as torch lays them out.
    const int64_t hd = p.head_dim;
    p.q = p.out = {nullptr, int64_t(p.seqlen_q) * p.heads_q * hd, int64_t(p.heads_q) * hd, hd};
    p.k = p.v = {nullptr, int64_t(p.seqlen_k) * p.heads_kv * hd, int64_t(p.heads_kv) * hd, hd};
    p.dtype = dtype_of(dtype);
    p.scale = 1.0f;
    const wavetune::Launch l =
        wavetune::choose(p, table, {(routes & 1) != 0, (routes & 2) != 0, (routes & 4) != 0}, options);
    out << l.variant << " " << l.micro.splits;
  } else if (family == "scaled_gemm") {
    int32_t m = 0, n = 0, k = 0;
    std::string scales;
    in >> m >> n >> k >> scales;
    const auto kind = scales == "row" ? wavetune::ScaleKind::row : wavetune::ScaleKind::tensor;
    const wavetune::ScaledGemmProblem p{m, n, k, nullptr, k, nullptr, k, nullptr, n, dtype_of(dtype), nullptr, kind,
                                        nullptr, kind};
    out << wavetune::choose(p, table, options).variant;
  } else if (family == "paged_attention") {
    wavetune::PagedAttentionProblem p{};
    in >> p.batch >> p.heads_q >> p.heads_kv >> p.head_dim >> p.max_seq_len;
    // A dense cache [batch, seq_len, heads_kv, head_dim] (a page per sequence); the choice reads sizes only, so
    // any aligned address stands for the tensors.
    const void* data = reinterpret_cast<const void*>(256);
    const int64_t hd = p.head_dim;
    p.q = p.k_cache = p.v_cache = data;
    p.out = const_cast<void*>(data);
    p.q_batch_stride = p.out_batch_stride = p.heads_q * hd;
    p.q_head_stride = p.out_head_stride = p.head_stride = hd;
    p.row_stride = p.heads_kv * hd;
    p.page_stride = p.max_seq_len * p.row_stride;
    p.page_size = p.max_seq_len;
    p.scale = 1.0f;
    p.dtype = dtype_of(dtype);
    const wavetune::Launch l = wavetune::choose(p, table, options);
    out << l.variant << " " << l.micro.splits;
  } else {
    out << "error: unknown family '" << family << "'";
  }
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::shared_ptr<wavetune::Selector>> tables;
  wavetune::ChoiceOptions options;
  const std::string level_flag = "--batch-invariance=";
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg.rfind(level_flag, 0) == 0) {
        const std::string level = arg.substr(level_flag.size());
        bool known = false;
        for (auto v : {wavetune::BatchInvariance::off, wavetune::BatchInvariance::reduction_order,
                       wavetune::BatchInvariance::config}) {
          if (level == to_string(v)) options.batch_invariance = v, known = true;
        }
        if (!known) throw std::invalid_argument("unknown batch invariance level '" + level + "'");
        continue;
      }
      const size_t eq = arg.find('=');
      const std::string path = arg.substr(eq + 1);
      const auto& meta = wavetune::Table::load(path).meta;
      const auto named = meta.find("family");
      tables[arg.substr(0, eq)] = wavetune::open_table(path, named == meta.end() ? "gemm" : named->second);
    }
  } catch (const std::exception& e) {
    std::cerr << "choices: " << e.what() << "\n";
    return 1;
  }
  for (std::string line; std::getline(std::cin, line);) {
    try {
      std::cout << choice_line(line, tables, options) << "\n";
    } catch (const std::exception& e) {
      std::cout << "error: " << e.what() << "\n";
    }
  }
  return 0;
}

// How long the lookup engine takes to decide which kernel to launch, per GEMM call.
//
//   cmake -S benchmarks/cpp -B build/bench -DCMAKE_PREFIX_PATH=$(python -m wavetune --cmake-dir)
//   cmake --build build/bench && build/bench/decision_time tables/nvidia-h200.wtt [iterations]
//
// Over LLM linear-layer shapes (M = tokens: powers of two 1..16384 and a few odd counts; (N, K) of Llama 3
// 8B and 70B layers), in the dtype and B layout with the most candidates in the table:
//   cold: Selector::select_uncached, the exact table then the model over every candidate;
//   warm: Selector::select after one warm-up pass, i.e. the cache hit an engine sees in steady state.
// Each is the median over passes of the mean ns per decision. The last line is JSON.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "wavetune/kernels.h"
#include "wavetune/lookup.h"

namespace {

constexpr int kPasses = 7;

std::vector<wavetune::Problem> problems(wavetune::DType dtype, wavetune::BLayout layout) {
  std::vector<int64_t> ms;
  for (int64_t m = 1; m <= 16384; m *= 2) ms.push_back(m);
  for (int64_t m : {3, 7, 24, 100, 333, 1000, 3000, 5000}) ms.push_back(m);
  const int64_t nk[][2] = {{6144, 4096},  {4096, 4096},  {28672, 4096}, {4096, 14336},   // Llama 3 8B
                           {10240, 8192}, {8192, 8192}, {57344, 8192}, {8192, 28672}};  // Llama 3 70B
  std::vector<wavetune::Problem> out;
  for (const auto& [n, k] : nk) {
    for (int64_t m : ms) out.push_back({dtype, layout, m, n, k});
  }
  return out;
}

struct Stats {
  double median, min, max;
};

// Mean ns per decision of `decide` over `iterations` rounds of `list`, per pass; the median of the passes.
template <class Decide>
Stats measure(const std::vector<wavetune::Problem>& list, int iterations, Decide decide) {
  std::vector<double> per_pass;
  int64_t sink = 0;
  for (int pass = 0; pass < kPasses; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) {
      for (const wavetune::Problem& p : list) sink += decide(p).config;
    }
    const auto stop = std::chrono::steady_clock::now();
    const double ns = std::chrono::duration<double, std::nano>(stop - start).count();
    per_pass.push_back(ns / (double(iterations) * double(list.size())));
  }
  if (sink == -1) std::printf("unreachable\n");  // keeps the decisions observable
  std::sort(per_pass.begin(), per_pass.end());
  return {per_pass[per_pass.size() / 2], per_pass.front(), per_pass.back()};
}

int run(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: decision_time <table.wtt> [iterations]\n");
    return 2;
  }
  const int iterations = argc == 3 ? std::atoi(argv[2]) : 200;
  if (iterations < 1) {
    std::fprintf(stderr, "decision_time: iterations must be a positive integer, got '%s'\n", argv[2]);
    return 2;
  }
  const wavetune::Selector selector(wavetune::Table::load(argv[1]), wavetune::variants(),
                                    wavetune::build_info().config_space_hash);

  wavetune::DType dtype = wavetune::DType::bf16;
  wavetune::BLayout layout = wavetune::BLayout::col;
  for (wavetune::DType d : {wavetune::DType::bf16, wavetune::DType::fp16}) {
    for (wavetune::BLayout l : {wavetune::BLayout::col, wavetune::BLayout::row}) {
      if (selector.candidate_count(d, l) > selector.candidate_count(dtype, layout)) dtype = d, layout = l;
    }
  }
  const size_t candidates = selector.candidate_count(dtype, layout);
  if (candidates == 0) {
    std::fprintf(stderr, "decision_time: %s has no config compiled into this build\n", argv[1]);
    return 1;
  }
  const std::vector<wavetune::Problem> list = problems(dtype, layout);

  const Stats cold = measure(list, iterations, [&](const wavetune::Problem& p) { return selector.select_uncached(p); });
  for (const wavetune::Problem& p : list) selector.select(p);  // warm-up: fill the cache
  const Stats warm = measure(list, iterations, [&](const wavetune::Problem& p) { return selector.select(p); });

  std::printf("table %s: %zu candidates for %s %s, %zu problems x %d iterations x %d passes\n", argv[1], candidates,
              to_string(dtype), to_string(layout), list.size(), iterations, kPasses);
  std::printf("%-28s %10s %10s %10s\n", "ns per decision", "median", "min", "max");
  std::printf("%-28s %10.1f %10.1f %10.1f\n", "cold (select_uncached)", cold.median, cold.min, cold.max);
  std::printf("%-28s %10.1f %10.1f %10.1f\n", "warm (select, cached)", warm.median, warm.min, warm.max);
  std::printf("{\"cold_ns\": %.1f, \"warm_ns\": %.1f, \"candidates\": %zu, \"problems\": %zu}\n", cold.median,
              warm.median, candidates, list.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decision_time: %s\n", e.what());
    return 1;
  }
}

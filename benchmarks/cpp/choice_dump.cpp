// Every choice of a table for seeded random problems of its family, as if every variant of the config space
// were compiled: what a change of the lookup library must leave bit for bit as it was. Uses only the lookup
// library's Selector (lookup.h), so it builds against any version of it and needs no GPU or kernels:
//
//   python python/wavetune/codegen/config_space.py cutlass_configs/sm90_gemm.toml <other spaces> gen --kernel-set=full
//   g++ -O2 -std=c++17 -Icsrc/include -Igen benchmarks/cpp/choice_dump.cpp <libwavetune_lookup.so.N> -o dump
//   ./dump gemm tables/nvidia-h100-80gb-hbm3.wtt 200000 > before.txt     # and again after the change; diff
//
// Prints one line per problem: the problem, then the choice (variant name, decomposition, splits, raster,
// swizzle, config, source, the predicted time's bits) or the refusal's message.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "families.inc"
#include "wavetune/attention.h"
#include "wavetune/family.h"
#include "wavetune/lookup.h"

namespace {

using namespace wavetune;

#define WAVETUNE_INFO(...) WAVETUNE_VARIANT_INFO(__VA_ARGS__),

// The variants of a family's whole config space (and, for gemm, the cuBLAS candidates as the kernel library
// lists them: ids from kLibraryVariantIds, a nominal 128x128x64 tile; for attention its candidates).
std::vector<VariantInfo> space(const std::string& family) {
  std::vector<VariantInfo> all;
#define WAVETUNE_FAMILY(NAME, HASH, LIST) \
  if (family == NAME) all = {LIST(WAVETUNE_INFO)};
  WAVETUNE_GENERATED_FAMILIES(WAVETUNE_FAMILY)
#undef WAVETUNE_FAMILY
  if (family == "attention") {
    const std::vector<VariantInfo> candidates = attention_candidates();
    all.insert(all.end(), candidates.begin(), candidates.end());
  }
  if (family != "gemm") return all;
  static const char* const kNames[2][2] = {{"cublas_bf16_bcol", "cublas_bf16_brow"},
                                           {"cublas_fp16_bcol", "cublas_fp16_brow"}};
  for (DType dtype : {DType::bf16, DType::fp16}) {
    for (BLayout layout : {BLayout::col, BLayout::row}) {
      all.push_back({kLibraryVariantIds + 2 * int32_t(dtype) + int32_t(layout), kNames[int(dtype)][int(layout)], dtype,
                     layout, false, Schedule::cublas, 128, 128, 64, 1, 1, TileScheduler::persistent, arch::any});
    }
  }
  return all;
}

const char* space_hash(const std::string& family) {
#define WAVETUNE_FAMILY(NAME, HASH, LIST) \
  if (family == NAME) return HASH;
  WAVETUNE_GENERATED_FAMILIES(WAVETUNE_FAMILY)
#undef WAVETUNE_FAMILY
  return "";
}

// A random problem of the family in the data the shipped tables hold (bf16, column-major B, head dim 128):
// LLM-like ranges.
Problem random_problem(const std::string& family, std::mt19937_64& rng) {
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Problem p{DType::bf16, BLayout::col, uniform(1, 16384), 8 * uniform(1, 4096), 8 * uniform(1, 4096)};
  if (family == "attention") {  // key: heads_q, heads_kv, causal (attention_heuristic.h)
    p.key[1] = int64_t(1) << uniform(0, 4);
    p.key[0] = p.key[1] << uniform(0, 3);
    p.n = uniform(1, 131072);
    p.m = uniform(0, 1) ? 1 : uniform(1, std::min<int64_t>(p.n, 16384));
    p.k = 128;
    p.groups = uniform(1, 256);
    p.key[2] = uniform(0, 1);
  } else if (find_table_family(family)->max_groups > 1) {
    p.groups = uniform(1, 256);  // experts
  }
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: choice_dump <family> <table.wtt> <count>\n");
    return 2;
  }
  const std::string family = argv[1];
  try {
    const std::vector<VariantInfo> variants = space(family);
    const Selector selector(Table::load(argv[2]), variants, space_hash(family), family);
    std::mt19937_64 rng(20261125);
    for (long i = 0, count = std::stol(argv[3]); i < count; ++i) {
      const Problem p = random_problem(family, rng);
      // Every line has nine fields: a family without a key prints one query and KV head, no mask.
      const bool keyed = family == "attention";
      const int64_t key[3] = {keyed ? p.key[0] : 1, keyed ? p.key[1] : 1, p.key[2]};
      std::printf("%d %d %lld %lld %lld %lld %lld %lld %d: ", int(p.dtype), int(p.b_layout), (long long)p.m,
                  (long long)p.n, (long long)p.k, (long long)p.groups, (long long)key[0], (long long)key[1],
                  int(key[2]));
      try {
        const Choice c = selector.select(p);
        uint64_t bits = 0;
        std::memcpy(&bits, &c.predicted_us, sizeof bits);
        const VariantInfo* v = nullptr;
        for (const VariantInfo& info : variants) v = info.id == c.variant ? &info : v;
        std::printf("%s %s %d %s %d %d %s %016llx\n", v ? v->name : "?", to_string(c.micro.decomposition),
                    c.micro.splits, to_string(c.micro.raster), c.micro.max_swizzle, c.config, to_string(c.source),
                    (unsigned long long)bits);
      } catch (const std::exception& e) {
        std::printf("refused: %s\n", e.what());
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "choice_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}

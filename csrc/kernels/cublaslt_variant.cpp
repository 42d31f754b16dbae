// cuBLASLt as one more variant per dtype and B layout: the kernel `torch.matmul` runs, scored and chosen
// by the same tables and selector as the CUTLASS variants (docs/kernels.md, "cuBLASLt as a candidate").
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "variant_ops.h"
#include "variant_registry.h"
#include "wavetune/errors.h"

namespace wavetune::detail {
namespace {

// NOTES: cuBLASLt is opened with dlopen and declared here from its C ABI (cublasLt.h, CUDA 12 and 13),
// not linked: the package then builds where the toolkit has no cuBLAS headers (CI) and imports where no
// libcublasLt is installed, with the candidate absent. The enumerators are the header's values.
using Status = int;  // cublasStatus_t, 0: success
using Handle = void*;
using MatmulDesc = void*;
using Layout = void*;
using Preference = void*;
struct Algo {
  uint64_t data[8];
};
struct HeuristicResult {
  Algo algo;
  size_t workspace_bytes;
  Status state;
  float waves;
  int reserved[4];
};
constexpr int kComputeF32 = 68;                   // CUBLAS_COMPUTE_32F
constexpr int kF32 = 0, kF16 = 2, kBF16 = 14;     // cudaDataType
constexpr int kOpN = 0, kOpT = 1;                 // cublasOperation_t
constexpr int kDescTransA = 3, kDescTransB = 4;   // cublasLtMatmulDescAttributes_t
constexpr int kPrefMaxWorkspace = 1;              // cublasLtMatmulPreferenceAttributes_t (uint64_t)
constexpr int kPrefAlignA = 5, kPrefAlignD = 8;   // ..._MIN_ALIGNMENT_{A,B,C,D}_BYTES (uint32_t), 5-8
// 32 MiB: what cuBLAS itself reserves on Hopper; kernels that need more are not offered.
constexpr uint64_t kMaxWorkspace = uint64_t(32) << 20;

struct Api {
  Status (*create)(Handle*);
  Status (*desc_create)(MatmulDesc*, int, int);
  Status (*desc_destroy)(MatmulDesc);
  Status (*desc_set)(MatmulDesc, int, const void*, size_t);
  Status (*layout_create)(Layout*, int, uint64_t, uint64_t, int64_t);
  Status (*layout_destroy)(Layout);
  Status (*pref_create)(Preference*);
  Status (*pref_destroy)(Preference);
  Status (*pref_set)(Preference, int, const void*, size_t);
  Status (*heuristic)(Handle, MatmulDesc, Layout, Layout, Layout, Layout, Preference, int, HeuristicResult*, int*);
  Status (*matmul)(Handle, MatmulDesc, const void*, const void*, Layout, const void*, Layout, const void*,
                   const void*, Layout, void*, Layout, const Algo*, void*, size_t, Stream);
  const char* (*status_name)(Status);
};

// The library: the soname of this build's CUDA major version (the copy torch has loaded, or one on the
// loader's path), else that file in the directories WAVETUNE_CUBLASLT lists (':'-separated; the Python
// package adds the nvidia-cublas wheel's). WAVETUNE_CUBLASLT=0 turns the candidate off. nullptr: none.
void* open_library() {
  const std::string soname = "libcublasLt.so." + std::to_string(WAVETUNE_CUDA_MAJOR);
  const char* env = std::getenv("WAVETUNE_CUBLASLT");
  const std::string dirs = env ? env : "";
  if (dirs == "0") return nullptr;
  if (void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
  for (size_t begin = 0; begin < dirs.size();) {
    const size_t end = std::min(dirs.find(':', begin), dirs.size());
    const std::string path = dirs.substr(begin, end - begin) + "/" + soname;
    if (void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
    begin = end + 1;
  }
  return nullptr;
}

const Api* api() {
  static const Api* loaded = []() -> const Api* {
    void* lib = open_library();
    if (!lib) return nullptr;
    static Api a;
    bool complete = true;
    auto bind = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
      complete = complete && fn != nullptr;
    };
    bind(a.create, "cublasLtCreate");
    bind(a.desc_create, "cublasLtMatmulDescCreate");
    bind(a.desc_destroy, "cublasLtMatmulDescDestroy");
    bind(a.desc_set, "cublasLtMatmulDescSetAttribute");
    bind(a.layout_create, "cublasLtMatrixLayoutCreate");
    bind(a.layout_destroy, "cublasLtMatrixLayoutDestroy");
    bind(a.pref_create, "cublasLtMatmulPreferenceCreate");
    bind(a.pref_destroy, "cublasLtMatmulPreferenceDestroy");
    bind(a.pref_set, "cublasLtMatmulPreferenceSetAttribute");
    bind(a.heuristic, "cublasLtMatmulAlgoGetHeuristic");
    bind(a.matmul, "cublasLtMatmul");
    bind(a.status_name, "cublasLtGetStatusName");
    return complete ? &a : nullptr;
  }();
  return loaded;
}

void check(Status status, const char* what) {
  if (status != 0) WAVETUNE_FAIL("cuBLASLt ", what, " failed: ", api()->status_name(status));
}

// One handle per device, made on first use there.
Handle handle(const DeviceInfo& dev) {
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<Handle, kMaxDevices> handles{};
  std::call_once(once[dev.device], [&] { check(api()->create(&handles[dev.device]), "handle creation"); });
  return handles[dev.device];
}

// The descriptors and the heuristic's algorithm for one shape. cuBLASLt is column-major, so it computes
// D^T[n,m] = B^T[n,k] A^T[k,m]: row-major A is A^T with ld lda, row-major D is D^T with ld ldd, and B is
// B^T transposed (column-major B, an nn.Linear weight) or as it is (row-major B).
struct Plan {
  MatmulDesc desc = nullptr;
  Layout a = nullptr, b = nullptr, d = nullptr;
  Algo algo{};
  size_t workspace_bytes = 0;
  bool found = false;  // the heuristic returned an algorithm

  void destroy() const {
    if (desc) api()->desc_destroy(desc);
    for (Layout l : {a, b, d}) {
      if (l) api()->layout_destroy(l);
    }
  }
};

Plan make_plan(const GemmProblem& p, const DeviceInfo& dev) {
  const Api& lt = *api();
  const int type = p.dtype == DType::bf16 ? kBF16 : kF16;
  const bool b_col = p.b_layout == BLayout::col;
  Plan plan;
  Preference pref = nullptr;
  try {
    check(lt.desc_create(&plan.desc, kComputeF32, kF32), "matmul descriptor");
    const int trans_b = b_col ? kOpT : kOpN, no_trans = kOpN;
    check(lt.desc_set(plan.desc, kDescTransA, &trans_b, sizeof(int)), "matmul descriptor");
    check(lt.desc_set(plan.desc, kDescTransB, &no_trans, sizeof(int)), "matmul descriptor");
    check(lt.layout_create(&plan.b, type, b_col ? p.k : p.n, b_col ? p.n : p.k, p.ldb), "layout");
    check(lt.layout_create(&plan.a, type, p.k, p.m, p.lda), "layout");
    check(lt.layout_create(&plan.d, type, p.n, p.m, p.ldd), "layout");
    check(lt.pref_create(&pref), "preference");
    check(lt.pref_set(pref, kPrefMaxWorkspace, &kMaxWorkspace, sizeof(uint64_t)), "preference");
    const uint32_t alignment = 16;  // problem_error requires 16-byte aligned operands
    for (int attr = kPrefAlignA; attr <= kPrefAlignD; ++attr) {
      check(lt.pref_set(pref, attr, &alignment, sizeof(uint32_t)), "preference");
    }
    HeuristicResult result{};
    int count = 0;
    check(lt.heuristic(handle(dev), plan.desc, plan.b, plan.a, plan.d, plan.d, pref, 1, &result, &count),
          "heuristic");
    plan.found = count > 0 && result.state == 0;
    plan.algo = result.algo;
    plan.workspace_bytes = result.workspace_bytes;
  } catch (...) {
    if (pref) lt.pref_destroy(pref);
    plan.destroy();
    throw;
  }
  lt.pref_destroy(pref);
  return plan;
}

// NOTES: the heuristic query and the descriptors cost microseconds of host time, so each shape's plan is
// made once and kept (they are host objects; nothing on the GPU). Past kMaxPlans shapes a plan is made
// and destroyed per call instead of evicting one another thread may be using.
constexpr size_t kMaxPlans = 4096;

struct PlanCache {
  using Key = std::tuple<int, int32_t, int32_t, int32_t, int64_t, int64_t, int64_t, DType, BLayout>;
  struct Hash {
    size_t operator()(const Key& k) const {
      size_t h = 0;
      std::apply([&](const auto&... v) { ((h = h * 0x9e3779b97f4a7c15ull + size_t(v)), ...); }, k);
      return h;
    }
  };
  std::mutex mutex;
  std::unordered_map<Key, Plan, Hash> plans;
};

// The plan for p, and whether the caller must destroy it (the cache was full).
std::pair<Plan, bool> plan_for(const GemmProblem& p, const DeviceInfo& dev) {
  static PlanCache cache;
  const PlanCache::Key key{dev.device, p.m, p.n, p.k, p.lda, p.ldb, p.ldd, p.dtype, p.b_layout};
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    const auto found = cache.plans.find(key);
    if (found != cache.plans.end()) return {found->second, false};
  }
  Plan plan = make_plan(p, dev);
  std::lock_guard<std::mutex> lock(cache.mutex);
  if (cache.plans.size() >= kMaxPlans) return {plan, true};
  const auto [slot, inserted] = cache.plans.emplace(key, plan);
  if (!inserted) plan.destroy();  // another thread made it first
  return {slot->second, false};
}

constexpr const char* kNoAlgorithm = "cuBLASLt's heuristic offers no algorithm for this problem";

std::string why_not(const GemmProblem& p, const MicroParams&, const DeviceInfo& dev) {
  const auto [plan, owned] = plan_for(p, dev);
  if (owned) plan.destroy();
  return plan.found ? std::string() : kNoAlgorithm;
}

void run(const GemmProblem& p, const MicroParams&, const DeviceInfo& dev, Stream stream) {
  const auto [plan, owned] = plan_for(p, dev);
  struct Release {
    const Plan& plan;
    bool owned;
    ~Release() {
      if (owned) plan.destroy();
    }
  } release{plan, owned};
  if (!plan.found) WAVETUNE_INVALID(kNoAlgorithm);
  void* scratch = plan.workspace_bytes ? workspace(dev, stream, plan.workspace_bytes) : nullptr;
  const float alpha = 1, beta = 0;
  check(api()->matmul(handle(dev), plan.desc, &alpha, p.b, plan.b, p.a, plan.a, &beta, p.d, plan.d, p.d, plan.d,
                      &plan.algo, scratch, plan.workspace_bytes, stream),
        "matmul");
}

const VariantOps kOps{why_not, run};

}  // namespace

std::vector<VariantRegistry<VariantOps>::Entry> library_variants(int32_t first_id) {
  if (!api()) return {};
  // NOTES: cuBLASLt picks its own tile per problem; the table models it through a nominal 128x128x64
  // tile (its (G, L) mapping), and the calibration corrects the rest, as for any variant.
  std::vector<VariantRegistry<VariantOps>::Entry> out;
  static const char* const kNames[2][2] = {{"cublaslt_bf16_bcol", "cublaslt_bf16_brow"},
                                           {"cublaslt_fp16_bcol", "cublaslt_fp16_brow"}};
  for (DType dtype : {DType::bf16, DType::fp16}) {
    for (BLayout layout : {BLayout::col, BLayout::row}) {
      const int32_t id = first_id + 2 * int32_t(dtype) + int32_t(layout);
      out.push_back({{id, kNames[int(dtype)][int(layout)], dtype, layout, false, Schedule::cublaslt, 128, 128, 64,
                      1, 1, TileScheduler::persistent},
                     &kOps});
    }
  }
  return out;
}

}  // namespace wavetune::detail

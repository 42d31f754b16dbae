// cuBLAS as one more variant per dtype and B layout: the call `torch.matmul` makes (cublasGemmEx, default
// algorithm, fp32 accumulation), scored and chosen by the same tables and selector as the CUTLASS variants
// (docs/kernels.md, "cuBLAS as a candidate").
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "variant_ops.h"
#include "variant_registry.h"
#include "wavetune/errors.h"

namespace wavetune::detail {
namespace {

// NOTES: cuBLAS is opened with dlopen and declared here from its C ABI (cublas_api.h, CUDA 12 and 13), not
// linked: the package then builds where the toolkit has no cuBLAS headers (CI) and imports where no
// libcublas is installed, with the candidate absent. The enumerators are the header's values.
// NOTES: cublasGemmEx with torch's arguments, not cublasLtMatmul with a heuristic's first algorithm: only
// the call torch.matmul makes is sure to run the kernel users compare against (a GPU test checks that the
// outputs are equal bit for bit). Setting the stream and workspace per call is what torch does too.
// NOTES: with a bias the candidate runs cuBLASLt's bias epilogue, the call torch's addmm and F.linear make:
// the bias is added to the fp32 accumulator before the one rounding. cublasGemmEx with the bias copied into
// D and beta = 1 is less accurate (1.16x torch's error on an H100: cuBLAS may then reduce split-K partials in
// D's type).
using Status = int;  // cublasStatus_t, 0: success
using Handle = void*;
constexpr int kF16 = 2, kBF16 = 14;          // cudaDataType
constexpr int kComputeF32 = 68;              // CUBLAS_COMPUTE_32F
constexpr int kOpN = 0, kOpT = 1;            // cublasOperation_t
constexpr int kDefaultTensorOpAlgo = 99;     // CUBLAS_GEMM_DEFAULT_TENSOR_OP, as torch passes
// 32 MiB: the workspace cuBLAS recommends on Hopper, and what torch gives its handles there.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

// cublasLt.h's values (CUDA 12 and 13).
constexpr int kF32 = 0;                                  // cudaDataType CUDA_R_32F
constexpr int kDescTransA = 3, kDescTransB = 4, kDescEpilogue = 7, kDescBiasPointer = 8;
constexpr uint32_t kEpilogueBias = 4;                    // CUBLASLT_EPILOGUE_BIAS
constexpr int kPrefMaxWorkspaceBytes = 1;                // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
struct LtHeuristic {                                     // cublasLtMatmulHeuristicResult_t
  uint64_t algo[8];
  size_t workspace_bytes;
  Status state;
  float waves;
  int reserved[4];
};

struct Api {
  Status (*create)(Handle*);
  Status (*set_stream)(Handle, Stream);
  Status (*set_workspace)(Handle, void*, size_t);
  Status (*gemm)(Handle, int, int, int, int, int, const void*, const void*, int, int, const void*, int, int,
                 const void*, void*, int, int, int, int);
  const char* (*status_name)(Status);
  // cuBLASLt, for the bias epilogue.
  Status (*lt_create)(Handle*);
  Status (*desc_create)(Handle*, int, int);
  Status (*desc_set)(Handle, int, const void*, size_t);
  Status (*desc_destroy)(Handle);
  Status (*layout_create)(Handle*, int, uint64_t, uint64_t, int64_t);
  Status (*layout_destroy)(Handle);
  Status (*pref_create)(Handle*);
  Status (*pref_set)(Handle, int, const void*, size_t);
  Status (*pref_destroy)(Handle);
  Status (*heuristic)(Handle, Handle, Handle, Handle, Handle, Handle, Handle, int, LtHeuristic*, int*);
  Status (*matmul)(Handle, Handle, const void*, const void*, Handle, const void*, Handle, const void*, const void*,
                   Handle, void*, Handle, const void*, void*, size_t, Stream);
};

// A library by its soname for this build's CUDA major version (the copy torch has loaded, or one on the
// loader's path), else that file in the directories WAVETUNE_CUBLAS lists (':'-separated; the Python
// package adds the nvidia-cublas wheel's). WAVETUNE_CUBLAS=0 turns the candidate off. nullptr: none.
void* open_library(const char* name) {
  const std::string soname = std::string(name) + ".so." + std::to_string(WAVETUNE_CUDA_MAJOR);
  const char* env = std::getenv("WAVETUNE_CUBLAS");
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
    void* lib = open_library("libcublas");
    void* lt = open_library("libcublasLt");
    if (!lib || !lt) return nullptr;
    static Api a;
    bool complete = true;
    auto bind = [&](void* from, auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(from, symbol));
      complete = complete && fn != nullptr;
    };
    bind(lib, a.create, "cublasCreate_v2");
    bind(lib, a.set_stream, "cublasSetStream_v2");
    bind(lib, a.set_workspace, "cublasSetWorkspace_v2");
    bind(lib, a.gemm, "cublasGemmEx");
    bind(lib, a.status_name, "cublasGetStatusName");
    bind(lt, a.lt_create, "cublasLtCreate");
    bind(lt, a.desc_create, "cublasLtMatmulDescCreate");
    bind(lt, a.desc_set, "cublasLtMatmulDescSetAttribute");
    bind(lt, a.desc_destroy, "cublasLtMatmulDescDestroy");
    bind(lt, a.layout_create, "cublasLtMatrixLayoutCreate");
    bind(lt, a.layout_destroy, "cublasLtMatrixLayoutDestroy");
    bind(lt, a.pref_create, "cublasLtMatmulPreferenceCreate");
    bind(lt, a.pref_set, "cublasLtMatmulPreferenceSetAttribute");
    bind(lt, a.pref_destroy, "cublasLtMatmulPreferenceDestroy");
    bind(lt, a.heuristic, "cublasLtMatmulAlgoGetHeuristic");
    bind(lt, a.matmul, "cublasLtMatmul");
    return complete ? &a : nullptr;
  }();
  return loaded;
}

void check(Status status, const char* what) {
  if (status != 0) WAVETUNE_FAIL("cuBLAS ", what, " failed: ", api()->status_name(status));
}

// One handle per device, made on first use there. NOTES: a cuBLAS handle holds one stream and one
// workspace, so a call sets both and runs under the device's lock: two host threads launching at once
// must not swap each other's stream between the set and the GEMM. The lock spans host work only.
struct DeviceHandle {
  std::once_flag once;
  std::mutex mutex;
  Handle handle = nullptr;
  Handle lt = nullptr;  // cuBLASLt takes its stream and workspace per call: no lock needed
};

DeviceHandle& device_handle(const DeviceInfo& dev) {
  static std::array<DeviceHandle, kMaxDevices> handles;
  DeviceHandle& h = handles[dev.device];
  std::call_once(h.once, [&] {
    check(api()->create(&h.handle), "handle creation");
    check(api()->lt_create(&h.lt), "cuBLASLt handle creation");
  });
  return h;
}

// cublasGemmEx runs every problem that problem_error lets through whose leading dimensions fit its ints.
std::string why_not(const GemmProblem& p, const MicroParams&, const DeviceInfo&) {
  constexpr int64_t kMaxLd = std::numeric_limits<int>::max();
  if (p.lda <= kMaxLd && p.ldb <= kMaxLd && p.ldd <= kMaxLd) return {};
  return "cublasGemmEx takes 32-bit leading dimensions; lda=" + std::to_string(p.lda) +
         ", ldb=" + std::to_string(p.ldb) + ", ldd=" + std::to_string(p.ldd);
}

size_t workspace_bytes(const GemmProblem&, const MicroParams&, const DeviceInfo&) { return kWorkspaceBytes; }

// Descriptors of one cuBLASLt call, destroyed with it.
struct LtCall {
  Handle desc = nullptr, pref = nullptr, layouts[3] = {nullptr, nullptr, nullptr};
  ~LtCall() {
    for (Handle layout : layouts) {
      if (layout) api()->layout_destroy(layout);
    }
    if (pref) api()->pref_destroy(pref);
    if (desc) api()->desc_destroy(desc);
  }
};

// cuBLAS is column-major, so it computes D^T[n,m] = B^T[n,k] A^T[k,m]: row-major A is A^T with ld lda,
// row-major D is D^T with ld ldd, and B is B^T transposed (column-major B, an nn.Linear weight) or as it
// is (row-major B). The bias runs along D^T's rows, as cuBLASLt's bias epilogue takes it.
void run_with_bias(const GemmProblem& p, DeviceHandle& h, void* workspace, Stream stream) {
  const int type = p.dtype == DType::bf16 ? kBF16 : kF16;
  const int trans_b = p.b_layout == BLayout::col ? kOpT : kOpN;
  LtCall call;
  check(api()->desc_create(&call.desc, kComputeF32, kF32), "matmul descriptor");
  const int trans_a_lt = trans_b, trans_b_lt = kOpN;
  check(api()->desc_set(call.desc, kDescTransA, &trans_a_lt, sizeof(trans_a_lt)), "transA");
  check(api()->desc_set(call.desc, kDescTransB, &trans_b_lt, sizeof(trans_b_lt)), "transB");
  check(api()->desc_set(call.desc, kDescEpilogue, &kEpilogueBias, sizeof(kEpilogueBias)), "bias epilogue");
  check(api()->desc_set(call.desc, kDescBiasPointer, &p.bias, sizeof(p.bias)), "bias pointer");
  const bool b_transposed = trans_b == kOpT;
  check(api()->layout_create(&call.layouts[0], type, b_transposed ? p.k : p.n, b_transposed ? p.n : p.k, p.ldb),
        "B layout");
  check(api()->layout_create(&call.layouts[1], type, p.k, p.m, p.lda), "A layout");
  check(api()->layout_create(&call.layouts[2], type, p.n, p.m, p.ldd), "D layout");
  check(api()->pref_create(&call.pref), "preference");
  check(api()->pref_set(call.pref, kPrefMaxWorkspaceBytes, &kWorkspaceBytes, sizeof(kWorkspaceBytes)), "workspace");
  LtHeuristic best{};
  int found = 0;
  check(api()->heuristic(h.lt, call.desc, call.layouts[0], call.layouts[1], call.layouts[2], call.layouts[2],
                         call.pref, 1, &best, &found),
        "heuristic");
  if (found < 1) WAVETUNE_FAIL("cuBLASLt has no kernel for the bias epilogue of M=", p.m, " N=", p.n, " K=", p.k);
  const float alpha = 1, beta = 0;
  check(api()->matmul(h.lt, call.desc, &alpha, p.b, call.layouts[0], p.a, call.layouts[1], &beta, p.d,
                      call.layouts[2], p.d, call.layouts[2], best.algo, workspace, kWorkspaceBytes, stream),
        "bias GEMM");
}

void run(const GemmProblem& p, const MicroParams&, const DeviceInfo& dev, void* workspace, size_t workspace_bytes,
         Stream stream) {
  require_workspace(kWorkspaceBytes, workspace, workspace_bytes);
  DeviceHandle& h = device_handle(dev);
  if (p.bias) return run_with_bias(p, h, workspace, stream);
  const int type = p.dtype == DType::bf16 ? kBF16 : kF16;
  const int trans_b = p.b_layout == BLayout::col ? kOpT : kOpN;
  const float alpha = 1, beta = 0;
  std::lock_guard<std::mutex> lock(h.mutex);
  check(api()->set_stream(h.handle, stream), "stream");  // resets the workspace: set it after
  check(api()->set_workspace(h.handle, workspace, kWorkspaceBytes), "workspace");
  check(api()->gemm(h.handle, trans_b, kOpN, p.n, p.m, p.k, &alpha, p.b, type, int(p.ldb), p.a, type, int(p.lda),
                    &beta, p.d, type, int(p.ldd), kComputeF32, kDefaultTensorOpAlgo),
        "GEMM");
}

const VariantOps kOps{why_not, workspace_bytes, run};

}  // namespace

std::vector<VariantRegistry<VariantOps>::Entry> library_variants(int32_t first_id) {
  if (!api()) return {};
  // NOTES: cuBLAS picks its own tile per problem; the table models it through a nominal 128x128x64 tile
  // (its (G, L) mapping), and the calibration corrects the rest, as for any variant.
  std::vector<VariantRegistry<VariantOps>::Entry> out;
  static const char* const kNames[2][2] = {{"cublas_bf16_bcol", "cublas_bf16_brow"},
                                           {"cublas_fp16_bcol", "cublas_fp16_brow"}};
  for (DType dtype : {DType::bf16, DType::fp16}) {
    for (BLayout layout : {BLayout::col, BLayout::row}) {
      const int32_t id = first_id + 2 * int32_t(dtype) + int32_t(layout);
      out.push_back({{id, kNames[int(dtype)][int(layout)], dtype, layout, false, Schedule::cublas, 128, 128, 64,
                      1, 1, TileScheduler::persistent},
                     &kOps});
    }
  }
  return out;
}

}  // namespace wavetune::detail

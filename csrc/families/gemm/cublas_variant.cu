// cuBLAS as one more variant per dtype and B layout: the call `torch.matmul` makes (cublasGemmEx, default
// algorithm, fp32 accumulation), scored and chosen by the same tables and selector as the CUTLASS variants
// (docs/kernels.md, "cuBLAS as a candidate").
#include <array>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "builtin_candidates.h"
#include "cublas_library.h"
#include "variant_ops.h"
#include "variant_registry.h"
#include "wavetune/errors.h"

namespace wavetune::detail {
namespace {

// NOTES: cublasGemmEx with torch's arguments, not cublasLtMatmul with a heuristic's first algorithm: only
// the call torch.matmul makes is sure to run the kernel users compare against (a GPU test checks that the
// outputs are equal bit for bit). Setting the stream and workspace per call is what torch does too.
// NOTES: with a bias the candidate runs cuBLASLt's bias epilogue, the call torch's addmm and F.linear make:
// the bias is added to the fp32 accumulator before the one rounding. cublasGemmEx with the bias copied into
// D and beta = 1 is less accurate (1.16x torch's error on an H100: cuBLAS may then reduce split-K partials in
// D's type).
using cublas::Handle;
using cublas::Status;
constexpr int kDefaultTensorOpAlgo = 99;  // CUBLAS_GEMM_DEFAULT_TENSOR_OP, as torch passes

// cuBLAS's entry points (cuBLASLt's are cublas::lt()).
struct Api {
  Status (*create)(Handle*);
  Status (*set_stream)(Handle, Stream);
  Status (*set_workspace)(Handle, void*, size_t);
  Status (*gemm)(Handle, int, int, int, int, int, const void*, const void*, int, int, const void*, int, int,
                 const void*, void*, int, int, int, int);
  const char* (*status_name)(Status);
};

const Api* api() {
  static const Api* loaded = []() -> const Api* {
    void* lib = cublas::open_library("libcublas");
    if (!lib || !cublas::lt()) return nullptr;
    static Api a;
    const bool complete = cublas::bind(lib, a.create, "cublasCreate_v2") &&
                          cublas::bind(lib, a.set_stream, "cublasSetStream_v2") &&
                          cublas::bind(lib, a.set_workspace, "cublasSetWorkspace_v2") &&
                          cublas::bind(lib, a.gemm, "cublasGemmEx") &&
                          cublas::bind(lib, a.status_name, "cublasGetStatusName");
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
};

DeviceHandle& device_handle(const DeviceInfo& dev) {
  static std::array<DeviceHandle, kMaxDevices> handles;
  DeviceHandle& h = handles[dev.device];
  std::call_once(h.once, [&] { check(api()->create(&h.handle), "handle creation"); });
  return h;
}

// cublasGemmEx runs every problem that problem_error lets through whose leading dimensions fit its ints.
std::string why_not(const GemmProblem& p, const MicroParams&, const DeviceInfo&) {
  constexpr int64_t kMaxLd = std::numeric_limits<int>::max();
  if (p.lda <= kMaxLd && p.ldb <= kMaxLd && p.ldd <= kMaxLd) return {};
  return "cublasGemmEx takes 32-bit leading dimensions; lda=" + std::to_string(p.lda) +
         ", ldb=" + std::to_string(p.ldb) + ", ldd=" + std::to_string(p.ldd);
}

size_t workspace_bytes(const GemmProblem&, const MicroParams&, const DeviceInfo&) { return cublas::kWorkspaceBytes; }

// cuBLAS is column-major, so it computes D^T[n,m] = B^T[n,k] A^T[k,m]: row-major A is A^T with ld lda,
// row-major D is D^T with ld ldd, and B is B^T transposed (column-major B, an nn.Linear weight) or as it
// is (row-major B). The bias runs along D^T's rows, as cuBLASLt's bias epilogue takes it.
void run_with_bias(const GemmProblem& p, const DeviceInfo& dev, void* workspace, Stream stream) {
  const int type = p.dtype == DType::bf16 ? cublas::kBF16 : cublas::kF16;
  const int trans_b = p.b_layout == BLayout::col ? cublas::kOpT : cublas::kOpN;
  cublas::LtCall call(cublas::kF32);
  call.set(cublas::kDescTransA, trans_b, "transA");
  call.set(cublas::kDescTransB, cublas::kOpN, "transB");
  call.set(cublas::kDescEpilogue, cublas::kEpilogueBias, "bias epilogue");
  call.set(cublas::kDescBiasPointer, p.bias, "bias pointer");
  const bool b_transposed = trans_b == cublas::kOpT;
  call.layout(0, type, b_transposed ? p.k : p.n, b_transposed ? p.n : p.k, p.ldb);
  call.layout(1, type, p.k, p.m, p.lda);
  call.layout(2, type, p.n, p.m, p.ldd);
  cublas::Heuristic best{};
  const Handle lt = cublas::lt_handle(dev.device);
  if (!call.first_algorithm(lt, best)) {
    WAVETUNE_FAIL("cuBLASLt has no kernel for the bias epilogue of M=", p.m, " N=", p.n, " K=", p.k);
  }
  call.run(lt, best, p.b, p.a, p.d, workspace, stream);
}

void run(const GemmProblem& p, const MicroParams&, const DeviceInfo& dev, void* workspace, size_t workspace_bytes,
         Stream stream) {
  require_workspace(cublas::kWorkspaceBytes, workspace, workspace_bytes);
  if (p.bias) return run_with_bias(p, dev, workspace, stream);
  DeviceHandle& h = device_handle(dev);
  const int type = p.dtype == DType::bf16 ? cublas::kBF16 : cublas::kF16;
  const int trans_b = p.b_layout == BLayout::col ? cublas::kOpT : cublas::kOpN;
  const float alpha = 1, beta = 0;
  std::lock_guard<std::mutex> lock(h.mutex);
  check(api()->set_stream(h.handle, stream), "stream");  // resets the workspace: set it after
  check(api()->set_workspace(h.handle, workspace, cublas::kWorkspaceBytes), "workspace");
  check(api()->gemm(h.handle, trans_b, cublas::kOpN, p.n, p.m, p.k, &alpha, p.b, type, int(p.ldb), p.a, type,
                    int(p.lda), &beta, p.d, type, int(p.ldd), cublas::kComputeF32, kDefaultTensorOpAlgo),
        "GEMM");
}

const VariantOps kOps{why_not, workspace_bytes, run};

}  // namespace

std::vector<VariantRegistry<VariantOps>::Entry> library_variants() {
  if (!api()) return {};
  std::vector<VariantRegistry<VariantOps>::Entry> out;
  const auto& [tile_m, tile_n, tile_k] = kCublasNominalTile;
  for (DType dtype : {DType::bf16, DType::fp16}) {
    for (BLayout layout : {BLayout::col, BLayout::row}) {
      const int32_t id = kLibraryVariantIds + 2 * int32_t(dtype) + int32_t(layout);
      out.push_back({{id, kCublasVariantNames[int(dtype)][int(layout)], dtype, layout, false, Schedule::cublas, tile_m,
                      tile_n, tile_k, 1, 1, TileScheduler::persistent},
                     &kOps});
    }
  }
  return out;
}

}  // namespace wavetune::detail

// cuBLASLt's FP8 matmul as one more scaled GEMM variant per output dtype: per-tensor scales, per-token x
// per-channel scales (its outer-vector mode) and 128-blocks (1x128 activation vectors x 128x128 weight blocks),
// the call torch._scaled_mm makes for the first two (docs/scaled_gemm.md, "cuBLASLt").
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "cublas_library.h"
#include "scaled_ops.h"
#include "wavetune/errors.h"

namespace wavetune::detail {
namespace {

constexpr int kScaleBlock = 128;
constexpr size_t kScaleAlignment = 256;

// NOTES: what the block-scaled kernels read, found on an H100 with benchmarks/cublaslt_fp8_probe.py: the
// weight's 128x128 block scales as checkpoints store them ([ceil(N/128), ceil(K/128)], K fastest), the
// activations' 1x128 scales with the tokens fastest ([ceil(K/128), M]); the other three orders gave wrong
// products. The quantizer writes the activations' K fastest, so a launch first transposes them into the
// workspace. Its heuristic offered block-scaled kernels for token counts that are multiples of 4 only (40
// held-out problems on an H200) and none for one token; the choice then takes the block-scaled grouped GEMM.
__global__ void transpose_scales(const float* scale, int rows, int cols, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * cols) out[(i % cols) * rows + i / cols] = scale[i];
}

int k_blocks(const ScaledGemmProblem& p) { return (p.k + kScaleBlock - 1) / kScaleBlock; }

size_t transposed_scale_bytes(const ScaledGemmProblem& p) {
  if (p.scale_a_kind != ScaleKind::block128) return 0;
  const size_t bytes = size_t(p.m) * k_blocks(p) * sizeof(float);
  return (bytes + kScaleAlignment - 1) / kScaleAlignment * kScaleAlignment;
}

int scale_mode(ScaleKind kind, bool weights) {
  switch (kind) {
    case ScaleKind::tensor: return cublas::kScaleScalar;
    case ScaleKind::row: return cublas::kScaleOuterVector;
    default: return weights ? cublas::kScaleBlock128 : cublas::kScaleVector128;
  }
}

// The call's descriptors, scale_a being what the kernel reads for the activations. cuBLASLt is column-major:
// D^T[n, m] = W (op T) x^T, so its A is the weight [n, k] and its B the tokens [m, k], both K-major (the
// only FP8 layout Hopper's kernels take), and row-major D is D^T with ld ldd.
void describe(cublas::LtCall& call, const ScaledGemmProblem& p, const float* scale_a) {
  const int out_type = p.out_dtype == DType::bf16 ? cublas::kBF16 : cublas::kF16;
  call.set(cublas::kDescTransA, cublas::kOpT, "transA");
  call.set(cublas::kDescTransB, cublas::kOpN, "transB");
  call.set(cublas::kDescAScalePointer, p.scale_b, "weight scale pointer");
  call.set(cublas::kDescBScalePointer, scale_a, "token scale pointer");
  call.set(cublas::kDescAScaleMode, scale_mode(p.scale_b_kind, true), "weight scale mode");
  call.set(cublas::kDescBScaleMode, scale_mode(p.scale_a_kind, false), "token scale mode");
  if (p.bias) {
    call.set(cublas::kDescEpilogue, cublas::kEpilogueBias, "bias epilogue");
    call.set(cublas::kDescBiasPointer, p.bias, "bias pointer");
    call.set(cublas::kDescBiasDataType, out_type, "bias type");
  }
  call.layout(0, cublas::kE4m3, p.k, p.n, p.ldb);
  call.layout(1, cublas::kE4m3, p.k, p.m, p.lda);
  call.layout(2, out_type, p.n, p.m, p.ldd);
}

// The heuristic's algorithm per device, problem shape and kind, kept: a call then builds its descriptors (the
// pointers change) but asks the heuristic once per shape.
struct DeviceState {
  std::mutex mutex;
  using Key = std::tuple<int32_t, int32_t, int32_t, int64_t, int64_t, int64_t, int, int, int, bool>;
  std::map<Key, std::pair<bool, cublas::Heuristic>> algorithms;
};

DeviceState& device_state(const DeviceInfo& dev) {
  static std::array<DeviceState, kMaxDevices> states;
  return states[dev.device];
}

// The heuristic's first algorithm for p, asked once per shape; false when cuBLASLt has none.
bool algorithm_for(const ScaledGemmProblem& p, const DeviceInfo& dev, cublas::Heuristic& algorithm) {
  DeviceState& s = device_state(dev);
  const DeviceState::Key key{p.m, p.n, p.k, p.lda, p.ldb, p.ldd, int(p.out_dtype), int(p.scale_a_kind),
                             int(p.scale_b_kind), p.bias != nullptr};
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.algorithms.find(key);
  if (it == s.algorithms.end()) {
    // NOTES: the heuristic reads no data but finds no algorithm for null scale pointers (the choice asks
    // with sizes alone), so it is asked with a stand-in address where the caller gave none.
    ScaledGemmProblem sizes = p;
    const auto* stand_in = reinterpret_cast<const float*>(kScaleAlignment);
    if (!sizes.scale_a) sizes.scale_a = stand_in;
    if (!sizes.scale_b) sizes.scale_b = stand_in;
    cublas::LtCall call(cublas::kF32);
    describe(call, sizes, sizes.scale_a);
    cublas::Heuristic best{};
    const bool found = call.first_algorithm(cublas::lt_handle(dev.device), best);
    it = s.algorithms.emplace(key, std::make_pair(found, best)).first;
  }
  algorithm = it->second.second;
  return it->second.first;
}

template <DType kOut>
struct CublasLtVariant {
  static int32_t splits(const ScaledGemmProblem&, int32_t, const DeviceInfo&) { return 1; }

  static std::string why_not(const ScaledGemmProblem& p, int32_t requested, const DeviceInfo& dev) {
    if (p.out_dtype != kOut) return std::string("the variant writes ") + to_string(kOut);
    if (requested > 1) return "cuBLASLt does not take K splits";
    if (p.scale_a_kind != p.scale_b_kind) {
      return "cuBLASLt takes the same kind of scales on both sides (per tensor, per row or per 128-block); "
             "expand a per-tensor scale to a vector";
    }
    if (p.scale_a_kind == ScaleKind::block128 && p.m < 2) return "cuBLASLt's block-scaled kernels take 2 tokens or more";
    cublas::Heuristic algorithm{};
    if (!algorithm_for(p, dev, algorithm)) return "cuBLASLt has no FP8 kernel for this problem";
    return {};
  }

  static size_t workspace_bytes(const ScaledGemmProblem& p, int32_t, const DeviceInfo&) {
    return cublas::kWorkspaceBytes + transposed_scale_bytes(p);
  }

  static void run(const ScaledGemmProblem& p, int32_t, const DeviceInfo& dev, void* workspace, size_t bytes,
                  Stream stream) {
    require_workspace(workspace_bytes(p, 1, dev), workspace, bytes);
    const float* scale_a = p.scale_a;
    if (p.scale_a_kind == ScaleKind::block128) {
      auto* transposed = reinterpret_cast<float*>(static_cast<char*>(workspace) + cublas::kWorkspaceBytes);
      const int count = p.m * k_blocks(p), threads = 256;
      transpose_scales<<<(count + threads - 1) / threads, threads, 0, stream>>>(p.scale_a, p.m, k_blocks(p),
                                                                                 transposed);
      const cudaError_t launch = cudaGetLastError();
      if (launch != cudaSuccess) WAVETUNE_FAIL("scale transpose launch failed: ", cudaGetErrorString(launch));
      scale_a = transposed;
    }
    cublas::Heuristic algorithm{};
    if (!algorithm_for(p, dev, algorithm)) {
      WAVETUNE_INVALID("cuBLASLt has no FP8 kernel for M=", p.m, " N=", p.n, " K=", p.k);
    }
    cublas::LtCall call(cublas::kF32);
    describe(call, p, scale_a);
    call.run(cublas::lt_handle(dev.device), algorithm, p.b, p.a, p.d, workspace, stream);
  }

  static constexpr ScaledVariantOps kOps{&splits, &why_not, &workspace_bytes, &run};
};

}  // namespace

std::vector<VariantRegistry<ScaledVariantOps>::Entry> scaled_library_variants(int32_t first_id) {
  if (!cublas::lt()) return {};
  // NOTES: cuBLASLt picks its own kernel per problem; the nominal 128x128x128 tile only names it.
  return {{{first_id, "cublaslt_e4m3_bf16", DType::bf16, BLayout::col, false, Schedule::cublas, 128, 128, 128, 1, 1,
            TileScheduler::persistent},
           &CublasLtVariant<DType::bf16>::kOps},
          {{first_id + 1, "cublaslt_e4m3_fp16", DType::fp16, BLayout::col, false, Schedule::cublas, 128, 128, 128, 1,
            1, TileScheduler::persistent},
           &CublasLtVariant<DType::fp16>::kOps}};
}

}  // namespace wavetune::detail

// cuBLASLt's FP8 matmul as one more scaled GEMM variant per output dtype: per-tensor scales, per-token x
// per-channel scales (its outer-vector mode) and 128-blocks (1x128 activation vectors x 128x128 weight blocks),
// the call torch._scaled_mm makes for the first two; and a bf16 variant that runs the per-tensor kernels and
// applies per-token and per-channel scales in a second pass (docs/scaled_gemm.md, "cuBLASLt").
// wavetune: portable (also built as compute_80 PTX: CMakeLists.txt, WAVETUNE_PORTABLE_SOURCES)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "cublas_library.h"
#include "programmatic_launch.cuh"
#include "scaled_ops.h"
#include "wavetune/errors.h"

namespace wavetune::detail {
namespace {

constexpr int kScaleBlock = 128;
constexpr size_t kScaleAlignment = 256;
constexpr int kScaleRowAlignment = 4;  // weight scales per row that the block-scaled kernels read correctly

// NOTES: what the block-scaled kernels read, found on an H100 with benchmarks/cublaslt_fp8_probe.py: the
// weight's 128x128 block scales as checkpoints store them ([ceil(N/128), ceil(K/128)], K fastest), the
// activations' 1x128 scales with the tokens fastest ([ceil(K/128), M]); the other three orders gave wrong
// products. The quantizer writes the activations' K fastest, so a launch first transposes them into the
// workspace. Its heuristic offered block-scaled kernels for token counts that are multiples of 4 only (40
// held-out problems on an H200) and none for one token; the choice then takes the block-scaled grouped GEMM.
// With K = 640 (5 scales per weight row) every 128-row block past the first came out wrong (H200, cuBLASLt
// 13.1; K of 16 and 32 scales per row were right), as if it read the scales' rows padded to 4 values: such
// problems are refused.
__global__ void transpose_scales(const float* scale, int rows, int cols, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * cols) out[(i % cols) * rows + i / cols] = scale[i];
}

// NOTES: the second pass. Past 64 tokens cuBLASLt's per-tensor kernels ran 1.1-1.9x faster than its
// outer-vector ones on the same problems up to about 1,000 tokens (H100 and H200, benchmarks/scaled_gemm.py), so
// the rescaled variant runs a per-tensor kernel with unit scales into D (bf16: the product's range is fp32's)
// and then scales D in place, D[m, n] = sa[m] sb[n] D[m, n] + bias[n]: one more pass over D, and two roundings
// to bf16 instead of one (the second adds at most half a bf16 ulp, far below e4m3's rounding).
__device__ const float kUnitScale = 1.0f;

constexpr int kRescaleVector = 8;      // bf16 per 16-byte access
constexpr int kRescaleThreads = 256;
constexpr int kRescaleRowsInFlight = 4;  // rows a thread loads before it scales and stores them
constexpr int kRescaleCtasPerSm = 4;

struct RescaleParams {
  __nv_bfloat16* d;
  int64_t ldd;
  int m, n;
  const float* scale_a;  // token m's: scale_a[m * scale_a_step]
  const float* scale_b;  // channel n's: scale_b[n * scale_b_step]
  int scale_a_step, scale_b_step;
  const __nv_bfloat16* bias;
  bool vectorized;  // D 16-byte aligned and ldd a multiple of kRescaleVector
};

__device__ __forceinline__ __nv_bfloat16 rescaled(__nv_bfloat16 value, float scale, float bias) {
  return __float2bfloat16_rn(__bfloat162float(value) * scale + bias);
}

// NOTES: a thread owns 8 columns (their channel scales and bias loaded once) and walks the rows gridDim.y *
// kRescaleRowsInFlight apart, loading kRescaleRowsInFlight rows before storing any, so that about 4 CTAs per SM
// keep enough bytes in flight to run at HBM speed. Programmatic dependent launch: the pass starts while cuBLASLt's
// kernel runs and reads the channel scales and the bias, which that kernel does not write (whatever wrote them
// finished before it started), then waits for it with griddepcontrol.wait before reading D; its own dependents
// are released at once.
__global__ void rescale_product(RescaleParams p) {
  const int col = (blockIdx.x * blockDim.x + threadIdx.x) * kRescaleVector;
  const int width = min(kRescaleVector, p.n - col);
  float scale_b[kRescaleVector], bias[kRescaleVector];
#pragma unroll
  for (int j = 0; j < kRescaleVector; ++j) {
    scale_b[j] = j < width ? p.scale_b[int64_t(col + j) * p.scale_b_step] : 0.0f;
    bias[j] = j < width && p.bias ? __bfloat162float(p.bias[col + j]) : 0.0f;
  }
  release_dependents_and_wait();
  if (width <= 0) return;
  const bool vector = p.vectorized && width == kRescaleVector;
  for (int first = blockIdx.y * kRescaleRowsInFlight; first < p.m; first += gridDim.y * kRescaleRowsInFlight) {
    uint4 packed[kRescaleRowsInFlight];
    float scale_a[kRescaleRowsInFlight];
#pragma unroll
    for (int r = 0; r < kRescaleRowsInFlight; ++r) {
      if (first + r >= p.m) break;
      scale_a[r] = p.scale_a[int64_t(first + r) * p.scale_a_step];
      if (vector) packed[r] = *reinterpret_cast<const uint4*>(p.d + (first + r) * p.ldd + col);
    }
#pragma unroll
    for (int r = 0; r < kRescaleRowsInFlight; ++r) {
      if (first + r >= p.m) break;
      __nv_bfloat16* out = p.d + (first + r) * p.ldd + col;
      if (vector) {
        auto* values = reinterpret_cast<__nv_bfloat16*>(&packed[r]);
#pragma unroll
        for (int j = 0; j < kRescaleVector; ++j) values[j] = rescaled(values[j], scale_a[r] * scale_b[j], bias[j]);
        *reinterpret_cast<uint4*>(out) = packed[r];
      } else {
        for (int j = 0; j < width; ++j) out[j] = rescaled(out[j], scale_a[r] * scale_b[j], bias[j]);
      }
    }
  }
}

void launch_rescale(const ScaledGemmProblem& p, const DeviceInfo& dev, Stream stream) {
  RescaleParams params{static_cast<__nv_bfloat16*>(p.d), p.ldd, p.m, p.n, p.scale_a, p.scale_b,
                       p.scale_a_kind == ScaleKind::row ? 1 : 0, p.scale_b_kind == ScaleKind::row ? 1 : 0,
                       static_cast<const __nv_bfloat16*>(p.bias),
                       reinterpret_cast<uintptr_t>(p.d) % 16 == 0 && p.ldd % kRescaleVector == 0};
  const int vectors = (p.n + kRescaleVector - 1) / kRescaleVector;
  const int column_ctas = (vectors + kRescaleThreads - 1) / kRescaleThreads;
  const int row_steps = (p.m + kRescaleRowsInFlight - 1) / kRescaleRowsInFlight;
  const int row_ctas = std::clamp(kRescaleCtasPerSm * dev.sm_count / column_ctas, 1, std::min(row_steps, 65535));
  void* args[] = {&params};
  const cudaError_t launch = launch_programmatic(reinterpret_cast<const void*>(rescale_product),
                                                 dim3(column_ctas, row_ctas), dim3(kRescaleThreads), 0, stream, args);
  if (launch != cudaSuccess) {
    cudaGetLastError();
    WAVETUNE_FAIL("scale pass launch failed: ", cudaGetErrorString(launch));
  }
}

// kUnitScale's address on the device, looked up once per device.
const float* unit_scale(const DeviceInfo& dev) {
  static std::array<std::once_flag, kMaxDevices> done;
  static std::array<const float*, kMaxDevices> address{};
  std::call_once(done.at(dev.device), [&] {
    void* symbol = nullptr;
    if (cudaGetSymbolAddress(&symbol, kUnitScale) != cudaSuccess) {
      cudaGetLastError();
      WAVETUNE_FAIL("cannot find the unit scale on device ", dev.device);
    }
    address[dev.device] = static_cast<const float*>(symbol);
  });
  return address[dev.device];
}

// The problem the rescaled variant hands cuBLASLt: unit per-tensor scales, no bias (both come in the second pass).
ScaledGemmProblem unit_scaled(const ScaledGemmProblem& p, const float* unit) {
  ScaledGemmProblem q = p;
  q.scale_a = q.scale_b = unit;
  q.scale_a_kind = q.scale_b_kind = ScaleKind::tensor;
  q.bias = nullptr;
  return q;
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

// Runs p with the heuristic's algorithm, scale_a being what the kernel reads for the activations.
void run_matmul(const ScaledGemmProblem& p, const float* scale_a, const DeviceInfo& dev, void* workspace,
                Stream stream) {
  cublas::Heuristic algorithm{};
  if (!algorithm_for(p, dev, algorithm)) {
    WAVETUNE_INVALID("cuBLASLt has no FP8 kernel for M=", p.m, " N=", p.n, " K=", p.k);
  }
  cublas::LtCall call(cublas::kF32);
  describe(call, p, scale_a);
  call.run(cublas::lt_handle(dev.device), algorithm, p.b, p.a, p.d, workspace, stream);
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
    if (p.scale_a_kind == ScaleKind::block128 && k_blocks(p) % kScaleRowAlignment != 0) {
      return "cuBLASLt's block-scaled kernels gave wrong products where ceil(K/128) is not a multiple of " +
             std::to_string(kScaleRowAlignment) + " (docs/scaled_gemm.md)";
    }
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
    run_matmul(p, scale_a, dev, workspace, stream);
  }

  static constexpr ScaledVariantOps kOps{&splits, &why_not, &workspace_bytes, &run};
};

// The second-pass variant (the NOTES above): bf16 output, per-tensor or per-row scales in any mix.
struct RescaledVariant {
  static int32_t splits(const ScaledGemmProblem&, int32_t, const DeviceInfo&) { return 1; }

  static std::string why_not(const ScaledGemmProblem& p, int32_t requested, const DeviceInfo& dev) {
    if (p.out_dtype != DType::bf16) return "the variant writes bf16";
    if (requested > 1) return "cuBLASLt does not take K splits";
    if (p.scale_a_kind == ScaleKind::block128) return "the variant takes per-tensor or per-row scales";
    cublas::Heuristic algorithm{};
    if (!algorithm_for(unit_scaled(p, nullptr), dev, algorithm)) return "cuBLASLt has no FP8 kernel for this problem";
    return {};
  }

  static size_t workspace_bytes(const ScaledGemmProblem&, int32_t, const DeviceInfo&) {
    return cublas::kWorkspaceBytes;
  }

  static void run(const ScaledGemmProblem& p, int32_t, const DeviceInfo& dev, void* workspace, size_t bytes,
                  Stream stream) {
    require_workspace(cublas::kWorkspaceBytes, workspace, bytes);
    const ScaledGemmProblem unit = unit_scaled(p, unit_scale(dev));
    run_matmul(unit, unit.scale_a, dev, workspace, stream);
    launch_rescale(p, dev, stream);
  }

  static constexpr ScaledVariantOps kOps{&splits, &why_not, &workspace_bytes, &run};
};

}  // namespace

bool scales_in_second_pass(int32_t variant_id) { return variant_id == kLibraryVariantIds + kRescaledVariantOffset; }

std::vector<VariantRegistry<ScaledVariantOps>::Entry> scaled_library_variants() {
  if (!cublas::lt()) return {};
  // NOTES: cuBLASLt picks its own kernel per problem; the nominal 128x128x128 tile only names it. Its FP8
  // (e4m3) matmuls need compute capability 8.9 (Ada) or later.
  return {{{kLibraryVariantIds, "cublaslt_e4m3_bf16", DType::bf16, BLayout::col, false, Schedule::cublas, 128, 128, 128, 1, 1,
            TileScheduler::persistent, arch::sm89},
           &CublasLtVariant<DType::bf16>::kOps},
          {{kLibraryVariantIds + 1, "cublaslt_e4m3_fp16", DType::fp16, BLayout::col, false, Schedule::cublas, 128, 128, 128, 1,
            1, TileScheduler::persistent, arch::sm89},
           &CublasLtVariant<DType::fp16>::kOps},
          {{kLibraryVariantIds + kRescaledVariantOffset, "cublaslt_e4m3_bf16_rescaled", DType::bf16, BLayout::col, false,
            Schedule::cublas, 128, 128, 128, 1, 1, TileScheduler::persistent, arch::sm89},
           &RescaledVariant::kOps}};
}

}  // namespace wavetune::detail

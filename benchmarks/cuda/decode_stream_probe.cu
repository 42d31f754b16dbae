// How fast can a one-token decode GEMM (y = x W^T, bf16, W [N, K] row-major) read its weights, by access
// pattern? Each method runs in its own CUDA graph of back-to-back launches over rotated weight copies
// (cold: the copies exceed twice the L2), replayed round-robin; medians of the per-launch time.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Icsrc/families/gemm -Icsrc/runtime -Icsrc/include \
//        benchmarks/cuda/decode_stream_probe.cu -lcublas -o /tmp/probe && /tmp/probe
//
// Methods:
//   cublas               cublasGemmEx, what torch.matmul calls;
//   decode_<cfg>         wavetune's decode kernel (sm90_decode_gemm.cuh) at split counts 1, 2, 4 (the best);
//   warp_u<U>            each warp streams whole-row segments, U 16-byte loads per lane in flight (512
//                        contiguous bytes per warp instruction), the next segment's loads issued before
//                        the current one is summed; segments split evenly over a persistent grid;
//   frag_u<U>            the decode kernel's access pattern (a warp instruction reads 64 bytes of each of 8
//                        rows: the mma.sync fragment layout) with warp_u<U>'s balanced persistent schedule: U
//                        64-byte steps of 16 rows per unit;
//   bulk_<rows>x<kc>_s<S> one producer thread copies <rows> row segments of <kc> elements per stage into a
//                        ring of S shared-memory stages (cp.async.bulk on an mbarrier), 4 consumer warps
//                        sum them; stages split evenly over one CTA per SM. `_early`: the producer fills
//                        the ring before griddepcontrol.wait (weights not written by the previous kernel).
// The warp and bulk kernels add partial row sums with fp32 atomics: a probe of the read rate, not a GEMM.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "sm90_decode_gemm.cuh"

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

using bf16 = __nv_bfloat16;
namespace dec = wavetune::detail::decode;

__device__ __forceinline__ float dot8(uint4 w, uint4 x) {
  const auto* a = reinterpret_cast<const __nv_bfloat162*>(&w);
  const auto* b = reinterpret_cast<const __nv_bfloat162*>(&x);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __bfloat1622float2(a[i]), fb = __bfloat1622float2(b[i]);
    s = fmaf(fa.x, fb.x, fmaf(fa.y, fb.y, s));
  }
  return s;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// This warp's share [first, last) of `units` work units split evenly over every warp of the grid; waits
// for the previous kernel (programmatic dependent launch) before returning.
struct WarpUnits {
  int64_t first, last;
};
__device__ __forceinline__ WarpUnits warp_units(int64_t units) {
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  const int64_t warp = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  asm volatile("griddepcontrol.launch_dependents;");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  return {units * warp / warps, units * (warp + 1) / warps};
}

// --- warp streaming ----------------------------------------------------------------------------------
template <int U>
__global__ void __launch_bounds__(256) warp_stream(const bf16* w, const bf16* x, float* y, int n, int k) {
  constexpr int kSeg = 256 * U;  // elements per segment: U loads of 32 lanes x 8
  const int lane = threadIdx.x % 32;
  const int segs = (k + kSeg - 1) / kSeg;
  const auto [u0, u1] = warp_units(int64_t(n) * segs);
  if (u0 >= u1) return;
  uint4 next[U];
  auto issue = [&](int64_t u) {
    const int64_t row = u / segs;
    const int k0 = int(u % segs) * kSeg;
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int kk = k0 + i * 256 + lane * 8;
      next[i] = kk < k ? dec::load_streaming(w + row * k + kk) : make_uint4(0, 0, 0, 0);
    }
  };
  issue(u0);
  float acc = 0.0f;
  for (int64_t u = u0; u < u1; ++u) {
    uint4 cur[U];
#pragma unroll
    for (int i = 0; i < U; ++i) cur[i] = next[i];
    if (u + 1 < u1) issue(u + 1);
    const int k0 = int(u % segs) * kSeg;
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int kk = k0 + i * 256 + lane * 8;
      if (kk < k) acc += dot8(cur[i], dec::load_written(x + kk));
    }
    if (u % segs == segs - 1 || u + 1 == u1) {
      acc = warp_sum(acc);
      if (lane == 0) atomicAdd(y + u / segs, acc);
      acc = 0.0f;
    }
  }
}

// --- the fragment pattern, balanced ------------------------------------------------------------------------
template <int U>
__global__ void __launch_bounds__(256) frag_stream(const bf16* w, const bf16* x, float* y, int n, int k) {
  constexpr int kSeg = 32 * U;  // elements per row per unit: U chunks of 4 lanes x 8
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int segs = (k + kSeg - 1) / kSeg, tiles = (n + 15) / 16;
  const auto [u0, u1] = warp_units(int64_t(tiles) * segs);
  if (u0 >= u1) return;
  uint4 next[U][2];
  auto issue = [&](int64_t u) {
    const int row = int(u / segs) * 16 + g;
    const int k0 = int(u % segs) * kSeg;
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int kk = k0 + i * 32 + t * 8;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = min(row + 8 * h, n - 1);
        next[i][h] = kk < k ? dec::load_streaming(w + int64_t(r) * k + kk) : make_uint4(0, 0, 0, 0);
      }
    }
  };
  issue(u0);
  float acc[2] = {};
  for (int64_t u = u0; u < u1; ++u) {
    uint4 cur[U][2];
#pragma unroll
    for (int i = 0; i < U; ++i) cur[i][0] = next[i][0], cur[i][1] = next[i][1];
    if (u + 1 < u1) issue(u + 1);
    const int k0 = int(u % segs) * kSeg;
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int kk = k0 + i * 32 + t * 8;
      if (kk < k) {
        const uint4 xv = dec::load_written(x + kk);
        acc[0] += dot8(cur[i][0], xv), acc[1] += dot8(cur[i][1], xv);
      }
    }
    if (u % segs == segs - 1 || u + 1 == u1) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        acc[h] += __shfl_xor_sync(0xffffffffu, acc[h], 1);
        acc[h] += __shfl_xor_sync(0xffffffffu, acc[h], 2);
        const int row = int(u / segs) * 16 + g + 8 * h;
        if (t == 0 && row < n) atomicAdd(y + row, acc[h]);
        acc[h] = 0.0f;
      }
    }
  }
}

// --- bulk copies into a shared-memory ring -------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t* b, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred P1;\nLAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra DONE;\nbra LAB_WAIT;\nDONE:\n}" ::"r"(smem_addr(b)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}

template <int kRows, int kKc, int kStages, bool kEarly>
struct Bulk {
  static constexpr int kConsumers = 4;
  static constexpr int kStageBytes = kRows * kKc * 2;
  static constexpr int kSmem = kStages * kStageBytes + 2 * kStages * 8;
};

template <int kRows, int kKc, int kStages, bool kEarly>
__global__ void __launch_bounds__(160, 1) bulk_stream(const bf16* w, const bf16* x, float* y, int n, int k) {
  using B = Bulk<kRows, kKc, kStages, kEarly>;
  extern __shared__ __align__(128) unsigned char smem[];
  auto* full = reinterpret_cast<uint64_t*>(smem + kStages * B::kStageBytes);
  uint64_t* empty = full + kStages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kchunks = (k + kKc - 1) / kKc;
  const int64_t units = int64_t((n + kRows - 1) / kRows) * kchunks;
  const int64_t u0 = units * blockIdx.x / gridDim.x, u1 = units * (blockIdx.x + 1) / gridDim.x;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(full + s, 1), mbar_init(empty + s, B::kConsumers);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  asm volatile("griddepcontrol.launch_dependents;");
  if (warp == B::kConsumers) {  // the producer
    if (lane == 0) {
      for (int64_t u = u0; u < u1; ++u) {
        const int i = int(u - u0), s = i % kStages;
        if (i == kStages || (!kEarly && i == 0)) asm volatile("griddepcontrol.wait;" ::: "memory");
        mbar_wait(empty + s, ((i / kStages) & 1) ^ 1);
        const int r0 = int(u / kchunks) * kRows, k0 = int(u % kchunks) * kKc;
        const int rows = min(kRows, n - r0);
        const uint32_t bytes = uint32_t(min(kKc, k - k0)) * 2;
        mbar_expect_tx(full + s, bytes * rows);
        for (int r = 0; r < rows; ++r) {
          bulk_copy(smem + s * B::kStageBytes + r * kKc * 2, w + int64_t(r0 + r) * k + k0, bytes, full + s);
        }
      }
    }
    return;
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  float acc[kRows / B::kConsumers] = {};
  for (int64_t u = u0; u < u1; ++u) {
    const int i = int(u - u0), s = i % kStages;
    const int r0 = int(u / kchunks) * kRows, k0 = int(u % kchunks) * kKc;
    uint4 xv[kKc / 256];
#pragma unroll
    for (int j = 0; j < kKc / 256; ++j) {
      const int kk = k0 + j * 256 + lane * 8;
      xv[j] = kk < k ? dec::load_written(x + kk) : make_uint4(0, 0, 0, 0);
    }
    mbar_wait(full + s, (i / kStages) & 1);
    const auto* stage = reinterpret_cast<const uint4*>(smem + s * B::kStageBytes);
#pragma unroll
    for (int rr = 0; rr < kRows / B::kConsumers; ++rr) {
      const int r = rr * B::kConsumers + warp;
#pragma unroll
      for (int j = 0; j < kKc / 256; ++j) {
        if (k0 + j * 256 + lane * 8 < k) acc[rr] += dot8(stage[r * kKc / 8 + j * 32 + lane], xv[j]);
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + s);
    if (k0 + kKc >= k || u + 1 == u1) {
#pragma unroll
      for (int rr = 0; rr < kRows / B::kConsumers; ++rr) {
        const float v = warp_sum(acc[rr]);
        const int row = r0 + rr * B::kConsumers + warp;
        if (lane == 0 && row < n) atomicAdd(y + row, v);
        acc[rr] = 0.0f;
      }
    }
  }
}

// --- harness ---------------------------------------------------------------------------------------------
struct Method {
  std::string name;
  std::function<void(const bf16* w, cudaStream_t)> launch;
};

template <class Kernel, class... Args>
void launch_pdl(Kernel kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid, config.blockDim = block, config.dynamicSmemBytes = smem, config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute, config.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
  cublasHandle_t handle;
  cublasCreate(&handle);
  void* cublas_workspace;
  CHECK(cudaMalloc(&cublas_workspace, 32 << 20));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasSetStream(handle, stream);
  cublasSetWorkspace(handle, cublas_workspace, 32 << 20);

  const std::vector<std::pair<int, int>> shapes = {{1792, 5120},  {5120, 1728},  {3584, 2048},  {4480, 5120},
                                                   {2048, 7168},  {5120, 8960},  {8192, 5120},  {14336, 4096},
                                                   {28672, 4096}, {5120, 25600}, {128256, 4096}};
  for (const auto& shape : shapes) {
    const int n = shape.first, k = shape.second;
    const size_t bytes = size_t(n) * k * 2;
    const int copies = int(std::max<size_t>(1, (200u << 20) / bytes + 1));
    const int per_graph = std::max(copies, 20);
    std::vector<bf16*> ws(copies);
    std::vector<bf16> host(size_t(n) * k);
    for (size_t i = 0; i < host.size(); ++i) host[i] = __float2bfloat16(float((i * 2654435761u) % 2001) / 1000 - 1);
    for (auto& p : ws) {
      CHECK(cudaMalloc(&p, bytes));
      CHECK(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice));
    }
    bf16 *x, *yb;
    float* yf;
    CHECK(cudaMalloc(&x, k * 2));
    CHECK(cudaMalloc(&yb, n * 2));
    CHECK(cudaMalloc(&yf, n * 4));
    std::vector<bf16> hx(k);
    for (int i = 0; i < k; ++i) hx[i] = __float2bfloat16(float((i * 40503u) % 1001) / 500 - 1);
    CHECK(cudaMemcpy(x, hx.data(), k * 2, cudaMemcpyHostToDevice));

    std::vector<Method> methods;
    methods.push_back({"cublas", [=](const bf16* w, cudaStream_t s) {
                         const float alpha = 1, beta = 0;
                         cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, 1, k, &alpha, w, CUDA_R_16BF, k, x,
                                      CUDA_R_16BF, k, &beta, yb, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT_TENSOR_OP);
                       }});
    using Narrow = dec::Kernel<bf16, bf16, 8, 1, 1, 4, 4>;
    using Wide = dec::Kernel<bf16, bf16, 8, 2, 4, 1, 4>;
    for (int s : {1, 2, 4}) {
      methods.push_back({"decode_16x8_1x4_s" + std::to_string(s), [=](const bf16* w, cudaStream_t st) {
                           dec::Params p{x, w, yb, nullptr, k, k, n, 1, n, k, 0};
                           CHECK((dec::launch<Narrow, false>(p, s, 0, sms, true, st)));
                         }});
    }
    methods.push_back({"decode_128x8_4x1_persistent", [=](const bf16* w, cudaStream_t st) {
                         dec::Params p{x, w, yb, nullptr, k, k, n, 1, n, k, 0};
                         CHECK((dec::launch<Wide, true>(p, 1, 0, sms, true, st)));
                       }});
    auto add_warp = [&](auto kernel, const char* name) {
      int per_sm = 0;
      CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 256, 0));
      methods.push_back({name, [=](const bf16* w, cudaStream_t st) {
                           launch_pdl(kernel, dim3(sms * per_sm), dim3(256), 0, st, w, (const bf16*)x, yf, n, k);
                         }});
    };
    add_warp(warp_stream<4>, "warp_u4");
    add_warp(warp_stream<8>, "warp_u8");
    add_warp(frag_stream<4>, "frag_u4");
    add_warp(frag_stream<8>, "frag_u8");
    auto add_bulk = [&](auto kernel, int smem, const char* name) {
      CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      methods.push_back({name, [=](const bf16* w, cudaStream_t st) {
                           launch_pdl(kernel, dim3(sms), dim3(160), smem, st, w, (const bf16*)x, yf, n, k);
                         }});
    };
    add_bulk(bulk_stream<16, 1024, 6, false>, Bulk<16, 1024, 6, false>::kSmem, "bulk_16x1024_s6");
    add_bulk(bulk_stream<16, 1024, 6, true>, Bulk<16, 1024, 6, true>::kSmem, "bulk_16x1024_s6_early");
    add_bulk(bulk_stream<8, 2048, 6, true>, Bulk<8, 2048, 6, true>::kSmem, "bulk_8x2048_s6_early");
    add_bulk(bulk_stream<32, 512, 6, true>, Bulk<32, 512, 6, true>::kSmem, "bulk_32x512_s6_early");

    // Check each probe's sums once against cuBLAS.
    std::vector<bf16> ref(n);
    methods[0].launch(ws[0], stream);
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaMemcpy(ref.data(), yb, n * 2, cudaMemcpyDeviceToHost));
    for (auto& m : methods) {
      const bool fp32 = m.name.rfind("warp", 0) == 0 || m.name.rfind("frag", 0) == 0 || m.name.rfind("bulk", 0) == 0;
      CHECK(cudaMemset(yf, 0, n * 4));
      CHECK(cudaMemset(yb, 0xff, n * 2));
      m.launch(ws[0], stream);
      CHECK(cudaStreamSynchronize(stream));
      double worst = 0;
      std::vector<float> got(n);
      if (fp32) {
        CHECK(cudaMemcpy(got.data(), yf, n * 4, cudaMemcpyDeviceToHost));
      } else {
        std::vector<bf16> b(n);
        CHECK(cudaMemcpy(b.data(), yb, n * 2, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; ++i) got[i] = __bfloat162float(b[i]);
      }
      for (int i = 0; i < n; ++i) {
        const double r = __bfloat162float(ref[i]);
        worst = std::max(worst, std::fabs(got[i] - r) / (std::fabs(r) + 1.0));
      }
      if (!(worst < 0.05)) std::printf("# %s wrong at N=%d K=%d: %.3g\n", m.name.c_str(), n, k, worst);
    }

    std::vector<cudaGraphExec_t> graphs;
    for (auto& m : methods) {
      cudaGraph_t g;
      CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      for (int i = 0; i < per_graph; ++i) m.launch(ws[i % copies], stream);
      CHECK(cudaStreamEndCapture(stream, &g));
      cudaGraphExec_t e;
      CHECK(cudaGraphInstantiate(&e, g, 0));
      CHECK(cudaGraphDestroy(g));
      CHECK(cudaGraphLaunch(e, stream));
      graphs.push_back(e);
    }
    CHECK(cudaStreamSynchronize(stream));
    std::vector<std::vector<float>> samples(methods.size());
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    for (int rep = 0; rep < 15; ++rep) {
      for (size_t j = 0; j < graphs.size(); ++j) {
        CHECK(cudaEventRecord(a, stream));
        CHECK(cudaGraphLaunch(graphs[j], stream));
        CHECK(cudaEventRecord(b, stream));
        CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        samples[j].push_back(ms * 1000 / per_graph);
      }
    }
    const double mb = bytes / 1e6;
    std::printf("N=%d K=%d %.1f MB\n", n, k, mb);
    for (size_t j = 0; j < methods.size(); ++j) {
      auto& s = samples[j];
      std::nth_element(s.begin(), s.begin() + s.size() / 2, s.end());
      const double us = s[s.size() / 2];
      std::printf("  %-28s %8.2f us %5.2f TB/s\n", methods[j].name.c_str(), us, mb / us);
      CHECK(cudaGraphExecDestroy(graphs[j]));
    }
    for (auto p : ws) CHECK(cudaFree(p));
    CHECK(cudaFree(x));
    CHECK(cudaFree(yb));
    CHECK(cudaFree(yf));
  }
  return 0;
}

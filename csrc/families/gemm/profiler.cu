// The profiler: times launch configs on one problem the way inference runs them (cold weights, no host
// launch gaps), so that tables tuned from these numbers pick the kernels that are fast in production.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "cutlass/numeric_types.h"
#include "cuda_check.h"
#include "wavetune/errors.h"
#include "wavetune/kernels.h"

namespace wavetune {
namespace {

__device__ inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform values in [-1, 1): never zeros, which would run faster than real data.
template <class T>
__global__ void fill_uniform(T* data, int64_t count, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const float u = float(splitmix64(seed ^ (uint64_t(i) * 0xD1B54A32D192ED03ull)) >> 40) * (1.0f / 16777216.0f);
    data[i] = T(2.0f * u - 1.0f);
  }
}

// Spins one thread for `ns` nanoseconds: holds the stream while the host queues what must follow back to back.
__global__ void hold(uint64_t ns) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { WAVETUNE_CUDA_CHECK(cudaMalloc(&ptr, bytes)); }
  ~DeviceBuffer() { cudaFree(ptr); }
};

struct StreamHandle {
  cudaStream_t stream = nullptr;
  StreamHandle() { WAVETUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
  ~StreamHandle() { cudaStreamDestroy(stream); }
};

struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  Events() {
    WAVETUNE_CUDA_CHECK(cudaEventCreate(&start));
    WAVETUNE_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
};

struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

constexpr int64_t kAlign = 256;
int64_t aligned(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Median us per launch of each config's graph, NaN where none was captured (the config cannot run the
// problem); `lead_ins` as ProfileOptions says.
// NOTES: replays are interleaved, one of each launch per round, so that clock and power drift over the
// measurement (long GEMMs heat the GPU and lower its clocks) falls on all launches alike instead of
// favouring the ones measured first; launches of one problem are compared with each other. Each replay
// then starts from the power and clock state its predecessor left, which moved a 1.4 ms kernel by up to
// 17% with the order of the configs (H100, docs/results.md#launch_order_h100.jsonl). So each round runs in
// a fresh order (seeded), and `lead_in` launches of the config's own precede each timed replay, held
// behind a short spin so that the host has queued the timed replay before they end and no idle gap
// falls inside the timing.
std::vector<double> interleaved_medians(const std::vector<Graph>& graphs, const std::vector<Graph>& lead_ins,
                                        int64_t per_graph, const ProfileOptions& options, cudaStream_t stream) {
  constexpr uint64_t kHoldNs = 30000;
  Events events;
  std::vector<size_t> order(graphs.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::mt19937_64 shuffler(options.seed);
  std::vector<std::vector<double>> samples(graphs.size());
  for (int r = 0; r < options.replays; ++r) {
    std::shuffle(order.begin(), order.end(), shuffler);
    for (size_t i : order) {
      if (!graphs[i].exec) continue;
      if (!lead_ins.empty()) {
        hold<<<1, 1, 0, stream>>>(kHoldNs);
        WAVETUNE_CUDA_CHECK(cudaGetLastError());
        WAVETUNE_CUDA_CHECK(cudaGraphLaunch(lead_ins[i].exec, stream));
      }
      WAVETUNE_CUDA_CHECK(cudaEventRecord(events.start, stream));
      WAVETUNE_CUDA_CHECK(cudaGraphLaunch(graphs[i].exec, stream));
      WAVETUNE_CUDA_CHECK(cudaEventRecord(events.stop, stream));
      WAVETUNE_CUDA_CHECK(cudaEventSynchronize(events.stop));
      float ms = 0;
      WAVETUNE_CUDA_CHECK(cudaEventElapsedTime(&ms, events.start, events.stop));
      samples[i].push_back(1000.0 * ms / double(per_graph));
    }
  }
  std::vector<double> result(graphs.size(), std::numeric_limits<double>::quiet_NaN());
  for (size_t i = 0; i < graphs.size(); ++i) {
    if (!graphs[i].exec) continue;
    std::nth_element(samples[i].begin(), samples[i].begin() + samples[i].size() / 2, samples[i].end());
    result[i] = samples[i][samples[i].size() / 2];
  }
  WAVETUNE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return result;
}

}  // namespace

std::vector<double> profile(int32_t m, int32_t n, int32_t k, DType dtype, BLayout b_layout,
                            const std::vector<Launch>& launches, const ProfileOptions& options) {
  if (options.warmup < 1 || options.replays < 1 || options.min_launches < 1 || options.lead_in < 0) {
    WAVETUNE_INVALID("profile options need warmup, replays and min_launches >= 1 and lead_in >= 0");
  }
  const int64_t a_bytes = aligned(int64_t(m) * k * 2), b_bytes = aligned(int64_t(k) * n * 2);
  const int64_t d_bytes = aligned(int64_t(m) * n * 2), copy_bytes = a_bytes + b_bytes + d_bytes;
  int64_t cold_bytes = options.cold_bytes;
  if (cold_bytes <= 0) cold_bytes = 2 * device_properties().l2_bytes;
  // NOTES: a weight read once per launch must come from DRAM, as in a forward pass: enough copies that
  // the ones a graph cycles through exceed the L2 (a single copy larger than that needs no rotation).
  const int64_t copies = std::clamp<int64_t>((cold_bytes + copy_bytes - 1) / copy_bytes, 1, 64);
  const int64_t per_graph = copies * ((options.min_launches + copies - 1) / copies);

  DeviceBuffer buffer(size_t(copies * copy_bytes));
  StreamHandle stream;
  auto* base = static_cast<char*>(buffer.ptr);
  const int64_t elements = copies * copy_bytes / 2;
  if (dtype == DType::bf16) {
    fill_uniform<<<1024, 256, 0, stream.stream>>>(reinterpret_cast<cutlass::bfloat16_t*>(base), elements, options.seed);
  } else {
    fill_uniform<<<1024, 256, 0, stream.stream>>>(reinterpret_cast<cutlass::half_t*>(base), elements, options.seed);
  }
  WAVETUNE_CUDA_CHECK(cudaGetLastError());

  auto problem = [&](int64_t copy) {
    char* p = base + copy * copy_bytes;
    return GemmProblem{m, n, k, p, k, p + a_bytes, b_layout == BLayout::col ? k : n, p + a_bytes + b_bytes, n,
                       dtype, b_layout};
  };

  std::vector<bool> runnable(launches.size());
  size_t workspace_bytes = 0;
  for (size_t i = 0; i < launches.size(); ++i) {
    runnable[i] = why_not(problem(0), launches[i].variant, launches[i].micro).empty();
    if (runnable[i]) {
      workspace_bytes = std::max(workspace_bytes, gemm_workspace_bytes(problem(0), launches[i].variant, launches[i].micro));
    }
  }
  // One workspace for all launches: they run one after another on one stream.
  DeviceBuffer workspace(std::max<size_t>(workspace_bytes, 1));
  auto launch = [&](const Launch& l, int64_t copy) {
    gemm(problem(copy), l.variant, l.micro, workspace.ptr, workspace_bytes, stream.stream);
  };
  for (size_t i = 0; i < launches.size(); ++i) {
    if (!runnable[i]) continue;
    for (int r = 0; r < options.warmup; ++r) launch(launches[i], r % copies);
  }
  WAVETUNE_CUDA_CHECK(cudaStreamSynchronize(stream.stream));

  // `count` launches of one config over the copies, from `first` on, as a graph uploaded by one replay.
  auto capture = [&](const Launch& config, int64_t first, int64_t count, Graph* g) {
    WAVETUNE_CUDA_CHECK(cudaStreamBeginCapture(stream.stream, cudaStreamCaptureModeThreadLocal));
    try {
      for (int64_t j = first; j < first + count; ++j) launch(config, j % copies);
    } catch (...) {
      cudaStreamEndCapture(stream.stream, &g->graph);
      throw;
    }
    WAVETUNE_CUDA_CHECK(cudaStreamEndCapture(stream.stream, &g->graph));
    WAVETUNE_CUDA_CHECK(cudaGraphInstantiate(&g->exec, g->graph, 0));
    WAVETUNE_CUDA_CHECK(cudaGraphLaunch(g->exec, stream.stream));
  };
  std::vector<Graph> graphs(launches.size()), lead_ins(options.lead_in > 0 ? launches.size() : 0);
  for (size_t i = 0; i < launches.size(); ++i) {
    if (!runnable[i]) continue;
    capture(launches[i], 0, per_graph, &graphs[i]);
    // The lead-in ends on the last copy, so the timed graph's first launch (copy 0) follows it as the
    // rotation would, its operands outside the L2.
    if (options.lead_in > 0) capture(launches[i], options.lead_in * (copies - 1), options.lead_in, &lead_ins[i]);
  }

  return interleaved_medians(graphs, lead_ins, per_graph, options, stream.stream);
}

}  // namespace wavetune

// The paged attention kernel for many query rows (prefill, chunks after a cached prefix, packed prompts) on
// Hopper's warpgroup MMA, warp-specialized.
//
// NOTES: the mma.sync kernels (sm90_paged_attention.cuh) feed every 16-row tile's operands through ldmatrix
// and every warp both copies and computes, so on long queries shared memory and issue slots, not the tensor
// cores, set their rate. Here a CTA is three warpgroups. The first only copies: the query tile, then each
// 64-key step of K and V, found through the block table, with cp.async into 128-byte-swizzled panels; each
// copy arrives on its stage's "full" barrier when it lands, so no thread waits on its own copies. The other
// two each own 64 query rows and only compute: wgmma reads Q and K from shared memory for S = Q K^T, and
// P (in registers, the A operand) and V (the MN-major operand) for O += P V. A step's P V runs while the
// next step's scores go through the softmax, and a consumer warp frees a stage on its "empty" barrier once
// the P V that read it is done. Register budgets move from the copying warpgroup to the computing ones
// (setmaxnreg). Keys stay where the table puts them, so TMA (one box over one tensor) is not used.
#pragma once

#include <utility>

#include "cute/arch/mma_sm90_gmma.hpp"
#include "sm90_paged_attention.cuh"

namespace wavetune::detail::paged {

constexpr int kWarpgroupRows = 64;    // query rows per computing warpgroup (a wgmma's M)
constexpr int kWsStepKeys = 64;       // keys per step (the N of S = Q K^T)
constexpr int kWsComputeGroups = 2;   // computing warpgroups; the CTA's row block is 128 rows
constexpr int kWsThreads = 128 * (kWsComputeGroups + 1);
constexpr int kWsBlockRows = kWarpgroupRows * kWsComputeGroups;
constexpr int kWsCopyRegisters = 40, kWsComputeRegisters = 232;  // 128 x 40 + 256 x 232 <= 64K registers

// K and V stages in shared memory (32 KB a stage at head dim 128).
template <int kHeadDim>
constexpr int ws_stages() {
  return kHeadDim == 64 ? 8 : 5;
}

// Byte layout of the dynamic shared memory: 1024 bytes of slack to align the swizzled panels, the query
// tile, K stages, V stages, then the barriers (full and empty per stage, one for the query tile).
template <int kHeadDim>
struct WsLayout {
  static constexpr uint32_t kTileBytes = kWsStepKeys * kHeadDim * 2;
  static constexpr uint32_t kQueries = 0;
  static constexpr uint32_t kKeys = kWsBlockRows * kHeadDim * 2;
  static constexpr uint32_t kValues = kKeys + ws_stages<kHeadDim>() * kTileBytes;
  static constexpr uint32_t kBarriers = kValues + ws_stages<kHeadDim>() * kTileBytes;
  static constexpr uint32_t kBytes = kBarriers + (2 * ws_stages<kHeadDim>() + 1) * 8;
};

template <int kHeadDim>
constexpr size_t ws_shared_bytes() {
  return 1024 + WsLayout<kHeadDim>::kBytes;
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of kTileRows rows laid out as wgmma's 128-byte
// swizzle reads it: 64-column panels of kTileRows x 128 bytes, chunk c of row r at c ^ (r % 8) in the row.
template <int kTileRows>
__device__ __forceinline__ uint32_t panel_offset(int row, int chunk) {
  return uint32_t(chunk / 8) * kTileRows * 128 + uint32_t(row) * 128 + uint32_t((chunk % 8) ^ (row % 8)) * 16;
}

// A shared-memory matrix descriptor with the 128-byte swizzle: `panels` the byte stride between 64-column
// panels (read only for MN-major operands), `groups` the stride between groups of 8 rows.
__device__ __forceinline__ uint64_t smem_descriptor(uint32_t address, uint32_t panels, uint32_t groups) {
  return uint64_t((address & 0x3FFFF) >> 4) | uint64_t(panels >> 4) << 16 | uint64_t(groups >> 4) << 32 |
         uint64_t(1) << 62;
}

__device__ __forceinline__ void barrier_init(uint32_t barrier, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(count));
}

__device__ __forceinline__ void barrier_arrive(uint32_t barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(barrier) : "memory");
}

// Arrives on `barrier` when every cp.async this thread issued so far has landed.
__device__ __forceinline__ void barrier_arrive_on_copies(uint32_t barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(barrier) : "memory");
}

__device__ __forceinline__ void barrier_wait(uint32_t barrier, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(barrier), "r"(parity)
        : "memory");
  }
}

// The computing warpgroups' own barrier (id 1; __syncthreads uses 0).
__device__ __forceinline__ void compute_groups_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(128 * kWsComputeGroups) : "memory");
}

namespace gmma = cute::SM90::GMMA;

// S = Q K^T (64 x 64, both operands K-major in shared memory) and O += P V (64 x head dim, P in registers,
// V MN-major in shared memory).
template <class T, int kHeadDim>
struct WgmmaOps;
#define WAVETUNE_WGMMA_OPS(TYPE, HEAD_DIM, NAME)                                                 \
  template <>                                                                                     \
  struct WgmmaOps<TYPE, HEAD_DIM> {                                                               \
    using Scores = gmma::MMA_64x64x16_F32##NAME##_SS<gmma::Major::K, gmma::Major::K>;            \
    using Values = gmma::MMA_64x##HEAD_DIM##x16_F32##NAME##_RS<gmma::Major::K, gmma::Major::MN>; \
  };
WAVETUNE_WGMMA_OPS(__nv_bfloat16, 64, BF16BF16)
WAVETUNE_WGMMA_OPS(__nv_bfloat16, 128, BF16BF16)
WAVETUNE_WGMMA_OPS(__half, 64, F16F16)
WAVETUNE_WGMMA_OPS(__half, 128, F16F16)
#undef WAVETUNE_WGMMA_OPS

template <class Op, size_t... I>
__device__ __forceinline__ void wgmma_ss(uint64_t a, uint64_t b, float* d, bool accumulate, std::index_sequence<I...>) {
  Op::fma(a, b, d[I]..., accumulate ? gmma::ScaleOut::One : gmma::ScaleOut::Zero);
}

template <class Op, size_t... I>
__device__ __forceinline__ void wgmma_rs(const uint32_t (&a)[4], uint64_t b, float* d, std::index_sequence<I...>) {
  Op::fma(a[0], a[1], a[2], a[3], b, d[I]..., gmma::ScaleOut::One);
}

// Keeps the compiler from moving reads and writes of wgmma's registers (accumulators, or P as the A operand)
// across its asynchronous work.
template <class E, int N>
__device__ __forceinline__ void fence_registers(E (&r)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) cute::warpgroup_fence_operand(r[n][e]);
  }
}

// The copying warpgroup: the query tile, then K and V of every step into the stages, each stage once the
// computing warps have freed it. Warp w copies keys [16 w, 16 w + 16) of a step; a lane finds the cache row
// of key 16 w + lane % 16 through the table a step ahead and hands it to the lanes copying that key's chunks.
template <int kHeadDim>
__device__ void copy_steps(const Params& p, const CtaWork& w, int steps, uint32_t base) {
  using L = WsLayout<kHeadDim>;
  constexpr int kStages = ws_stages<kHeadDim>(), kChunks = kHeadDim / 8;
  const int thread = threadIdx.x % 128, warp = thread / 32, lane = thread % 32;
  const uint32_t full = base + L::kBarriers, empty = full + 8 * kStages, queries_full = empty + 8 * kStages;
  load_queries<kHeadDim>(p, w.seq, blockIdx.y, w.first_row, w.rows, kWsBlockRows, base + L::kQueries,
                         panel_offset<kWsBlockRows>, thread, 128);
  barrier_arrive_on_copies(queries_full);
  const auto* k = static_cast<const uint4*>(p.k);
  const auto* v = static_cast<const uint4*>(p.v);
  auto row_offset = [&](int i) {
    return key_offset(p, blockIdx.z, blockIdx.y, w.begin + i * kWsStepKeys + 16 * warp + lane % 16, w.end);
  };
  int64_t mine = row_offset(0);
  for (int i = 0; i < steps; ++i) {
    const int stage = i % kStages;
    if (i >= kStages) barrier_wait(empty + 8 * stage, (i / kStages - 1) & 1);
#pragma unroll
    for (int j = 0; j < 16 * kChunks / 32; ++j) {
      const int index = lane + 32 * j, key = index / kChunks, chunk = index % kChunks;
      const int64_t offset = __shfl_sync(0xffffffffu, mine, key);
      const int64_t from = offset < 0 ? 0 : offset / 8 + chunk;
      const uint32_t to = stage * L::kTileBytes + panel_offset<kWsStepKeys>(16 * warp + key, chunk);
      cp_async_16(base + L::kKeys + to, k + from, offset >= 0);
      cp_async_16(base + L::kValues + to, v + from, offset >= 0);  // zeros past the end keep 0 x V finite
    }
    barrier_arrive_on_copies(full + 8 * stage);
    mine = row_offset(i + 1);
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// A computing warpgroup's wgmma work for one step, each asynchronous: S = Q K^T into `s` (both from shared
// memory), and O += P V (P from registers).
template <class T, int kHeadDim>
struct WarpgroupMath {
  using Ops = WgmmaOps<T, kHeadDim>;
  static constexpr uint32_t kPanelBytes = kWsStepKeys * 128;
  uint32_t queries;  // the warpgroup's 64 rows of the query tile

  __device__ __forceinline__ void scores(float (&s)[kWsStepKeys / 8][4], uint32_t keys) const {
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
      const uint32_t column = uint32_t(ks % 4) * 32;  // 16 columns of a 64-column panel
      const uint64_t a = smem_descriptor(queries + uint32_t(ks / 4) * kWsBlockRows * 128 + column, 16, 1024);
      const uint64_t b = smem_descriptor(keys + uint32_t(ks / 4) * kPanelBytes + column, 16, 1024);
      wgmma_ss<typename Ops::Scores>(a, b, &s[0][0], ks > 0, std::make_index_sequence<kWsStepKeys / 2>{});
    }
    cute::warpgroup_commit_batch();
  }
  __device__ __forceinline__ void values(SoftmaxState<kHeadDim>& st, const uint32_t (&p)[kWsStepKeys / 16][4],
                                         uint32_t values) const {
#pragma unroll
    for (int ks = 0; ks < kWsStepKeys / 16; ++ks) {
      const uint64_t b = smem_descriptor(values + uint32_t(ks) * 16 * 128, kPanelBytes, 1024);
      wgmma_rs<typename Ops::Values>(p[ks], b, &st.o[0][0], std::make_index_sequence<kHeadDim / 2>{});
    }
    cute::warpgroup_commit_batch();
  }
};

// A computing warpgroup (0 or 1): its 64 rows over every step, then its rows normalized into the staged tile.
// NOTES: no wgmma sits in a branch (ptxas serializes wgmma whose registers a divergent path touches), so the
// loop is peeled: step 0's scores, then each step's scores beside the previous step's P V, then the last
// P V. A warpgroup also scores steps past its own rows' keys (with the causal mask, the other warpgroup's
// last one); the mask zeroes them.
template <class T, int kHeadDim>
__device__ void compute_steps(const Params& p, const CtaWork& w, int steps, uint32_t base, float* staged,
                              float* staged_lse, int group) {
  using L = WsLayout<kHeadDim>;
  constexpr int kStages = ws_stages<kHeadDim>();
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const uint32_t full = base + L::kBarriers, empty = full + 8 * kStages, queries_full = empty + 8 * kStages;
  int row_end[2];
  lane_row_ends(p, w.seq, w.first_row + group * kWarpgroupRows + warp * kRows, w.split_end, lane, row_end);
  const int unmasked = warp_unmasked_end(row_end);
  const WarpgroupMath<T, kHeadDim> math{base + L::kQueries + uint32_t(group) * kWarpgroupRows * 128};
  auto keys = [&](int i) { return base + L::kKeys + uint32_t(i % kStages) * L::kTileBytes; };
  auto values = [&](int i) { return base + L::kValues + uint32_t(i % kStages) * L::kTileBytes; };
  auto wait_step = [&](int i) {
    barrier_wait(full + 8 * (i % kStages), (i / kStages) & 1);
    // NOTES: cp.async writes through the generic proxy and wgmma reads through the async one.
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  };
  auto free_step = [&](int i) {  // step i's K and V are read: its stage may be refilled
    __syncwarp();
    if (lane == 0) barrier_arrive(empty + 8 * (i % kStages));
  };

  SoftmaxState<kHeadDim> st;
  uint32_t probabilities[kWsStepKeys / 16][4];  // P of the step whose P V comes next
  float correction[2];
  barrier_wait(queries_full, 0);
  if (steps > 0) {
    wait_step(0);
    float s[kWsStepKeys / 8][4];
    fence_registers(s);
    cute::warpgroup_arrive();
    math.scores(s, keys(0));
    cute::warpgroup_wait<0>();
    fence_registers(s);
    online_softmax<kHeadDim, kWsStepKeys>(st, s, correction, w.begin, row_end, unmasked, p.scale_log2, lane);
    pack_probabilities<T, kWsStepKeys>(s, probabilities);
    for (int i = 1; i < steps; ++i) {
      wait_step(i);
      float s[kWsStepKeys / 8][4];
      fence_registers(s);
      fence_registers(st.o);
      fence_registers(probabilities);
      cute::warpgroup_arrive();
      math.scores(s, keys(i));
      math.values(st, probabilities, values(i - 1));
      fence_registers(probabilities);
      cute::warpgroup_wait<1>();  // the scores; the P V committed after them may still run
      fence_registers(s);
      online_softmax<kHeadDim, kWsStepKeys>(st, s, correction, w.begin + i * kWsStepKeys, row_end, unmasked,
                                            p.scale_log2, lane);
      cute::warpgroup_wait<0>();
      fence_registers(st.o);
      fence_registers(probabilities);
      free_step(i - 1);
      // NOTES: P is packed only now: written while the P V that reads the previous P runs, its registers
      // would be that wgmma's inputs, and ptxas would serialize every wgmma of the kernel.
      pack_probabilities<T, kWsStepKeys>(s, probabilities);
      rescale(st, correction);
    }
    fence_registers(st.o);
    fence_registers(probabilities);
    cute::warpgroup_arrive();
    math.values(st, probabilities, values(steps - 1));
    cute::warpgroup_wait<0>();
    fence_registers(st.o);
  }
  compute_groups_sync();  // both warpgroups are done with the tiles the staged rows overwrite
  stage_rows<kHeadDim>(st, staged, staged_lse, group * kWarpgroupRows + warp * kRows, lane);
}

// Grid as paged_attention_kernel's; a row block is 128 rows.
template <class T, int kHeadDim>
__global__ void __launch_bounds__(kWsThreads, 1) paged_attention_ws_kernel(Params p) {
  constexpr int kStages = ws_stages<kHeadDim>();
  using L = WsLayout<kHeadDim>;
  extern __shared__ uint4 shared[];
  const uint32_t base = (shared_address(shared) + 1023u) & ~1023u;  // the swizzle repeats every 1024 bytes
  CtaWork w;
  if (!cta_work(p, kWsBlockRows, w)) return;
  const int steps = w.end > w.begin ? (w.end - w.begin + kWsStepKeys - 1) / kWsStepKeys : 0;
  if (threadIdx.x == 0) {
    const uint32_t full = base + L::kBarriers, empty = full + 8 * kStages;
    for (int s = 0; s < kStages; ++s) {
      barrier_init(full + 8 * s, 128);                    // a copy arrival per copying thread
      barrier_init(empty + 8 * s, 4 * kWsComputeGroups);  // an arrival per computing warp
    }
    barrier_init(empty + 8 * kStages, 128);  // the query tile
  }
  __syncthreads();
  // NOTES: the warpgroup index goes through a shuffle so that the compiler sees it is the same in a warp.
  const int warpgroup = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWsCopyRegisters));
    copy_steps<kHeadDim>(p, w, steps, base);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kWsComputeRegisters));
  static_assert(staged_bytes<kHeadDim>(kWsBlockRows) <= L::kBarriers);
  float* staged = reinterpret_cast<float*>(shared) + (base - shared_address(shared)) / 4;
  float* staged_lse = staged + kWsBlockRows * staged_row_floats<kHeadDim>();
  compute_steps<T, kHeadDim>(p, w, steps, base, staged, staged_lse, warpgroup - 1);
  compute_groups_sync();
  write_rows<T, kHeadDim>(p, w.seq, blockIdx.y, w.first_row, w.rows, w.split, staged, staged_lse, threadIdx.x - 128,
                          128 * kWsComputeGroups);
}

}  // namespace wavetune::detail::paged

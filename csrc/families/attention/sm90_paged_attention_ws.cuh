// The paged attention kernel for many query rows (prefill, chunks after a cached prefix, packed prompts) on
// Hopper's warpgroup MMA, warp-specialized.
//
// NOTES: the mma.sync kernels (sm90_paged_attention.cuh) feed every 16-row tile's operands through ldmatrix and
// every warp both copies and computes, so on long queries shared memory and issue slots, not the tensor cores, set
// their rate. Here a CTA is a copying warpgroup and one or two computing ones. The first copies each step of K
// and V (64 or 128 keys), found through the block table, with cp.async into 128-byte-swizzled panels; each copy
// arrives on its stage's "full" barrier when it lands, so no thread waits on its own copies. The others each own
// 64 query rows and only compute: their Q fragments, read once, are the A operand of S = Q K^T in registers, and
// P (registers) and V (the MN-major operand) that of O += P V. A step's P V runs while the next step's scores go
// through the softmax, and a consumer warp frees a stage on its "empty" barrier once the P V that
// read it is done. Register budgets move from the copying warpgroup to the computing ones (setmaxnreg). Keys stay
// where the table puts them, so TMA (one box over one tensor) is not used. A copying warp and the computing warps
// share each scheduler, and instruction issue, more than the tensor cores, bounds the step (ncu on a long prompt,
// H100: tensor pipe and issue slots each about half busy). So each lane's copy addresses are fixed but for the
// key's row, the pipeline's stage and parity are carried rather than divided out, descriptors move by one add, and
// 128-key steps halve the softmax steps, rescales and waits per key.
#pragma once

#include <utility>

#include "cute/arch/mma_sm90_gmma.hpp"
#include "cutlass/arch/barrier.h"
#include "sm90_paged_attention.cuh"

namespace wavetune::detail::paged {

// NOTES: a CTA of two computing warpgroups (128 rows) reads each key into shared memory once for twice the rows;
// one of a single computing warpgroup (64 rows) fits twice on an SM, so one CTA's start (its first copies'
// latency) and end (its rows written out) run beside the other's math, which short prompts and a few tokens
// per KV head (speculative steps) are made of. The wave model picks between them (paged_model.h).
template <int kGroups>
struct WsShape {
  static_assert(kGroups == 1 || kGroups == 2);
  static constexpr int kThreads = 32 * kWsCopyWarps + 128 * kGroups;
  static constexpr int kBlockRows = kWarpgroupRows * kGroups;
  static constexpr int kCtasPerSm = 3 - kGroups;
  // Registers a thread of the copying and the computing warpgroups (setmaxnreg): all of the SM's 64K.
  static constexpr int kCopyRegisters = 40, kComputeRegisters = kGroups == 2 ? 232 : 216;
  static_assert(kCtasPerSm * 128 * (kCopyRegisters + kGroups * kComputeRegisters) <= 65536);
};

// Byte layout of the dynamic shared memory: 1024 bytes of slack to align the swizzled panels, K stages, V
// stages, then the barriers (full and empty per stage). A stage's tile of keys is laid out as wgmma's 128-byte
// swizzle reads it: 64-column panels of kStepKeys x 128 bytes, 16-byte chunk c of key r at c ^ (r % 8) in its row.
template <int kHeadDim, int kStepKeys, int kGroups>
struct WsLayout {
  // K and V stages: as many as the kernels' one or two CTAs per SM fit (a stage of 64 keys at head dim 128 is
  // 32 KB); the counts of two warpgroups are those measured when the query tile shared the space.
  static constexpr int kStages = kGroups == 1 ? (kHeadDim == 64 ? 6 : 3)
                                 : kStepKeys == 64 ? (kHeadDim == 64 ? 8 : 5) : (kHeadDim == 64 ? 6 : 3);
  static constexpr uint32_t kTileBytes = kStepKeys * kHeadDim * 2;
  static constexpr uint32_t kKeys = 0;
  static constexpr uint32_t kValues = kKeys + kStages * kTileBytes;
  static constexpr uint32_t kBarriers = kValues + kStages * kTileBytes;
  static constexpr uint32_t kBytes = kBarriers + 2 * kStages * 8;
};

template <int kHeadDim, int kStepKeys, int kGroups>
constexpr size_t ws_shared_bytes() {
  return 1024 + WsLayout<kHeadDim, kStepKeys, kGroups>::kBytes;
}

// A shared-memory matrix descriptor with the 128-byte swizzle: `panels` the byte stride between 64-column
// panels (read only for MN-major operands), `groups` the stride between groups of 8 rows.
__device__ __forceinline__ uint64_t smem_descriptor(uint32_t address, uint32_t panels, uint32_t groups) {
  return uint64_t((address & 0x3FFFF) >> 4) | uint64_t(panels >> 4) << 16 | uint64_t(groups >> 4) << 32 |
         uint64_t(1) << 62;
}

// A descriptor `bytes` further on: shared addresses stay below 256 KB, so the 14-bit address field takes the
// sum without a carry and one 32-bit add does.
__device__ __forceinline__ uint64_t descriptor_at(uint64_t descriptor, uint32_t bytes) {
  return (descriptor & ~uint64_t(0xFFFFFFFFu)) | uint32_t(uint32_t(descriptor) + (bytes >> 4));
}

using Barrier = cutlass::arch::ClusterBarrier;

// The stage barriers (Barrier, one 64-bit word each): full[s], its K and V landed;
// empty[s], the computing warps are done reading them.
struct WsBarriers {
  uint64_t* full;
  uint64_t* empty;
};

template <class L>
__device__ __forceinline__ WsBarriers ws_barriers(uint8_t* aligned) {
  uint64_t* full = reinterpret_cast<uint64_t*>(aligned + L::kBarriers);
  return {full, full + L::kStages};
}

// The computing warpgroups' own barrier (id 1; __syncthreads uses 0). NOTES: not CUTLASS's NamedBarrier, whose
// bar.sync has no memory clobber: plain C++ stores to shared memory (the staged rows) follow this one.
template <int kGroups>
__device__ __forceinline__ void compute_groups_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(128 * kGroups) : "memory");
}

namespace gmma = cute::SM90::GMMA;

// S = Q K^T (64 x step keys, Q in registers, K K-major in shared memory) and O += P V (64 x head dim, P in
// registers, V MN-major in shared memory): a 64 x N x 16 wgmma with A in registers.
template <class T, int N, gmma::Major kMajorB>
struct WgmmaRs;
#define WAVETUNE_WGMMA_RS(TYPE, N, NAME)                                                            \
  template <gmma::Major kMajorB>                                                                    \
  struct WgmmaRs<TYPE, N, kMajorB> : gmma::MMA_64x##N##x16_F32##NAME##_RS<gmma::Major::K, kMajorB> {};
WAVETUNE_WGMMA_RS(__nv_bfloat16, 64, BF16BF16)
WAVETUNE_WGMMA_RS(__nv_bfloat16, 128, BF16BF16)
WAVETUNE_WGMMA_RS(__half, 64, F16F16)
WAVETUNE_WGMMA_RS(__half, 128, F16F16)
#undef WAVETUNE_WGMMA_RS

template <class Op, size_t... I>
__device__ __forceinline__ void wgmma_rs(const uint32_t (&a)[4], uint64_t b, float* d, bool accumulate,
                                         std::index_sequence<I...>) {
  Op::fma(a[0], a[1], a[2], a[3], b, d[I]..., accumulate ? gmma::ScaleOut::One : gmma::ScaleOut::Zero);
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

// A pipeline's position: the stage of step i and the parity of its round (i / kStages).
template <int kStages>
struct StagePhase {
  int stage = 0;
  uint32_t parity = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) stage = 0, parity ^= 1;
  }
};

// The copying warpgroup: K and V of every step into the stages, each stage once the computing warps have
// freed it. Warp w copies keys [n w, n w + n) of a step (n = kWarpKeys, a quarter of the
// step); a lane finds the cache row of key n w + lane % n through the table a step ahead and hands it to the
// lanes copying that key's chunks.
template <int kHeadDim, int kStepKeys, int kGroups>
__device__ void copy_steps(const Params& p, const CtaWork& w, int steps, uint32_t base, const WsBarriers& bar) {
  using L = WsLayout<kHeadDim, kStepKeys, kGroups>;
  constexpr int kStages = L::kStages, kChunks = kHeadDim / 8, kWarpKeys = kStepKeys / kWsCopyWarps;
  const int thread = threadIdx.x % 128, warp = thread / 32, lane = thread % 32;
  auto row_offset = [&](int i) {
    const int key = w.begin + i * kStepKeys + kWarpKeys * warp + lane % kWarpKeys;
    return key_offset(p, w.batch, w.kv_head, key, w.end);
  };
  // Lane l copies chunk l % kChunks of keys l / kChunks + j * kKeysPerPass: its chunk, panel and swizzle
  // term are fixed, and key % 8 = (l / kChunks) ^ (j * kKeysPerPass % 8) (no carry: kKeysPerPass is a power
  // of two above l / kChunks).
  constexpr int kKeysPerPass = 32 / kChunks;
  const int chunk = lane % kChunks, first_key = lane / kChunks;
  const uint32_t lane_base = uint32_t(chunk / 8) * kStepKeys * 128 + uint32_t(kWarpKeys * warp + first_key) * 128;
  const uint32_t lane_swizzle = uint32_t((chunk % 8) ^ first_key);
  const char* k_lane = static_cast<const char*>(p.k) + 16 * chunk;
  const char* v_lane = static_cast<const char*>(p.v) + 16 * chunk;
  int64_t mine = row_offset(0) * 2;  // in bytes (2-byte elements); negative past the end
  StagePhase<kStages> at;
  for (int i = 0; i < steps; ++i, at.advance()) {
    if (i >= kStages) Barrier::wait(bar.empty + at.stage, at.parity ^ 1);
    const uint32_t stage = base + uint32_t(at.stage) * L::kTileBytes + lane_base;
#pragma unroll
    for (int j = 0; j < kWarpKeys / kKeysPerPass; ++j) {
      const int64_t offset = __shfl_sync(0xffffffffu, mine, first_key + j * kKeysPerPass);
      const uint32_t to = stage + uint32_t(j * kKeysPerPass) * 128 + ((lane_swizzle ^ (j * kKeysPerPass % 8)) << 4);
      cp_async_16(to + L::kKeys, k_lane + offset, offset >= 0);
      cp_async_16(to + L::kValues, v_lane + offset, offset >= 0);  // zeros past the end keep 0 x V finite
    }
    cutlass::arch::cpasync_barrier_arrive_noinc(bar.full + at.stage);
    mine = row_offset(i + 1) * 2;
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// A computing warpgroup's wgmma work for one step, each asynchronous: S = Q K^T into `s` (Q's fragments in
// registers, K from shared memory), and O += P V (P from registers, V from shared memory). Operands are
// given as descriptors of the stage's tile; offsets go to their address word.
// NOTES: each warp reads its 16 query rows from global memory once, straight into the A fragments: S = Q K^T
// with Q in shared memory re-reads it on each of a step's wgmmas, and a query tile there would take the space
// a second CTA per SM needs.
template <class T, int kHeadDim, int kStepKeys>
struct WarpgroupMath {
  static constexpr uint32_t kPanelBytes = kStepKeys * 128;
  uint32_t q[kHeadDim / 16][4];  // this warp's 16 rows as wgmma A fragments (mma.sync's A layout)

  // `first_row`: the warp's first of the sequence's rows; rows from the CTA's last on are zeros.
  __device__ __forceinline__ WarpgroupMath(const Params& p, const CtaWork& w, int first_row, int lane) {
    const T* rows[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = first_row + lane / 4 + 8 * r;
      const QueryRow at = query_row(p, w.seq, w.kv_head, row);
      rows[r] = row < w.first_row + w.rows
                    ? static_cast<const T*>(p.q) + at.token * p.q_t + at.head * p.q_h + 2 * (lane % 4)
                    : nullptr;
    }
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const T* row = rows[e % 2];
        q[ks][e] = row ? *reinterpret_cast<const uint32_t*>(row + 16 * ks + 8 * (e / 2)) : 0u;
      }
    }
    fence_registers(q);
  }

  __device__ __forceinline__ void scores(float (&s)[kStepKeys / 8][4], uint64_t keys) const {
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {  // 16 columns of a 64-column panel
      const uint64_t b = descriptor_at(keys, uint32_t(ks / 4) * kPanelBytes + uint32_t(ks % 4) * 32);
      wgmma_rs<WgmmaRs<T, kStepKeys, gmma::Major::K>>(q[ks], b, &s[0][0], ks > 0,
                                                      std::make_index_sequence<kStepKeys / 2>{});
    }
    cute::warpgroup_commit_batch();
  }
  __device__ __forceinline__ void values(SoftmaxState<kHeadDim>& st, const uint32_t (&p)[kStepKeys / 16][4],
                                         uint64_t values) const {
#pragma unroll
    for (int ks = 0; ks < kStepKeys / 16; ++ks) {
      const uint64_t b = descriptor_at(values, uint32_t(ks) * 16 * 128);
      wgmma_rs<WgmmaRs<T, kHeadDim, gmma::Major::MN>>(p[ks], b, &st.o[0][0], true,
                                                      std::make_index_sequence<kHeadDim / 2>{});
    }
    cute::warpgroup_commit_batch();
  }
};

// A computing warpgroup (0 or 1): its 64 rows over every step, then its rows normalized into the staged tile.
// NOTES: no wgmma sits in a branch (ptxas serializes wgmma whose registers a divergent path touches), so the
// loop is peeled: step 0's scores, then each step's scores beside the previous step's P V, then the last
// P V. A warpgroup also scores steps past its own rows' keys (with the causal mask, the other warpgroup's
// last one); the mask zeroes them.
template <class T, int kHeadDim, int kStepKeys, int kGroups>
__device__ void compute_steps(const Params& p, const CtaWork& w, int steps, uint32_t base, const WsBarriers& bar,
                              float* staged, float* staged_lse, int group) {
  using L = WsLayout<kHeadDim, kStepKeys, kGroups>;
  using Math = WarpgroupMath<T, kHeadDim, kStepKeys>;
  constexpr int kStages = L::kStages;
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int warp_first_row = w.first_row + group * kWarpgroupRows + warp * kRows;
  const Math math(p, w, warp_first_row, lane);  // its loads' latency runs beside the wait for the first step
  int row_end[2];
  lane_row_ends(p, w.seq, warp_first_row, w.split_end, lane, row_end);
  const int unmasked = warp_unmasked_end(row_end);
  const uint64_t keys0 = smem_descriptor(base + L::kKeys, 16, 1024);
  const uint64_t values0 = smem_descriptor(base + L::kValues, Math::kPanelBytes, 1024);
  StagePhase<kStages> at;  // the step being scored
  auto wait_step = [&] {
    Barrier::wait(bar.full + at.stage, at.parity);
    // NOTES: cp.async writes through the generic proxy and wgmma reads through the async one.
    cutlass::arch::fence_view_async_shared();
  };
  auto free_stage = [&](int stage) {  // a step's K and V are read: its stage may be refilled
    __syncwarp();
    if (lane == 0) Barrier::arrive(bar.empty + stage);
  };

  SoftmaxState<kHeadDim> st;
  uint32_t probabilities[kStepKeys / 16][4];  // P of the step whose P V comes next
  float correction[2];
  if (steps > 0) {
    wait_step();
    float s[kStepKeys / 8][4];
    fence_registers(s);
    cute::warpgroup_arrive();
    math.scores(s, keys0);
    cute::warpgroup_wait<0>();
    fence_registers(s);
    online_softmax<kHeadDim, kStepKeys>(st, s, correction, w.begin, row_end, unmasked, p.scale_log2, lane);
    pack_probabilities<T, kStepKeys>(s, probabilities);
    for (int i = 1; i < steps; ++i) {
      const int previous = at.stage;
      at.advance();
      wait_step();
      float s[kStepKeys / 8][4];
      fence_registers(s);
      fence_registers(st.o);
      fence_registers(probabilities);
      cute::warpgroup_arrive();
      math.scores(s, descriptor_at(keys0, uint32_t(at.stage) * L::kTileBytes));
      math.values(st, probabilities, descriptor_at(values0, uint32_t(previous) * L::kTileBytes));
      fence_registers(probabilities);
      cute::warpgroup_wait<1>();  // the scores; the P V committed after them may still run
      fence_registers(s);
      online_softmax<kHeadDim, kStepKeys>(st, s, correction, w.begin + i * kStepKeys, row_end, unmasked,
                                            p.scale_log2, lane);
      cute::warpgroup_wait<0>();
      fence_registers(st.o);
      fence_registers(probabilities);
      free_stage(previous);
      // NOTES: P is packed only now: written while the P V that reads the previous P runs, its registers
      // would be that wgmma's inputs, and ptxas would serialize every wgmma of the kernel.
      pack_probabilities<T, kStepKeys>(s, probabilities);
      rescale(st, correction);
    }
    fence_registers(st.o);
    fence_registers(probabilities);
    cute::warpgroup_arrive();
    math.values(st, probabilities, descriptor_at(values0, uint32_t(at.stage) * L::kTileBytes));
    cute::warpgroup_wait<0>();
    fence_registers(st.o);
  }
  compute_groups_sync<kGroups>();  // the warpgroups are done with the stages the staged rows overwrite
  stage_rows<kHeadDim>(st, staged, staged_lse, group * kWarpgroupRows + warp * kRows, lane);
}

// Grid as paged_attention_kernel's; a row block is 64 rows per computing warpgroup.
template <class T, int kHeadDim, int kStepKeys, int kGroups>
__global__ void __launch_bounds__(WsShape<kGroups>::kThreads, WsShape<kGroups>::kCtasPerSm)
    paged_attention_ws_kernel(Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // wgmma and setmaxnreg: sm_90a only
  using L = WsLayout<kHeadDim, kStepKeys, kGroups>;
  using Shape = WsShape<kGroups>;
  constexpr int kStages = L::kStages;
  extern __shared__ uint4 shared[];
  const uint32_t base = (shared_address(shared) + 1023u) & ~1023u;  // the swizzle repeats every 1024 bytes
  uint8_t* aligned = reinterpret_cast<uint8_t*>(shared) + (base - shared_address(shared));
  const WsBarriers bar = ws_barriers<L>(aligned);
  CtaWork w;
  if (!cta_work(p, Shape::kBlockRows, w)) return;
  const int steps = w.end > w.begin ? (w.end - w.begin + kStepKeys - 1) / kStepKeys : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      Barrier::init(bar.full + s, 128);                    // a copy arrival per copying thread
      Barrier::init(bar.empty + s, 4 * kGroups);  // an arrival per computing warp
    }
  }
  __syncthreads();
  // NOTES: the warpgroup index goes through a shuffle so that the compiler sees it is the same in a warp.
  const int warpgroup = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Shape::kCopyRegisters));
    copy_steps<kHeadDim, kStepKeys, kGroups>(p, w, steps, base, bar);
    if (p.cluster_splits) cluster_sync(), cluster_sync();  // the merge's two barriers, which count every thread
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Shape::kComputeRegisters));
  static_assert(staged_bytes<kHeadDim>(Shape::kBlockRows) <= L::kBarriers);
  float* staged = reinterpret_cast<float*>(aligned);
  float* staged_lse = staged + Shape::kBlockRows * staged_row_floats<kHeadDim>();
  compute_steps<T, kHeadDim, kStepKeys, kGroups>(p, w, steps, base, bar, staged, staged_lse, warpgroup - 1);
  compute_groups_sync<kGroups>();
  const int thread = int(threadIdx.x) - 128, threads = 128 * kGroups;
  if (p.cluster_splits) {
    merge_cluster_rows<T, kHeadDim>(p, w.seq, w.kv_head, w.first_row, w.rows, staged, staged_lse, thread, threads);
  } else {
    write_rows<T, kHeadDim>(p, w.seq, w.kv_head, w.first_row, w.rows, w.split, staged, staged_lse, thread, threads);
  }
#else
  __trap();
#endif
}

}  // namespace wavetune::detail::paged

// The decode GEMM: D[M,N] = X[M,K] @ W[N,K]^T (+ bias) for a few tokens (M up to a 64-token tile per CTA
// row), where the time is the time to read W once. Hand-written rather than a CUTLASS collective:
//
// NOTES: why not CUTLASS. Its sm90 kernels stage both operands through TMA into shared memory and feed
// wgmma, whose smallest N is 8 and whose M is 64 per warpgroup: at M <= 16 tokens every weight byte goes
// HBM -> shared -> wgmma with 4-8x of the MMA wasted, and its split-K/stream-K reduce partial tiles through
// a global workspace (a second pass, and an initialized workspace per launch). Here each warp loads its
// weight rows straight into registers (16-byte loads that bypass L1), feeds them to mma.sync as the A
// operand (swap-AB: weight rows are the MMA's M, tokens its N of 8), and the K splits of one output tile
// run as one thread-block cluster that sums its partial tiles through distributed shared memory: one
// kernel, no workspace, and a fixed summation order (bit-identical results run to run).
//
// NOTES: the K permutation. mma.m16n8k16 wants thread (g = lane / 4, t = lane % 4) to hold A[g][2t..2t+1],
// A[g][2t+8..2t+9] (and row g + 8) and B[2t..2t+1][g], B[2t+8..2t+9][g]. Any permutation of K applied to
// both operands leaves the product unchanged, so thread t takes the 8 consecutive elements 8t..8t+7 of
// a 32-wide K chunk, one 16-byte load per row and per token, as logical K {2t, 2t+1, 2t+8, 2t+9} of one
// MMA and the same four of a second: no shuffles, no shared-memory staging of the weights.
//
// NOTES: programmatic dependent launch. W is not written by the kernel before this one in a model's
// stream, but a caller may compute B in the previous kernel, so nothing is read before
// griddepcontrol.wait; the first weight lines are only prefetched into L2, which the previous kernel's
// writes pass through, so the prefetch cannot see stale data. Dependents are released at the start: the
// next kernel's CTAs then launch as this grid's last CTAs run.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace wavetune::detail::decode {

constexpr int kChunk = 32;        // K elements per thread group per load: 4 threads x 8 elements
constexpr int kRowsPerWarp = 16;  // the MMA's M
constexpr int kMaxSplits = 8;     // the portable cluster size
constexpr int kPrefetchSteps = 4; // loop steps of weights each thread prefetches into L2 before the wait

struct Params {
  const void* x;  // [M, K] row-major, ldx
  const void* w;  // [N, K] row-major, ldw
  void* d;        // [M, N] row-major, ldd
  const void* bias;
  int64_t ldx, ldw, ldd;
  int m, n, k;
  int chunks_per_worker;  // K chunks each (split, warp-K) worker sums
};

__device__ __forceinline__ uint4 load_streaming(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ uint4 load_cached(const void* p) { return __ldg(static_cast<const uint4*>(p)); }

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// D += A B for one m16n8k16 tile; TYPE is the PTX name of the inputs (bf16, f16).
#define WAVETUNE_DECODE_MMA(TYPE)                                                                            \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE                                        \
               ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                                  \
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                              \
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))

template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    WAVETUNE_DECODE_MMA("bf16");
  } else {
    WAVETUNE_DECODE_MMA("f16");
  }
}
#undef WAVETUNE_DECODE_MMA

// One CTA: kWarpsN x kWarpsK warps; warp (wn, wk) owns kRowTiles tiles of 16 weight rows, rows
// [16 kRowTiles wn, 16 kRowTiles (wn + 1)) of the CTA's kTileRows, and the K chunks of worker
// (cluster rank, wk); the CTA's tokens are blockIdx.y's kTokens. blockIdx.z is the split, and the splits
// of one tile form one cluster (1, 1, splits).
// NOTES: a warp's token fragment is loaded once per K chunk and used by all its row tiles: with tokens
// T and R rows per CTA, the CTA reads T/R bytes of activations (from L1/L2) per weight byte, so wide
// token tiles take more rows per warp.
template <typename T, int kTokens, int kRowTiles, int kWarpsN, int kWarpsK, int kUnroll>
struct Kernel {
  static constexpr int kThreads = 32 * kWarpsN * kWarpsK;
  static constexpr int kFragments = kTokens / 8;  // n8 MMA tiles along the tokens
  static constexpr int kTileRows = kRowsPerWarp * kRowTiles * kWarpsN;
  static constexpr int kTileK = kChunk * kUnroll * kWarpsK;  // K per CTA per loop step (the mapping's tile K)
  // Per warp, its partial tile in the accumulator layout: kRowTiles x kFragments x 4 floats per lane.
  static constexpr int kPartialFloats = kRowTiles * kFragments * 4 * 32;
  static_assert(kTokens % 8 == 0 && kTokens <= 64, "token tiles of 8 to 64");

  struct SharedStorage {
    float partial[kWarpsN * kWarpsK][kPartialFloats];
  };
  using Accumulators = float[kRowTiles][kFragments][4];

  __device__ static void run(const Params& p) {
    __shared__ SharedStorage smem;
    namespace cg = cooperative_groups;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int warp_n = warp % kWarpsN, warp_k = warp / kWarpsN;
    const int g = lane / 4, t = lane % 4;
    const int splits = gridDim.z, split = blockIdx.z;
    // Row tile r of this warp: rows row0 + 16 r (lanes' g) and + 8.
    const int row0 = blockIdx.x * kTileRows + warp_n * kRowsPerWarp * kRowTiles + g;
    const int token0 = blockIdx.y * kTokens;

    // Rows past N read row N - 1 (valid memory, results dropped); chunks past K read nothing.
    const auto* w = static_cast<const T*>(p.w);
    const T* rows[kRowTiles][2];
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) {
      for (int h = 0; h < 2; ++h) rows[r][h] = w + int64_t(min(row0 + 16 * r + 8 * h, p.n - 1)) * p.ldw + 8 * t;
    }
    const int worker = split * kWarpsK + warp_k;
    const int total_chunks = (p.k + kChunk - 1) / kChunk;
    const int first = min(worker * p.chunks_per_worker, total_chunks);
    const int last = min(first + p.chunks_per_worker, total_chunks);
    const auto chunk_valid = [&](int c) { return c < last && c * kChunk + 8 * t < p.k; };

    for (int s = 0; s < kPrefetchSteps * kUnroll; ++s) {
      const int c = first + s;
#pragma unroll
      for (int r = 0; r < kRowTiles; ++r) {
        if (chunk_valid(c)) prefetch_l2(rows[r][0] + c * kChunk), prefetch_l2(rows[r][1] + c * kChunk);
      }
    }
    asm volatile("griddepcontrol.launch_dependents;");
    asm volatile("griddepcontrol.wait;" ::: "memory");

    Accumulators acc = {};
    const auto* x = static_cast<const T*>(p.x);
    uint4 next[kUnroll][kRowTiles][2];
    const auto load_weights = [&](int c0) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const bool valid = chunk_valid(c0 + u);
#pragma unroll
        for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            next[u][r][h] = valid ? load_streaming(rows[r][h] + (c0 + u) * kChunk) : make_uint4(0, 0, 0, 0);
          }
        }
      }
    };
    load_weights(first);
    for (int c0 = first; c0 < last; c0 += kUnroll) {
      uint4 a[kUnroll][kRowTiles][2];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int r = 0; r < kRowTiles; ++r) a[u][r][0] = next[u][r][0], a[u][r][1] = next[u][r][1];
      }
      if (c0 + kUnroll < last) load_weights(c0 + kUnroll);  // the next step's weights, in flight meanwhile
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + u;
        const bool valid = chunk_valid(c);
#pragma unroll
        for (int f = 0; f < kFragments; ++f) {
          const int token = token0 + f * 8 + g;
          const uint4 b = valid && token < p.m ? load_cached(x + int64_t(token) * p.ldx + c * kChunk + 8 * t)
                                               : make_uint4(0, 0, 0, 0);
#pragma unroll
          for (int r = 0; r < kRowTiles; ++r) {
            const uint4 lo = a[u][r][0], hi = a[u][r][1];
            mma<T>(acc[r][f], lo.x, hi.x, lo.y, hi.y, b.x, b.y);
            mma<T>(acc[r][f], lo.z, hi.z, lo.w, hi.w, b.z, b.w);
          }
        }
      }
    }

    // Partial tiles: every warp's to its CTA's shared memory, then the cluster's rank 0 sums all of them
    // in a fixed order (splits, then warp K) and writes the tile.
    float* mine = smem.partial[warp];
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
      for (int f = 0; f < kFragments; ++f) {
#pragma unroll
        for (int i = 0; i < 4; ++i) mine[((r * kFragments + f) * 4 + i) * 32 + lane] = acc[r][f][i];
      }
    }
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    if (cluster.block_rank() == 0 && warp_k == 0) {
      Accumulators sum = {};
      for (int rank = 0; rank < splits; ++rank) {
        const SharedStorage* peer = cluster.map_shared_rank(&smem, rank);
        for (int wk = 0; wk < kWarpsK; ++wk) {
          const float* part = peer->partial[wk * kWarpsN + warp_n];
#pragma unroll
          for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
            for (int f = 0; f < kFragments; ++f) {
#pragma unroll
              for (int i = 0; i < 4; ++i) sum[r][f][i] += part[((r * kFragments + f) * 4 + i) * 32 + lane];
            }
          }
        }
      }
      store(p, sum, row0, token0, t);
    }
    cluster.sync();  // peers' shared memory stays alive until rank 0 has read it
  }

  // Accumulator (r, f, i) of lane (g, t) is D^T[row0 + 16 r + 8 (i / 2)][token0 + 8 f + 2 t + i % 2].
  __device__ static void store(const Params& p, const Accumulators& acc, int row0, int token0, int t) {
    auto* d = static_cast<T*>(p.d);
    const auto* bias = static_cast<const T*>(p.bias);
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = row0 + 16 * r + 8 * (i / 2);
        if (row >= p.n) continue;
        const float b = bias ? static_cast<float>(bias[row]) : 0.0f;
#pragma unroll
        for (int f = 0; f < kFragments; ++f) {
          const int token = token0 + 8 * f + 2 * t + i % 2;
          if (token < p.m) d[int64_t(token) * p.ldd + row] = static_cast<T>(acc[r][f][i] + b);  // round to nearest
        }
      }
    }
  }
};

template <class K>
__global__ void __launch_bounds__(K::kThreads) decode_gemm_kernel(const Params p) {
  K::run(p);
}

}  // namespace wavetune::detail::decode

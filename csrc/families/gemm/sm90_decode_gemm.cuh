// The decode GEMM: D[M,N] = X[M,K] @ W[N,K]^T (+ bias) for a few tokens (M up to a 64-token tile per CTA
// row), where the time is the time to read W once; in bf16 or fp16, or in e4m3 with fp32 scales per tensor,
// per row (D = sx[m] sw[n] X W^T + bias) or per 128-block (1x128 groups of X, 128x128 blocks of W): the
// scaled GEMM family. Hand-written rather than a CUTLASS collective:
//
// NOTES: why not CUTLASS. Its sm90 kernels stage both operands through TMA into shared memory for wgmma,
// whose tiles hold 64 weight rows per warpgroup (fewer, larger CTAs than a narrow layer wants), and its
// split-K/stream-K sum partial tiles through a global workspace (a second pass over them, and a workspace
// initialized per launch). Here each warp loads 16-row tiles of weights straight into registers (16-byte
// loads that bypass L1) and feeds them to mma.sync as the A operand (swap-AB: weight rows are the MMA's
// M, tokens its N of 8), and the K splits of one output tile run as one thread-block cluster that sums
// its partial tiles through distributed shared memory: one kernel, no workspace, and a fixed summation
// order (bit-identical results run to run).
//
// NOTES: the K permutation. mma.m16n8k16 wants thread (g = lane / 4, t = lane % 4) to hold A[g][2t..2t+1],
// A[g][2t+8..2t+9] (and row g + 8) and B[2t..2t+1][g], B[2t+8..2t+9][g]. Any permutation of K applied to
// both operands leaves the product unchanged, so thread t takes the 8 consecutive elements 8t..8t+7 of
// a 32-wide K chunk, one 16-byte load per row and per token, as logical K {2t, 2t+1, 2t+8, 2t+9} of one
// MMA and the same four of a second: no shuffles, no shared-memory staging of the weights. e4m3's
// m16n8k32 has the same register pattern with 4 elements per register (A[g][4t..4t+3], A[g][4t+16..4t+19];
// B likewise), so its thread takes 16 consecutive elements of a 64-wide chunk the same way.
//
// NOTES: the epilogues (wavetune::Epilogue). residual adds R to the fp32 sum before the one rounding; each element
// of R is read and D written by the same thread, so D may be R. silu_and_mul needs a gate and an up product of the
// same output column in one thread: the MMA's 16-row tile gives lane (g, t) rows g and g + 8 of the same tokens,
// so the kernel reads the merged weight [gate; up] as if its rows were interleaved in blocks of 8 (weight_row):
// tile rows 16b..16b+7 are gate rows 8b..8b+7 and tile rows 16b+8..16b+15 the up rows of the same columns. The
// interleaving is in the row pointers alone (set once per tile), so the weight stays the plain concatenation
// that the unfused GEMM and silu_and_mul read, and every variant and schedule runs it unchanged.
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
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <mutex>
#include <type_traits>

#include "device.h"  // kMaxDevices
#include "programmatic_launch.cuh"
#include "pytorch_rounding.cuh"
#include "wavetune/types.h"  // Epilogue

namespace wavetune::detail::decode {

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
  // Scales of the products (the scaled GEMM; null: none). Per tensor or row: token m's is
  // scale_x[m * scale_x_step], row n's scale_w[n * scale_w_step] (a step of 0: one for the operand). Per
  // 128-block (kBlockScaled kernels): scale_x[m * scale_x_step + k / 128], scale_w[n / 128 * scale_w_step +
  // k / 128].
  const float* scale_x = nullptr;
  const float* scale_w = nullptr;
  int scale_x_step = 0, scale_w_step = 0;
  // What the store does (types.h; 16-bit inputs: the scaled GEMM family runs none). With silu_and_mul, n counts
  // the weight's rows (gate and up) and D has n / 2 columns.
  Epilogue epilogue = Epilogue::none;
  const void* residual = nullptr;  // [M, N] row-major, ldr; Out
  int64_t ldr = 0;
};

constexpr int kScaleBlock = 128;  // the K (and W row) extent of a block scale

// What the kernel needs of an input type: its elements per 16-byte load and its MMA.
template <typename T>
struct Operand {
  static constexpr int kElementsPerLoad = 16 / int(sizeof(T));
  static constexpr int kChunk = 4 * kElementsPerLoad;  // K per MMA pair: 4 threads x one load each
};

__device__ __forceinline__ uint4 load_streaming(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// NOTES: what the previous kernel may have written (the activations, their scales) is read with ordinary
// coherent loads (cached in L1 and L2), not the read-only path. Under programmatic dependent launch this grid
// starts while that kernel still runs, so those bytes change during its lifetime, and the read-only path
// (ld.global.nc, __ldg) is only defined for bytes that do not; griddepcontrol.wait orders ordinary loads after
// the previous grid's writes.
__device__ __forceinline__ uint4 load_written(const void* p) { return __ldca(static_cast<const uint4*>(p)); }

__device__ __forceinline__ float load_written(const float* p) { return __ldca(p); }

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// D += A B for one m16n8k16 (16-bit inputs) or m16n8k32 (e4m3) tile; SHAPE and TYPE are PTX names.
#define WAVETUNE_DECODE_MMA(SHAPE, TYPE)                                                                     \
  asm volatile("mma.sync.aligned." SHAPE ".row.col.f32." TYPE "." TYPE                                       \
               ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                                  \
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                              \
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))

template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    WAVETUNE_DECODE_MMA("m16n8k16", "bf16");
  } else if constexpr (std::is_same_v<T, __half>) {
    WAVETUNE_DECODE_MMA("m16n8k16", "f16");
  } else {
    static_assert(std::is_same_v<T, __nv_fp8_e4m3>, "bf16, fp16 or e4m3 inputs");
    WAVETUNE_DECODE_MMA("m16n8k32", "e4m3");
  }
}
#undef WAVETUNE_DECODE_MMA

// One CTA: kWarpsN x kWarpsK warps; warp (wn, wk) owns kRowTiles tiles of 16 weight rows, rows
// [16 kRowTiles wn, 16 kRowTiles (wn + 1)) of the CTA's kTileRows, and the K chunks of worker
// (cluster rank, wk); the CTA's tokens are a tile of kTokens. Two schedules:
//   split (run): blockIdx.x is the token tile, blockIdx.y the row tile, blockIdx.z the split; the splits
//     of one tile form one cluster (1, 1, splits) and sum their partial tiles on chip;
//   persistent (run_persistent, kWarpsK == 1, no splits): every CTA stays resident and walks the tiles
//     gridDim.x apart, each warp streaming its next tile's first weights while it finishes the last one,
//     so the loads never pause between tiles and no CTA starts or ends mid-layer.
// NOTES: a warp's token fragment is loaded once per K chunk and used by all its row tiles: with tokens
// T and R rows per CTA, the CTA reads T/R bytes of activations (from L1/L2) per weight byte, so wide
// token tiles take more rows per warp.
// NOTES: token tiles vary fastest (blockIdx.x, and the persistent walk's item order), so the CTAs that
// read the same weights run at the same time: the first brings them from HBM, the others find them in L2,
// and more tokens than one tile holds cost little more HBM traffic than one tile.
// T: the inputs' type; Out: the output's (and the bias's); kBlockScaled: scales per 128-block, applied to
// each 128-wide K block's product (else per tensor or row, applied once to the sum).
template <typename T, typename Out, int kTokens, int kRowTiles, int kWarpsN, int kWarpsK, int kUnroll,
          bool kBlockScaled = false>
struct Kernel {
  static constexpr int kChunk = Operand<T>::kChunk;
  static constexpr int kElementsPerLoad = Operand<T>::kElementsPerLoad;
  static constexpr int kChunksPerBlock = kScaleBlock / kChunk;
  static_assert(!kBlockScaled || (kScaleBlock % kChunk == 0 && kUnroll % kChunksPerBlock == 0),
                "a loop step covers whole scale blocks");
  static constexpr int kBlocksPerStep = kBlockScaled ? kUnroll / kChunksPerBlock : 1;
  static constexpr int kThreads = 32 * kWarpsN * kWarpsK;
  // The template's parameters, for the host-side launch.
  static constexpr int kTokensPerTile = kTokens, kWarpsAlongK = kWarpsK, kChunksPerStep = kUnroll;
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
  using Rows = const T* [kRowTiles][2];         // a lane's weight rows: tile r, rows + 0 and + 8
  // A loop step's operands: its weight fragments and, block scaled, the scales of its K blocks (this lane's
  // tokens', each row tile's; 0 past K), loaded with the weights so that their latency hides behind the step
  // before.
  struct Step {
    uint4 w[kUnroll][kRowTiles][2];
    float token_scale[kBlocksPerStep][kFragments][2];
    float row_scale[kBlocksPerStep][kRowTiles];
  };

  // This thread's place: its warp's row tiles and K worker, its MMA row g and K quarter t.
  struct Lane {
    int lane, warp, warp_n, warp_k, g, t;
    __device__ Lane()
        : lane(threadIdx.x % 32), warp(threadIdx.x / 32), warp_n(warp % kWarpsN), warp_k(warp / kWarpsN),
          g(lane / 4), t(lane % 4) {}
    // The first of its weight rows in the CTA tile of row tile `tile` (then + 16 r and + 8).
    __device__ int row0(int tile) const { return tile * kTileRows + warp_n * kRowsPerWarp * kRowTiles + g; }
  };

  // K chunks [first, last) of one worker; a chunk past K reads nothing.
  struct Chunks {
    int first, last;
    __device__ bool valid(const Params& p, int c, int t) const {
      return c < last && c * kChunk + kElementsPerLoad * t < p.k;
    }
  };

  // The weight row that tile row `row` reads: itself, or with silu_and_mul the gate row of output column
  // 8 (row / 16) + row % 8 in rows 16b..16b+7 of each 16-row tile b and that column's up row in rows 16b+8..16b+15.
  // Rows past the weight's read its last row of the same half (valid memory, results dropped).
  __device__ static int weight_row(const Params& p, int row) {
    if (p.epilogue != Epilogue::silu_and_mul) return min(row, p.n - 1);
    const int half = p.n / 2, column = min(row / 16 * 8 + row % 8, half - 1);
    return row % 16 < 8 ? column : half + column;
  }

  __device__ static void point_at(const Params& p, int row0, int t, Rows& rows) {
    const auto* w = static_cast<const T*>(p.w);
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) {
      for (int h = 0; h < 2; ++h) {
        rows[r][h] = w + int64_t(weight_row(p, row0 + 16 * r + 8 * h)) * p.ldw + kElementsPerLoad * t;
      }
    }
  }

  // The first kPrefetchSteps loop steps of weights into L2: before griddepcontrol.wait, nothing else is read.
  __device__ static void prefetch(const Params& p, const Rows& rows, const Chunks& chunks, int t) {
    for (int s = 0; s < kPrefetchSteps * kUnroll; ++s) {
      const int c = chunks.first + s;
#pragma unroll
      for (int r = 0; r < kRowTiles; ++r) {
        if (chunks.valid(p, c, t)) prefetch_l2(rows[r][0] + c * kChunk), prefetch_l2(rows[r][1] + c * kChunk);
      }
    }
  }

  __device__ static void load(const Params& p, const Rows& rows, const Chunks& chunks, int c0, int row0, int token0,
                              const Lane& l, Step& step) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const bool valid = chunks.valid(p, c0 + u, l.t);
#pragma unroll
      for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          step.w[u][r][h] = valid ? load_streaming(rows[r][h] + (c0 + u) * kChunk) : make_uint4(0, 0, 0, 0);
        }
      }
    }
    if constexpr (kBlockScaled) load_block_scales(p, chunks, c0, row0, token0, l, step);
  }

  // The scales of the step's K blocks: each token's activation group, each row tile's weight block (a tile's
  // 16 rows share one).
  __device__ static void load_block_scales(const Params& p, const Chunks& chunks, int c0, int row0, int token0,
                                           const Lane& l, Step& step) {
#pragma unroll
    for (int b = 0; b < kBlocksPerStep; ++b) {
      const int c = c0 + b * kChunksPerBlock, block = c * kChunk / kScaleBlock;
      const bool valid = c < chunks.last && c * kChunk < p.k;
#pragma unroll
      for (int f = 0; f < kFragments; ++f) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int token = token0 + 8 * f + 2 * l.t + j;
          step.token_scale[b][f][j] =
              valid && token < p.m ? load_written(p.scale_x + int64_t(token) * p.scale_x_step + block) : 0.0f;
        }
      }
#pragma unroll
      for (int r = 0; r < kRowTiles; ++r) {
        const int tile_row = min(row0 - l.g + 16 * r, p.n - 1);
        step.row_scale[b][r] =
            valid ? __ldg(p.scale_w + int64_t(tile_row / kScaleBlock) * p.scale_w_step + block) : 0.0f;
      }
    }
  }

  // acc += the loop step at chunk c0: each token fragment loaded once, multiplied by every row tile. Block
  // scaled: each K block's product (two chunks) goes to `part` first, then into acc times its scales.
  __device__ static void multiply(const Params& p, const Step& step, const Chunks& chunks, int c0, int token0,
                                  const Lane& l, Accumulators& acc) {
    const auto* x = static_cast<const T*>(p.x);
    Accumulators part;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u;
      const bool valid = chunks.valid(p, c, l.t);
      if constexpr (kBlockScaled) {
        if (u % kChunksPerBlock == 0) zero(part);
      }
      Accumulators& into = kBlockScaled ? part : acc;
#pragma unroll
      for (int f = 0; f < kFragments; ++f) {
        const int token = token0 + f * 8 + l.g;
        const uint4 b = valid && token < p.m
                            ? load_written(x + int64_t(token) * p.ldx + c * kChunk + kElementsPerLoad * l.t)
                            : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int r = 0; r < kRowTiles; ++r) {
          const uint4 lo = step.w[u][r][0], hi = step.w[u][r][1];
          mma<T>(into[r][f], lo.x, hi.x, lo.y, hi.y, b.x, b.y);
          mma<T>(into[r][f], lo.z, hi.z, lo.w, hi.w, b.z, b.w);
        }
      }
      if constexpr (kBlockScaled) {
        if (u % kChunksPerBlock == kChunksPerBlock - 1) add_block_scaled(part, step, u / kChunksPerBlock, acc);
      }
    }
  }

  // acc += part x the scales of the step's K block b.
  __device__ static void add_block_scaled(const Accumulators& part, const Step& step, int b, Accumulators& acc) {
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
      for (int f = 0; f < kFragments; ++f) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          acc[r][f][i] += part[r][f][i] * step.row_scale[b][r] * step.token_scale[b][f][i % 2];
        }
      }
    }
  }

  __device__ static void zero(Accumulators& acc) {
    for (auto& per_row : acc) {
      for (auto& per_token : per_row) per_token[0] = per_token[1] = per_token[2] = per_token[3] = 0;
    }
  }

  __device__ static void run(const Params& p) {
    __shared__ SharedStorage smem;
    const Lane l;
    const int row0 = l.row0(blockIdx.y), token0 = blockIdx.x * kTokens;
    Rows rows;
    point_at(p, row0, l.t, rows);
    const int worker = blockIdx.z * kWarpsK + l.warp_k;
    const int total_chunks = (p.k + kChunk - 1) / kChunk;
    const int first = min(worker * p.chunks_per_worker, total_chunks);
    const Chunks chunks{first, min(first + p.chunks_per_worker, total_chunks)};
    prefetch(p, rows, chunks, l.t);
    release_dependents_and_wait();

    Accumulators acc = {};
    Step next;
    load(p, rows, chunks, chunks.first, row0, token0, l, next);
    for (int c0 = chunks.first; c0 < chunks.last; c0 += kUnroll) {
      const Step step = next;
      if (c0 + kUnroll < chunks.last) load(p, rows, chunks, c0 + kUnroll, row0, token0, l, next);  // in flight
      multiply(p, step, chunks, c0, token0, l, acc);
    }
    reduce_and_store(p, smem, l, acc, row0, token0);
  }

  // Partial tiles: every warp's to its CTA's shared memory, then the cluster's rank 0 sums all of them in a
  // fixed order (splits, then warp K) and writes the tile.
  __device__ static void reduce_and_store(const Params& p, SharedStorage& smem, const Lane& l,
                                         const Accumulators& acc, int row0, int token0) {
    namespace cg = cooperative_groups;
    float* mine = smem.partial[l.warp];
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
      for (int f = 0; f < kFragments; ++f) {
#pragma unroll
        for (int i = 0; i < 4; ++i) mine[((r * kFragments + f) * 4 + i) * 32 + l.lane] = acc[r][f][i];
      }
    }
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    if (cluster.block_rank() == 0 && l.warp_k == 0) {
      Accumulators sum = {};
      for (int rank = 0; rank < int(gridDim.z); ++rank) {
        const SharedStorage* peer = cluster.map_shared_rank(&smem, rank);
        for (int wk = 0; wk < kWarpsK; ++wk) {
          const float* part = peer->partial[wk * kWarpsN + l.warp_n];
#pragma unroll
          for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
            for (int f = 0; f < kFragments; ++f) {
#pragma unroll
              for (int i = 0; i < 4; ++i) sum[r][f][i] += part[((r * kFragments + f) * 4 + i) * 32 + l.lane];
            }
          }
        }
      }
      store(p, sum, row0, token0, l.t);
    }
    cluster.sync();  // peers' shared memory stays alive until rank 0 has read it
  }

  // Tile `item` of the persistent walk: token tiles first, then row tiles.
  __device__ static void place(const Params& p, int item, const Lane& l, Rows& rows, int* row0, int* token0) {
    const int token_tiles = (p.m + kTokens - 1) / kTokens;
    *row0 = l.row0(item / token_tiles), *token0 = item % token_tiles * kTokens;
    point_at(p, *row0, l.t, rows);
  }

  __device__ static void run_persistent(const Params& p) {
    static_assert(kWarpsK == 1, "a persistent warp sums whole rows: no K split");
    const Lane l;
    const int total_chunks = (p.k + kChunk - 1) / kChunk;
    const int items = (p.n + kTileRows - 1) / kTileRows * ((p.m + kTokens - 1) / kTokens);
    const Chunks chunks{0, total_chunks};
    int item = blockIdx.x, row0, token0;
    Rows rows;
    if (item < items) place(p, item, l, rows, &row0, &token0), prefetch(p, rows, chunks, l.t);
    release_dependents_and_wait();
    if (item >= items) return;

    Accumulators acc = {};
    Step next;
    load(p, rows, chunks, 0, row0, token0, l, next);
    for (int c0 = 0;;) {
      const Step step = next;
      // The next step: this tile's next chunks, or the next tile's first ones.
      int next_item = item, next_c0 = c0 + kUnroll, next_row0 = row0, next_token0 = token0;
      Rows next_rows;
      if (next_c0 >= total_chunks) next_item += gridDim.x, next_c0 = 0;
      if (next_item < items) {
        if (next_item != item) {
          place(p, next_item, l, next_rows, &next_row0, &next_token0);
          load(p, next_rows, chunks, 0, next_row0, next_token0, l, next);
        } else {
          load(p, rows, chunks, next_c0, row0, token0, l, next);
        }
      }
      multiply(p, step, chunks, c0, token0, l, acc);
      if (next_item != item) {
        store(p, acc, row0, token0, l.t);
        if (next_item >= items) return;
        zero(acc);
        item = next_item, row0 = next_row0, token0 = next_token0;
        for (int r = 0; r < kRowTiles; ++r) rows[r][0] = next_rows[r][0], rows[r][1] = next_rows[r][1];
      }
      c0 = next_c0;
    }
  }

  // Accumulator (r, f, i) of lane (g, t) is D^T[row0 + 16 r + 8 (i / 2)][token0 + 8 f + 2 t + i % 2].
  __device__ static void store(const Params& p, const Accumulators& acc, int row0, int token0, int t) {
    if (p.epilogue == Epilogue::silu_and_mul) return store_silu_and_mul(p, acc, row0, token0, t);
    auto* d = static_cast<Out*>(p.d);
    const auto* bias = static_cast<const Out*>(p.bias);
    const auto* residual = p.epilogue == Epilogue::residual ? static_cast<const Out*>(p.residual) : nullptr;
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = row0 + 16 * r + 8 * (i / 2);
        if (row >= p.n) continue;
        const float b = bias ? static_cast<float>(bias[row]) : 0.0f;
        const bool scaled = !kBlockScaled && p.scale_w;  // block scales are in acc already
        const float row_scale = scaled ? p.scale_w[int64_t(row) * p.scale_w_step] : 1.0f;
#pragma unroll
        for (int f = 0; f < kFragments; ++f) {
          const int token = token0 + 8 * f + 2 * t + i % 2;
          if (token >= p.m) continue;
          const float scale = scaled ? row_scale * p.scale_x[int64_t(token) * p.scale_x_step] : row_scale;
          float value = acc[r][f][i] * scale + b;
          // R may be the previous kernel's output: a coherent load (load_written says why).
          if (residual) value += static_cast<float>(__ldca(residual + int64_t(token) * p.ldr + row));
          d[int64_t(token) * p.ldd + row] = static_cast<Out>(value);  // round to nearest
        }
      }
    }
  }

  // silu_and_mul: accumulators i and i + 2 of a lane are the gate and up products of one output column and token
  // (weight_row), each rounded to Out as the GEMM alone would store it, then combined as the layer op combines them.
  __device__ static void store_silu_and_mul(const Params& p, const Accumulators& acc, int row0, int token0, int t) {
    auto* d = static_cast<Out*>(p.d);
    const auto* bias = static_cast<const Out*>(p.bias);
    const int half = p.n / 2;
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) {
      const int row = row0 + 16 * r, column = row / 16 * 8 + row % 8;
      if (column >= half) continue;
      const float gate_bias = bias ? static_cast<float>(bias[column]) : 0.0f;
      const float up_bias = bias ? static_cast<float>(bias[half + column]) : 0.0f;
#pragma unroll
      for (int f = 0; f < kFragments; ++f) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int token = token0 + 8 * f + 2 * t + j;
          if (token >= p.m) continue;
          d[int64_t(token) * p.ldd + column] =
              silu_mul_rounded<Out>(rounded<Out>(acc[r][f][j] + gate_bias), rounded<Out>(acc[r][f][j + 2] + up_bias));
        }
      }
    }
  }
};

template <class K>
__global__ void __launch_bounds__(K::kThreads) decode_gemm_kernel(const Params p) {
  K::run(p);
}

template <class K>
__global__ void __launch_bounds__(K::kThreads) persistent_decode_gemm_kernel(const Params p) {
  K::run_persistent(p);
}

// --- Host side: what every family's decode variants share -------------------------------------------

// The splits the heuristic launch aims for: enough CTAs to keep each SM streaming (several per SM
// resident), no more K splits than leave each worker a few loop steps.
constexpr int64_t kTargetCtasPerSm = 4;
constexpr int64_t kMinStepsPerSplit = 2;

template <class K>
int32_t heuristic_splits(int64_t m, int64_t n, int64_t k, int32_t sm_count) {
  const int64_t tiles = (n + K::kTileRows - 1) / K::kTileRows * ((m + K::kTokensPerTile - 1) / K::kTokensPerTile);
  const int64_t steps = (k + K::kTileK - 1) / K::kTileK;
  int32_t s = 1;
  while (s < kMaxSplits && tiles * s * 2 <= kTargetCtasPerSm * sm_count && steps >= kMinStepsPerSplit * s * 2) {
    s *= 2;
  }
  return s;
}

// CTAs of the kernel (kThreads each) resident per SM on `device`, read once per device.
template <class K, bool kPersistent>
int resident_ctas_per_sm(int device) {
  static std::array<std::once_flag, kMaxDevices> done;
  static std::array<int, kMaxDevices> ctas{};
  std::call_once(done.at(device), [&] {
    const void* kernel;
    if constexpr (kPersistent) {
      kernel = reinterpret_cast<const void*>(persistent_decode_gemm_kernel<K>);
    } else {
      kernel = reinterpret_cast<const void*>(decode_gemm_kernel<K>);
    }
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas[device], kernel, K::kThreads, 0) != cudaSuccess) {
      cudaGetLastError();
      ctas[device] = 1;
    }
  });
  return std::max(ctas[device], 1);
}

// The loop steps each K worker (split x warp along K) walks: whole steps, so that only the last worker has a
// partial one.
template <class K>
int loop_steps(int k, int32_t splits) {
  const int total_chunks = (k + K::kChunk - 1) / K::kChunk, workers = splits * K::kWarpsAlongK;
  return ((total_chunks + workers - 1) / workers + K::kChunksPerStep - 1) / K::kChunksPerStep;
}

// One launch of `params` (chunks_per_worker is filled in here) with `splits` K splits (1 when persistent);
// programmatic dependent launch when `pdl`.
template <class K, bool kPersistent>
cudaError_t launch(Params params, int32_t splits, int device, int32_t sm_count, bool pdl, cudaStream_t stream) {
  params.chunks_per_worker = loop_steps<K>(params.k, splits) * K::kChunksPerStep;
  const int64_t row_tiles = (params.n + K::kTileRows - 1) / K::kTileRows;
  const int64_t token_tiles = (params.m + K::kTokensPerTile - 1) / K::kTokensPerTile;

  cudaLaunchConfig_t config{};
  config.blockDim = dim3(K::kThreads);
  config.stream = stream;
  cudaLaunchAttribute attributes[2];
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = 1;
  attributes[1].id = cudaLaunchAttributeClusterDimension;
  attributes[1].val.clusterDim.x = 1;
  attributes[1].val.clusterDim.y = 1;
  attributes[1].val.clusterDim.z = unsigned(splits);
  config.attrs = pdl ? attributes : attributes + 1;
  config.numAttrs = (pdl ? 1 : 0) + (kPersistent ? 0 : 1);
  if constexpr (kPersistent) {
    void (*const kernel)(Params) = persistent_decode_gemm_kernel<K>;
    const int64_t resident = int64_t(resident_ctas_per_sm<K, true>(device)) * sm_count;
    config.gridDim = dim3(unsigned(std::min(row_tiles * token_tiles, resident)));
    return cudaLaunchKernelEx(&config, kernel, params);
  } else {
    config.gridDim = dim3(unsigned(token_tiles), unsigned(row_tiles), unsigned(splits));
    return cudaLaunchKernelEx(&config, decode_gemm_kernel<K>, params);
  }
}

}  // namespace wavetune::detail::decode

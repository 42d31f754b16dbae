// The paged attention kernels (attention.h, paged_attention): decode, and queries of several tokens per sequence
// (prefill, chunked prefill after a cached prefix, variable lengths), and the merge of their KV splits.
//
// NOTES: why hand-written. A decode step reads each cached key and value once and does `group` (query
// heads per KV head, 1-16) multiply-adds per element read, so it is bound by HBM, not by tensor cores, and
// its keys sit in pages a block table names, which TMA descriptors (one box over one tensor) cannot follow
// without one descriptor per page. So keys are streamed with cp.async (16-byte rows of a page, found
// through the table), several tiles ahead, and the math is FlashAttention-2's register dataflow on
// mma.sync: S = Q K^T with 16 query rows (ldmatrix from swizzled shared memory), an online softmax per row,
// and O += P V with P taken straight from S's accumulators (their layout is the A operand's) and V through
// ldmatrix.trans. A tile's rows are (query token, query head) pairs of one KV head, heads fastest: the
// query heads of a KV head share every key they read (grouped-query attention), and a sequence's tokens
// follow. Two ways to spread a CTA's work over its warps:
// - keys_split (decode, short queries): the CTA takes 16 rows; its warps take alternate 16-key tiles, each
//   with its own pipeline, and merge their softmax states at the end, so nothing waits on a CTA-wide
//   barrier in the loop;
// - rows_split (prefill): the CTA takes 16 rows per warp; all warps read the same keys from one shared
//   pipeline, so each key brought on chip serves 16 x warps rows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "paged_shape.h"
#include "programmatic_launch.cuh"

namespace wavetune::detail::paged {

// How a CTA's warps share its work (the header's NOTES; specialized: sm90_paged_attention_ws.cuh).
enum class WarpSplit { keys, rows, specialized };

struct Params {
  const void* q;
  int64_t q_t, q_h;  // q's token and head strides
  const void* k;
  const void* v;
  int64_t page_stride, row_stride, head_stride;
  int32_t page_size;
  const int32_t* block_table;
  int64_t table_stride;
  const int32_t* key_starts;  // ragged keys (no table): sequence b's key j is row key_starts[b] + j
  const int32_t* seq_lens;
  int32_t max_seq_len;
  const int32_t* q_starts;  // null: one query per sequence, token b of q; else sequence b's are its rows
  int32_t batch, max_q_len;
  bool causal;
  int32_t heads_kv, group, row_blocks;
  int32_t splits, split_keys;  // split s takes keys [s * split_keys, (s + 1) * split_keys)
  float scale_log2;            // scale * log2(e): the softmax runs in base 2
  void* out;
  int64_t o_t, o_h;
  float* partial;  // splits > 1: [tokens, heads_q, splits, head_dim] outputs of each split, normalized
  float* lse;      // splits > 1: [tokens, heads_q, splits] their base-2 log-sum-exps (-inf: no keys)
  const int32_t* order;  // null, or the sequences longest first: CTAs of grid z run sequence order[z]
  // The splits of a row block are one cluster (grid x = row block x split, splits fastest) and merge through
  // distributed shared memory (merge_cluster_rows); partial and lse are unused.
  bool cluster_splits;
};

// Stages of each warp's cp.async pipeline (keys_split: two or three tiles of K and V in flight per warp),
// or of the CTA's (rows_split: one 16-key tile per warp a stage).
template <int kHeadDim, WarpSplit kSplit>
constexpr int stages() {
  if constexpr (kSplit == WarpSplit::keys) return kHeadDim == 64 ? 6 : 3;
  return kHeadDim == 64 ? 4 : kHeadDim == 128 ? 3 : 2;
}

// NOTES: a keys_split kernel of 8 warps (4 at head dim 256) fills 192 KB of shared memory: one CTA per SM
// with about 128 KB in flight, for launches of fewer CTAs than SMs (one sequence, few KV heads), where each
// CTA's own pipeline sets the bandwidth. One of 4 warps runs two CTAs per SM: finer waves and less fixed
// cost per CTA for launches of many short CTAs. A rows_split kernel of 4 warps (64 rows) runs two CTAs per
// SM at head dim 128; one of 8 warps (128 rows, 224 KB, 254 registers a thread) one: each key it brings on
// chip serves twice the rows, and each softmax step (a CTA-wide barrier) covers 128 keys instead of 64.
// At head dim 64 the 4-warp kernel runs three CTAs per SM, and 8 warps gained nothing there. The wave model
// picks among them (paged_launch.cu).
template <int kHeadDim, int kWarps, WarpSplit kSplit>
constexpr size_t shared_bytes() {
  const size_t rows = kSplit == WarpSplit::keys ? kRows : kRows * kWarps;
  return rows * kHeadDim * 2 + size_t(kWarps) * stages<kHeadDim, kSplit>() * 2 * kTileKeys * kHeadDim * 2;
}

// Shared-memory tiles are rows of kHeadDim / 8 16-byte chunks; chunk c of row r sits at c ^ (r % 8), so the
// 8 rows an ldmatrix reads at one column hit 8 different bank groups.
template <int kHeadDim>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * (kHeadDim / 8) + (chunk ^ (row & 7));
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// cp.async of 16 bytes, or 16 zeros without reading `src` where not `valid` (the ignore-src form: one
// predicate, where a source size would take a register and its arithmetic).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("{\n .reg .pred z;\n setp.eq.b32 z, %2, 0;\n cp.async.cg.shared.global [%0], [%1], 16, z;\n}\n"
               ::"r"(dst), "l"(src), "r"(int(valid)));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

template <class T>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

template <class T>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

template <class T>
__device__ __forceinline__ T to_element(float x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16(x);
  } else {
    return __float2half(x);
  }
}

// One warp's online-softmax state for its two rows (lane / 4 and lane / 4 + 8): the running maximum of
// the base-2 scores, this lane's share of the running sum, and the output accumulators (mma C layout:
// o[n][0..1] row lane / 4, o[n][2..3] row lane / 4 + 8, columns 8 n + 2 (lane % 4) + {0, 1}).
template <int kHeadDim>
struct SoftmaxState {
  float max[2] = {-INFINITY, -INFINITY};
  float sum[2] = {0.0f, 0.0f};
  float o[kHeadDim / 8][4] = {};
};

// A running merge of split outputs (kColumns columns of one row) by their base-2 log-sum-exps, taken in any
// order: the largest log-sum-exp so far, the total weight and the weighted sum of outputs relative to it.
// NOTES: rescaled as it goes, so a split's log-sum-exp and outputs are loaded together and every split's
// loads can be in flight at once. Finding the largest log-sum-exp first would wait for all of them before
// reading an output: one more dependent round trip to L2 at the end of every split launch, 0.3-0.7 us of
// decode launches under 20 us (docs/results.md#paged_merge_one_pass_h200.md).
template <int kColumns>
struct SplitMerge {
  float top = -INFINITY, total = 0.0f, acc[kColumns] = {};

  // Without a branch, so that the loads of the splits after this one need not wait for its log-sum-exp.
  __device__ __forceinline__ void add(float lse, float weight_sum, const float* values) {
    const float next = fmaxf(top, lse);
    const bool none = next == -INFINITY;  // no key seen yet, nor by this split: exp2 of -inf - -inf is NaN
    const float scale = none ? 1.0f : exp2f(top - next), weight = none ? 0.0f : exp2f(lse - next);
    total = total * scale + weight * weight_sum;
#pragma unroll
    for (int c = 0; c < kColumns; ++c) acc[c] = acc[c] * scale + weight * values[c];
    top = next;
  }
  __device__ __forceinline__ float value(int c) const { return total > 0.0f ? acc[c] / total : 0.0f; }
};

// One sequence as a CTA sees it.
struct Sequence {
  int first_token;  // the row of q and out of its first query
  int queries;      // its query tokens (at most max_q_len), its newest ones
  int keys;         // the keys it attends to (at most max_seq_len)
};

__device__ __forceinline__ Sequence sequence(const Params& p, int batch) {
  Sequence s;
  s.first_token = p.q_starts ? p.q_starts[batch] : batch;
  s.queries = p.q_starts ? min(max(p.q_starts[batch + 1] - s.first_token, 0), p.max_q_len) : 1;
  const int keys = p.seq_lens     ? p.seq_lens[batch]
                   : p.key_starts ? p.key_starts[batch + 1] - p.key_starts[batch]
                                  : p.max_seq_len;
  s.keys = min(max(keys, 0), p.max_seq_len);
  return s;
}

// The keys row `row` of a sequence's rows (token row / group, heads fastest) sees: [0, this). With the
// causal mask query t of n sees keys up to its own position, keys - n + t; rows past the queries see none.
__device__ __forceinline__ int row_keys(const Params& p, const Sequence& s, int row) {
  const int token = row / p.group;
  if (token >= s.queries) return 0;
  return p.causal ? min(s.keys, max(s.keys - s.queries + token + 1, 0)) : s.keys;
}

// Where key `key` of this KV head lives, in elements from the cache's base; -1 past `end`.
__device__ __forceinline__ int64_t key_offset(const Params& p, int batch, int kv_head, int key, int end) {
  if (key >= end) return -1;
  const int64_t head = int64_t(kv_head) * p.head_stride;
  if (p.block_table) {
    const int page = p.block_table[batch * p.table_stride + key / p.page_size];
    return int64_t(page) * p.page_stride + int64_t(key % p.page_size) * p.row_stride + head;
  }
  if (p.key_starts) return int64_t(p.key_starts[batch] + key) * p.row_stride + head;
  return int64_t(batch) * p.page_stride + int64_t(key) * p.row_stride + head;  // dense: sequence b is page b
}

// Row `row` of a sequence's rows for one KV head: its token (a row of q and out) and query head.
struct QueryRow {
  int64_t token, head;
};

__device__ __forceinline__ QueryRow query_row(const Params& p, const Sequence& seq, int kv_head, int row) {
  return {seq.first_token + row / p.group, int64_t(kv_head) * p.group + row % p.group};
}

// Where split `split` of a query row keeps its output (kHeadDim floats of partial) and log-sum-exp (one of lse).
__device__ __forceinline__ int64_t split_slot(const Params& p, const QueryRow& q, int split) {
  return (q.token * p.heads_kv * p.group + q.head) * p.splits + split;
}

// Loads rows [first_row, first_row + tile_rows) of a sequence's (token, head) rows into a swizzled tile
// (cp.async); rows past `rows` are zero-filled.
template <int kHeadDim>
__device__ __forceinline__ void load_queries(const Params& p, const Sequence& seq, int kv_head, int first_row,
                                             int rows, int tile_rows, uint32_t tile, int thread, int threads) {
  constexpr int kChunks = kHeadDim / 8;
  const auto* q = static_cast<const uint4*>(p.q);
  for (int i = thread; i < tile_rows * kChunks; i += threads) {
    const int r = i / kChunks, chunk = i % kChunks;
    const QueryRow row = query_row(p, seq, kv_head, first_row + r);
    const int64_t from = r < rows ? (row.token * p.q_t + row.head * p.q_h) / 8 + chunk : 0;
    cp_async_16(tile + 16u * swizzled<kHeadDim>(r, chunk), q + from, r < rows);
  }
}

// Writes one value of row `row` (and its log-sum-exp, from column 0): the output, or with splits the
// split's normalized output and log-sum-exp.
template <class T, int kHeadDim>
__device__ __forceinline__ void store_value(const Params& p, const Sequence& seq, int kv_head, int row, int split,
                                            int column, float value, float lse) {
  const QueryRow q = query_row(p, seq, kv_head, row);
  if (p.splits == 1) {
    static_cast<T*>(p.out)[q.token * p.o_t + q.head * p.o_h + column] = to_element<T>(value);
  } else {
    const int64_t at = split_slot(p, q, split);
    p.partial[at * kHeadDim + column] = value;
    if (column == 0) p.lse[at] = lse;
  }
}

// Issues the cp.async copies of one 16-key tile of K and V into a stage, given each lane's
// key_offset of row lane % 16 (the others read it by shuffle); keys past the end (offset -1) are
// zero-filled (V's zeros keep masked keys' 0 x V finite).
template <int kHeadDim>
__device__ __forceinline__ void load_tile(const Params& p, int64_t mine, uint32_t k_stage, uint32_t v_stage,
                                          int lane) {
  constexpr int kChunks = kHeadDim / 8;
  const auto* k = static_cast<const uint4*>(p.k);
  const auto* v = static_cast<const uint4*>(p.v);
#pragma unroll
  for (int i = 0; i < kTileKeys * kChunks / 32; ++i) {
    const int chunk_index = lane + 32 * i, row = chunk_index / kChunks, chunk = chunk_index % kChunks;
    const int64_t offset = __shfl_sync(0xffffffffu, mine, row);
    const int64_t at = offset < 0 ? 0 : offset / 8 + chunk;
    const uint32_t dst = 16u * swizzled<kHeadDim>(row, chunk);
    cp_async_16(k_stage + dst, k + at, offset >= 0);
    cp_async_16(v_stage + dst, v + at, offset >= 0);
  }
}

// A warp's 16 query rows as mma A fragments. NOTES: up to head dim 128 they are read from shared memory
// once and kept in registers (32 at 128), so a tile's Q K^T reads only K; at 256 the 64 registers they
// would take push the accumulators into spills, so each tile reads them again.
template <int kHeadDim>
struct QueryFragments {
  static constexpr bool kInRegisters = kHeadDim <= 128;
  uint32_t a[kInRegisters ? kHeadDim / 16 : 1][4];
  uint32_t tile;  // the rows in shared memory (swizzled)

  __device__ __forceinline__ QueryFragments(uint32_t rows, int lane) : tile(rows) {
    if constexpr (kInRegisters) {
#pragma unroll
      for (int ks = 0; ks < kHeadDim / 16; ++ks) load(a[ks], ks, lane);
    }
  }
  __device__ __forceinline__ void load(uint32_t (&out)[4], int ks, int lane) const {
    const int row = lane % 8 + 8 * ((lane / 8) % 2), chunk = lane / 16;
    ldmatrix_x4(out, tile + 16u * swizzled<kHeadDim>(row, 2 * ks + chunk));
  }
};

// 2^x on the special-function unit (flushes subnormal results to zero; exp2f adds a range fix-up).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// One online-softmax step of a warp's two rows (lane / 4 and lane / 4 + 8) over kKeys scores in mma C layout
// (s[n] holds keys first_key + 8 n + 2 (lane % 4) + {0, 1}), in place: keys at or past a row's row_end are
// masked, the state's maximum and sum move on, s becomes the step's probabilities, and `correction` is what
// the output accumulated so far must be scaled by. NOTES: keys below `unmasked` are seen by every row of the
// warp, so a step below it skips the mask; the maximum is taken of the raw scores (the scale is positive)
// and the scale folds into the exponent's one fused multiply-add.
template <int kHeadDim, int kKeys>
__device__ __forceinline__ void online_softmax(SoftmaxState<kHeadDim>& st, float (&s)[kKeys / 8][4],
                                               float (&correction)[2], int first_key, const int (&row_end)[2],
                                               int unmasked, float scale_log2, int lane) {
  if (first_key + kKeys > unmasked) {
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (first_key + 8 * n + 2 * (lane % 4) + e % 2 >= row_end[e / 2]) s[n][e] = -INFINITY;
      }
    }
  }
  float step_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) step_max[e / 2] = fmaxf(step_max[e / 2], s[n][e]);
  }
  float base[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    step_max[r] = fmaxf(step_max[r], __shfl_xor_sync(0xffffffffu, step_max[r], 1));
    step_max[r] = fmaxf(step_max[r], __shfl_xor_sync(0xffffffffu, step_max[r], 2));
    const float next = fmaxf(st.max[r], step_max[r] * scale_log2);
    base[r] = next == -INFINITY ? 0.0f : next;  // no key seen yet: keep exp2 of -inf at 0, not NaN
    correction[r] = fast_exp2(st.max[r] - base[r]);
    st.max[r] = next;
  }
  float step_sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[n][e] = fast_exp2(fmaf(s[n][e], scale_log2, -base[e / 2]));
      step_sum[e / 2] += s[n][e];
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) st.sum[r] = st.sum[r] * correction[r] + step_sum[r];
}

// The first key that some row of a 16-row tile does not see: every key below it is unmasked for the warp.
__device__ __forceinline__ int warp_unmasked_end(const int (&row_end)[2]) {
  int end = min(row_end[0], row_end[1]);
#pragma unroll
  for (int o = 4; o < 32; o *= 2) end = min(end, __shfl_xor_sync(0xffffffffu, end, o));  // lanes 4 apart: other rows
  return end;
}

// A step's probabilities (mma C layout) as the A operand of each 16-key group.
template <class T, int kKeys>
__device__ __forceinline__ void pack_probabilities(const float (&s)[kKeys / 8][4], uint32_t (&p)[kKeys / 16][4]) {
#pragma unroll
  for (int n = 0; n < kKeys / 8; ++n) {
    p[n / 2][2 * (n % 2)] = pack<T>(s[n][0], s[n][1]);
    p[n / 2][2 * (n % 2) + 1] = pack<T>(s[n][2], s[n][3]);
  }
}

// The output accumulated so far scaled by each row's softmax correction.
template <int kHeadDim>
__device__ __forceinline__ void rescale(SoftmaxState<kHeadDim>& st, const float (&correction)[2]) {
#pragma unroll
  for (int n = 0; n < kHeadDim / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) st.o[n][e] *= correction[e / 2];
  }
}

// kKeys keys (16-key tiles, one after another in shared memory): scores, online softmax, P V. Row lane / 4
// + 8 r sees the keys below row_end[r]. A wider step rescales the accumulators once per kKeys keys.
template <class T, int kHeadDim, int kKeys>
__device__ __forceinline__ void attend(SoftmaxState<kHeadDim>& st, const QueryFragments<kHeadDim>& q, uint32_t k_tiles,
                                       uint32_t v_tiles, int first_key, const int (&row_end)[2], int unmasked,
                                       float scale_log2, int lane) {
  constexpr int kGroups = kKeys / kTileKeys;
  constexpr uint32_t kTileBytes = kTileKeys * kHeadDim * 2;
  float s[2 * kGroups][4] = {};
  const int key_row = lane % 8 + 8 * (lane / 16), key_chunk = (lane / 8) % 2;  // B operand (K)
#pragma unroll
  for (int ks = 0; ks < kHeadDim / 16; ++ks) {
    uint32_t a[4];
    if constexpr (QueryFragments<kHeadDim>::kInRegisters) {
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = q.a[ks][i];
    } else {
      q.load(a, ks, lane);
    }
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      uint32_t b[4];
      ldmatrix_x4(b, k_tiles + g * kTileBytes + 16u * swizzled<kHeadDim>(key_row, 2 * ks + key_chunk));
      mma<T>(s[2 * g], a, b[0], b[1]);
      mma<T>(s[2 * g + 1], a, b[2], b[3]);
    }
  }
  uint32_t p[kGroups][4];  // P as the A operand of each 16-key group
  float correction[2];
  online_softmax<kHeadDim, kKeys>(st, s, correction, first_key, row_end, unmasked, scale_log2, lane);
  pack_probabilities<T, kKeys>(s, p);
  rescale(st, correction);
  const int value_row = lane % 8 + 8 * ((lane / 8) % 2), value_chunk = lane / 16;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
#pragma unroll
    for (int n = 0; n < kHeadDim / 8; n += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, v_tiles + g * kTileBytes + 16u * swizzled<kHeadDim>(value_row, n + value_chunk));
      mma<T>(st.o[n], p[g], b[0], b[1]);
      mma<T>(st.o[n + 1], p[g], b[2], b[3]);
    }
  }
}

// This lane's two rows of a 16-row tile starting at `first_row`: the keys each sees, cut to the split.
__device__ __forceinline__ void lane_row_ends(const Params& p, const Sequence& seq, int first_row, int split_end,
                                              int lane, int (&row_end)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) row_end[r] = min(row_keys(p, seq, first_row + lane / 4 + 8 * r), split_end);
}

// rows_split's outputs pass through shared memory (which the pipeline no longer uses): a row of kHeadDim
// floats and 4 of padding, so the 8 rows of one store instruction start in different banks.
template <int kHeadDim>
constexpr int staged_row_floats() {
  return kHeadDim + 4;
}

template <int kHeadDim>
constexpr size_t staged_bytes(int rows) {
  return size_t(rows) * (staged_row_floats<kHeadDim>() + 1) * sizeof(float);  // the rows, then one lse each
}

// rows_split: one warp's 16 rows, normalized, into rows [tile_row, tile_row + 16) of the staged tile.
template <int kHeadDim>
__device__ void stage_rows(SoftmaxState<kHeadDim>& st, float* staged, float* staged_lse, int tile_row, int lane) {
  constexpr int kStride = staged_row_floats<kHeadDim>();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    st.sum[r] += __shfl_xor_sync(0xffffffffu, st.sum[r], 1);
    st.sum[r] += __shfl_xor_sync(0xffffffffu, st.sum[r], 2);
    const int row = tile_row + lane / 4 + 8 * r;
    const float total = st.sum[r], inverse = total > 0.0f ? 1.0f / total : 0.0f;
#pragma unroll
    for (int n = 0; n < kHeadDim / 8; ++n) {
      *reinterpret_cast<float2*>(staged + row * kStride + 8 * n + 2 * (lane % 4)) =
          make_float2(st.o[n][2 * r] * inverse, st.o[n][2 * r + 1] * inverse);
    }
    if (lane % 4 == 0) staged_lse[row] = total > 0.0f ? st.max[r] + log2f(total) : -INFINITY;
  }
}

// Columns [8 chunk, 8 chunk + 8) of an output row: one 16-byte store where out's rows allow it (whole_chunks).
template <class T>
__device__ __forceinline__ void store_chunk(const Params& p, const QueryRow& q, int chunk, const float (&values)[8],
                                            bool whole_chunks) {
  T* out = static_cast<T*>(p.out) + q.token * p.o_t + q.head * p.o_h + 8 * chunk;
  if (whole_chunks) {
    *reinterpret_cast<uint4*>(out) = uint4{pack<T>(values[0], values[1]), pack<T>(values[2], values[3]),
                                           pack<T>(values[4], values[5]), pack<T>(values[6], values[7])};
  } else {  // an out view without 16-byte rows
#pragma unroll
    for (int c = 0; c < 8; ++c) out[c] = to_element<T>(values[c]);
  }
}

// out's rows take whole 16-byte chunks.
__device__ __forceinline__ bool whole_chunk_rows(const Params& p) {
  return reinterpret_cast<uintptr_t>(p.out) % 16 == 0 && p.o_t % 8 == 0 && p.o_h % 8 == 0;
}

// rows_split: the CTA's `rows` staged rows written out, 8 columns (16 or 32 bytes) a thread, so each row
// leaves in whole sectors. NOTES: stored straight from the mma layout instead, each 32-byte sector of out
// took four partial writes from rows 8 apart, and the rows_split kernels ran 1.08-2.2x slower
// (docs/attention.md).
template <class T, int kHeadDim>
__device__ void write_rows(const Params& p, const Sequence& seq, int kv_head, int first_row, int rows, int split,
                           const float* staged, const float* staged_lse, int thread, int threads) {
  constexpr int kStride = staged_row_floats<kHeadDim>(), kChunks = kHeadDim / 8;
  const bool whole_chunks = whole_chunk_rows(p);
  for (int i = thread; i < rows * kChunks; i += threads) {
    const int r = i / kChunks, chunk = i % kChunks;
    const QueryRow q = query_row(p, seq, kv_head, first_row + r);
    const float* from = staged + r * kStride + 8 * chunk;
    const float4 lo = *reinterpret_cast<const float4*>(from), hi = *reinterpret_cast<const float4*>(from + 4);
    if (p.splits > 1) {
      const int64_t at = split_slot(p, q, split);
      float4* partial = reinterpret_cast<float4*>(p.partial + at * kHeadDim + 8 * chunk);
      partial[0] = lo;
      partial[1] = hi;
      if (chunk == 0) p.lse[at] = staged_lse[r];
    } else {
      const float values[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      store_chunk<T>(p, q, chunk, values, whole_chunks);
    }
  }
}

// The CTAs of a cluster (a row block's splits) wait for each other: the release and the acquire make what each
// wrote to its shared memory before visible to the others after. Clusters exist from sm_90 on: below, the host
// never launches in clusters (launch_programmatic, ptx_jit_forced).
__device__ __forceinline__ void cluster_sync() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
#else
  __trap();
#endif
}

// NOTES: the splits of a row block that form one cluster merge there, with no second kernel: each CTA stages its
// rows, normalized, and their log-sum-exps in its own shared memory; past a cluster barrier, the CTA of rank r
// merges the chunks r, r + splits, ... (8 columns of a row each) from every CTA's staged rows (distributed
// shared memory) into out; a second barrier keeps each CTA's shared memory until the others have read it.
// A merge kernel instead waits for the whole launch to end and reads the splits back from L2: a launch and two
// dependent round trips, a large share of a small step (docs/attention.md, "Paged decode").
constexpr int kMaxClusterSplits = 8;  // the portable cluster size
template <class T, int kHeadDim>
__device__ void merge_cluster_rows(const Params& p, const Sequence& seq, int kv_head, int first_row, int rows,
                                   const float* staged, const float* staged_lse, int thread, int threads) {
#if __CUDA_ARCH__ >= 900
  constexpr int kStride = staged_row_floats<kHeadDim>(), kChunks = kHeadDim / 8;
  cluster_sync();
  const bool whole_chunks = whole_chunk_rows(p);
  const int rank = int(__clusterRelativeBlockRank());
  for (int i = rank * threads + thread; i < rows * kChunks; i += p.splits * threads) {
    const int r = i / kChunks, chunk = i % kChunks;
    float lse[kMaxClusterSplits];
    float4 lo[kMaxClusterSplits], hi[kMaxClusterSplits];
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s) {  // every split's loads in flight before the first is used
      if (s < p.splits) {
        const auto* from = static_cast<const float4*>(__cluster_map_shared_rank(staged + r * kStride + 8 * chunk, s));
        lse[s] = *static_cast<const float*>(__cluster_map_shared_rank(staged_lse + r, s));
        lo[s] = from[0], hi[s] = from[1];
      }
    }
    SplitMerge<8> m;
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s) {
      const float x[8] = {lo[s].x, lo[s].y, lo[s].z, lo[s].w, hi[s].x, hi[s].y, hi[s].z, hi[s].w};
      if (s < p.splits) m.add(lse[s], 1.0f, x);
    }
    float values[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) values[c] = m.value(c);
    store_chunk<T>(p, query_row(p, seq, kv_head, first_row + r), chunk, values, whole_chunks);
  }
  cluster_sync();
#else
  __trap();
#endif
}

// keys_split: the warps' states merged in shared memory (which the pipeline no longer uses), then stored
// per (row, column).
template <class T, int kHeadDim, int kWarps>
__device__ void merge_and_store(const Params& p, SoftmaxState<kHeadDim>& st, float* scratch, const Sequence& seq,
                                int kv_head, int first_row, int rows, int split, int warp, int lane) {
  float* warp_max = scratch;                    // [warps][16]
  float* warp_sum = warp_max + kWarps * kRows;  // [warps][16]
  float* warp_out = warp_sum + kWarps * kRows;  // [warps][16][head dim]
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    st.sum[r] += __shfl_xor_sync(0xffffffffu, st.sum[r], 1);
    st.sum[r] += __shfl_xor_sync(0xffffffffu, st.sum[r], 2);
    if (lane % 4 == 0) {
      warp_max[warp * kRows + lane / 4 + 8 * r] = st.max[r];
      warp_sum[warp * kRows + lane / 4 + 8 * r] = st.sum[r];
    }
  }
#pragma unroll
  for (int n = 0; n < kHeadDim / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = lane / 4 + 8 * (e / 2), column = 8 * n + 2 * (lane % 4) + e % 2;
      warp_out[(warp * kRows + row) * kHeadDim + column] = st.o[n][e];
    }
  }
  __syncthreads();
  float* staged = warp_out + kWarps * kRows * kHeadDim;  // a cluster's: the rows merged, then their lse
  float* staged_lse = staged + kRows * staged_row_floats<kHeadDim>();
  for (int i = threadIdx.x; i < rows * kHeadDim; i += 32 * kWarps) {
    const int row = i / kHeadDim, column = i % kHeadDim;
    SplitMerge<1> m;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      m.add(warp_max[w * kRows + row], warp_sum[w * kRows + row], &warp_out[(w * kRows + row) * kHeadDim + column]);
    }
    const float lse = m.total > 0.0f ? m.top + log2f(m.total) : -INFINITY;
    if (p.cluster_splits) {
      staged[row * staged_row_floats<kHeadDim>() + column] = m.value(0);
      if (column == 0) staged_lse[row] = lse;
    } else {
      store_value<T, kHeadDim>(p, seq, kv_head, first_row + row, split, column, m.value(0), lse);
    }
  }
  if (p.cluster_splits) {
    merge_cluster_rows<T, kHeadDim>(p, seq, kv_head, first_row, rows, staged, staged_lse, threadIdx.x, 32 * kWarps);
  }
}

// Shared memory merge_and_store takes: the warps' states, then a cluster's staged rows.
template <int kHeadDim, int kWarps>
constexpr size_t merge_scratch_bytes() {
  return size_t(kWarps) * kRows * (2 + kHeadDim) * sizeof(float) + staged_bytes<kHeadDim>(kRows);
}

// A CTA's share of the grid (x = split x row block, y = KV head, z = sequence): its sequence, its rows
// [first_row, first_row + rows) of the sequence's (token, query head) rows, and its split's keys [begin,
// split_end), of which its last row sees those below `end`.
struct CtaWork {
  Sequence seq;
  int batch, kv_head, split, first_row, rows, begin, split_end, end;
};

// The CTA's work for row blocks of `block_rows`; false: it has none and leaves.
// NOTES: every paged kernel lets its dependent kernel start at once and then waits for the kernel before it:
// all it reads next was written by earlier kernels (the queries, the cache rows appended this step, the table,
// the lengths and their order, the split outputs).
__device__ __forceinline__ bool cta_work(const Params& p, int block_rows, CtaWork& w) {
  release_dependents_and_wait();
  w.batch = p.order ? p.order[blockIdx.z] : blockIdx.z;
  w.seq = sequence(p, w.batch);
  // NOTES: a sequence's last row blocks first: with the causal mask they see the most keys, and the CTAs that
  // start last should be the short ones (longest processing time first, as the order of the sequences).
  w.kv_head = blockIdx.y;
  const int block = p.row_blocks - 1 - (p.cluster_splits ? blockIdx.x / p.splits : blockIdx.x % p.row_blocks);
  w.split = p.cluster_splits ? blockIdx.x % p.splits : blockIdx.x / p.row_blocks;
  w.first_row = block * block_rows;
  w.rows = min(block_rows, w.seq.queries * p.group - w.first_row);
  if (w.rows <= 0) return false;
  w.begin = w.split * p.split_keys;
  w.split_end = w.begin + p.split_keys;
  // NOTES: splits are sized for the longest sequence; a shorter one's splits past its keys leave at once and
  // write nothing (the merge reads only the splits a sequence's length reaches), so a batch of mixed
  // lengths pays little for the split count its longest sequence wants. In a cluster they stay, with no keys,
  // for the merge.
  if (w.split > 0 && w.begin >= w.seq.keys && !p.cluster_splits) return false;
  w.end = min(row_keys(p, w.seq, w.first_row + w.rows - 1), w.split_end);  // the most keys, with the causal mask
  return true;
}

// Grid: x = split x row block (blocks fastest: they read the same keys), y = KV head, z = sequence. A row
// block is 16 rows (keys_split) or 16 per warp (rows_split) of the sequence's (token, query head) rows.
template <class T, int kHeadDim, int kWarps, WarpSplit kSplit>
__global__ void __launch_bounds__(32 * kWarps) paged_attention_kernel(Params p) {
  constexpr int kStages = stages<kHeadDim, kSplit>();
  constexpr int kBlockRows = kSplit == WarpSplit::keys ? kRows : kRows * kWarps;
  constexpr uint32_t kTileBytes = kTileKeys * kHeadDim * 2;
  // keys_split: warp w's stages hold its own tiles w, w + warps, ...; rows_split: stage s holds one step of
  // warps x 16 keys, warp w loading tile w of it.
  constexpr uint32_t kWarpStride = kSplit == WarpSplit::keys ? kStages * 2 * kTileBytes : kTileBytes;
  constexpr uint32_t kStageStride = kSplit == WarpSplit::keys ? kTileBytes : kWarps * kTileBytes;
  constexpr uint32_t kValueOffset = kSplit == WarpSplit::keys ? kStages * kTileBytes : kStages * kWarps * kTileBytes;
  extern __shared__ uint4 shared[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  CtaWork work;
  if (!cta_work(p, kBlockRows, work)) return;
  const int kv_head = work.kv_head, batch = work.batch;
  const Sequence seq = work.seq;
  const int split = work.split, first_row = work.first_row, rows = work.rows, begin = work.begin;
  const int split_end = work.split_end, end = work.end;

  const uint32_t q_tile = shared_address(shared);
  const uint32_t k_stages = q_tile + kBlockRows * kHeadDim * 2 + uint32_t(warp) * kWarpStride;
  const uint32_t v_stages = k_stages + kValueOffset;
  // NOTES: the query tile, then the first tiles of K and V, are all in flight before anything waits: a
  // short decode step is a few of these latencies end to end.
  load_queries<kHeadDim>(p, seq, kv_head, first_row, rows, kBlockRows, q_tile, threadIdx.x, 32 * kWarps);
  asm volatile("cp.async.commit_group;\n" ::);

  // The tiles this warp loads: keys_split, tiles t = warp, warp + warps, ... of the split (and computes
  // them); rows_split, tile warp of each step (all warps compute every tile). NOTES: fixed shares, so that the
  // warps' states merge in the same order on every run (bit-identical outputs). Tiles claimed from a counter
  // the CTA's warps share made the outputs depend on scheduling and ran 0.994x at the model's split counts and
  // 0.924x unsplit on 40 held-out decode cases (docs/results.md#paged_claims_ab_h200.md).
  const int tiles = end > begin ? (end - begin + kTileKeys - 1) / kTileKeys : 0;
  const int steps = kSplit == WarpSplit::keys ? (tiles > warp ? (tiles - warp + kWarps - 1) / kWarps : 0)
                                              : (tiles + kWarps - 1) / kWarps;
  auto tile_key = [&](int i, int t) { return begin + (kWarps * i + t) * kTileKeys; };  // step i, tile t
  auto row_offset = [&](int i) { return key_offset(p, batch, kv_head, tile_key(i, warp) + lane % kTileKeys, end); };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load_tile<kHeadDim>(p, row_offset(s), k_stages + s * kStageStride, v_stages + s * kStageStride, lane);
    asm volatile("cp.async.commit_group;\n" ::);
  }
  // NOTES: a block table entry is read one iteration before its tile's copies are issued, so the
  // table's latency overlaps a tile's wait and math instead of adding to it.
  int64_t next_rows = row_offset(kStages - 1);
  const int warp_first_row = first_row + (kSplit == WarpSplit::rows ? warp * kRows : 0);
  int row_end[2];
  lane_row_ends(p, seq, warp_first_row, split_end, lane, row_end);
  int warp_end = max(row_end[0], row_end[1]);  // past the last key any of the warp's rows sees
#pragma unroll
  for (int o = 4; o < 32; o *= 2) warp_end = max(warp_end, __shfl_xor_sync(0xffffffffu, warp_end, o));
  const int unmasked = warp_unmasked_end(row_end);
  const uint32_t warp_queries = q_tile + uint32_t(warp_first_row - first_row) * kHeadDim * 2;
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 1));  // the query tile's group, the first
  __syncthreads();
  const QueryFragments<kHeadDim> queries(warp_queries, lane);

  SoftmaxState<kHeadDim> st;
  auto copy_ahead = [&](int i) {  // the copies of step i + kStages - 1, into the stage step i - 1 used
    const int ahead = i + kStages - 1;
    if (ahead < steps) {
      const uint32_t stage = uint32_t(ahead % kStages) * kStageStride;
      load_tile<kHeadDim>(p, next_rows, k_stages + stage, v_stages + stage, lane);
      next_rows = row_offset(ahead + 1);
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  for (int i = 0; i < steps; ++i) {
    const uint32_t stage = uint32_t(i % kStages) * kStageStride;
    if constexpr (kSplit == WarpSplit::keys) {
      copy_ahead(i);
      asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 1));
      __syncwarp();
      attend<T, kHeadDim, kTileKeys>(st, queries, k_stages + stage, v_stages + stage, tile_key(i, warp), row_end,
                                     unmasked, p.scale_log2, lane);
      __syncwarp();
    } else {
      // NOTES: one barrier a step: past it, every warp's tile of step i has landed and every warp is done with
      // step i - 1, whose stage the copies issued next reuse.
      asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 2));
      __syncthreads();
      copy_ahead(i);
      const uint32_t step_k = k_stages - uint32_t(warp) * kWarpStride + stage;
      if (tile_key(i, 0) < warp_end) {
        attend<T, kHeadDim, kTileKeys * kWarps>(st, queries, step_k, step_k + kValueOffset, tile_key(i, 0), row_end,
                                                unmasked, p.scale_log2, lane);
      }
    }
  }
  asm volatile("cp.async.wait_all;\n" ::);
  if constexpr (kSplit == WarpSplit::keys) {
    static_assert(merge_scratch_bytes<kHeadDim, kWarps>() <= shared_bytes<kHeadDim, kWarps, kSplit>());
    __syncthreads();
    merge_and_store<T, kHeadDim, kWarps>(p, st, reinterpret_cast<float*>(shared), seq, kv_head, first_row, rows, split,
                                         warp, lane);
  } else {
    static_assert(staged_bytes<kHeadDim>(kBlockRows) <= shared_bytes<kHeadDim, kWarps, kSplit>());
    float* staged = reinterpret_cast<float*>(shared);
    float* staged_lse = staged + kBlockRows * staged_row_floats<kHeadDim>();
    __syncthreads();  // every warp is done with the pipeline's shared memory
    stage_rows<kHeadDim>(st, staged, staged_lse, warp_first_row - first_row, lane);
    __syncthreads();
    if (p.cluster_splits) {
      merge_cluster_rows<T, kHeadDim>(p, seq, kv_head, first_row, rows, staged, staged_lse, threadIdx.x, 32 * kWarps);
    } else {
      write_rows<T, kHeadDim>(p, seq, kv_head, first_row, rows, split, staged, staged_lse, threadIdx.x, 32 * kWarps);
    }
  }
}

// The sequence whose queries include row `token` of q, or -1 for rows that are no sequence's query
// (padding past the last sequence's, or past a sequence's max_q_len-th): those have no split outputs.
__device__ __forceinline__ int sequence_of(const Params& p, int token) {
  if (!p.q_starts) return token;
  if (token < p.q_starts[0] || token >= p.q_starts[p.batch]) return -1;
  int lo = 0, hi = p.batch;  // the last sequence starting at or before the token
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (p.q_starts[mid] <= token ? lo : hi) = mid;
  }
  return token - p.q_starts[lo] < p.max_q_len ? lo : -1;
}

// An output row of the split merge (token * heads_q + head): its row of q and out, its query head, and the
// splits its sequence's keys reach; false for rows that are no sequence's query (they have no split outputs).
struct MergeRow {
  int64_t token, head;
  int splits;
};

__device__ __forceinline__ bool merge_row(const Params& p, int64_t row, MergeRow& r) {
  const int64_t heads_q = int64_t(p.heads_kv) * p.group;
  r.token = row / heads_q, r.head = row % heads_q;
  const int batch = sequence_of(p, int(r.token));
  if (batch < 0) return false;
  r.splits = max(1, min(p.splits, (sequence(p, batch).keys + p.split_keys - 1) / p.split_keys));
  return true;
}

// order[r] = the sequence with the r-th most keys (ties in batch order), for the attention kernel that
// follows: one CTA, a thread per sequence counting those ahead of it.
__global__ void order_sequences_kernel(Params p, int32_t* order) {
  extern __shared__ int keys[];
  release_dependents_and_wait();
  for (int b = threadIdx.x; b < p.batch; b += blockDim.x) keys[b] = sequence(p, b).keys;
  __syncthreads();
  for (int b = threadIdx.x; b < p.batch; b += blockDim.x) {
    int ahead = 0;
    for (int o = 0; o < p.batch; ++o) ahead += keys[o] > keys[b] || (keys[o] == keys[b] && o < b);
    order[ahead] = b;
  }
}

// Threads of merge_splits_kernel for a head dim and split count: `merge_groups` groups of head_dim columns.
constexpr int kMergeThreads = 512;
constexpr int merge_groups(int head_dim, int splits) {
  return splits < kMergeThreads / head_dim ? splits : kMergeThreads / head_dim;
}

// One CTA per (query token, query head): the outputs of the splits the sequence's keys reach, weighted by
// exp2(lse - max) over the total weight; zeros when no split saw a key. NOTES: a decode step's merge is a
// chain of dependent L2 reads, so none of them waits on another more than it must: groups of head_dim
// threads (one per column) merge every groups-th split side by side (SplitMerge), then the first group merges
// the groups' states.
template <class T>
__global__ void merge_splits_kernel(Params p, int head_dim) {
  extern __shared__ float merged[];  // the groups' states: tops, totals, sums [groups][head_dim] each
  release_dependents_and_wait();
  const int64_t row = blockIdx.x;
  MergeRow r;
  if (!merge_row(p, row, r)) return;
  const int groups = int(blockDim.x) / head_dim, group = int(threadIdx.x) / head_dim;
  const int column = int(threadIdx.x) % head_dim;
  const float* lse = p.lse + row * p.splits;
  const float* partial = p.partial + row * p.splits * head_dim + column;
  SplitMerge<1> m;
#pragma unroll 8
  for (int s = group; s < r.splits; s += groups) {
    const float x = partial[int64_t(s) * head_dim];
    m.add(lse[s], 1.0f, &x);
  }
  const int at = group * head_dim + column, stride = groups * head_dim;
  merged[at] = m.top, merged[stride + at] = m.total, merged[2 * stride + at] = m.acc[0];
  __syncthreads();
  if (group > 0) return;
  for (int g = 1; g < groups; ++g) {
    const int other = g * head_dim + column;
    m.add(merged[other], merged[stride + other], &merged[2 * stride + other]);
  }
  static_cast<T*>(p.out)[r.token * p.o_t + r.head * p.o_h + column] = to_element<T>(m.value(0));
}

// One warp per (query token, query head), kMergeWarps rows a CTA: the same merge as merge_splits_kernel, for
// launches of many rows, where one CTA per row spends more on CTA launch and barriers than on the reads.
constexpr int kMergeWarps = 8;
template <class T, int kHeadDim>
__global__ void __launch_bounds__(32 * kMergeWarps) merge_rows_kernel(Params p, int64_t rows) {
  constexpr int kColumns = kHeadDim / 32;  // a lane's consecutive columns
  release_dependents_and_wait();
  const int64_t row = int64_t(blockIdx.x) * kMergeWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  MergeRow r;
  if (row >= rows || !merge_row(p, row, r)) return;
  const float* lse = p.lse + row * p.splits;
  const float* partial = p.partial + row * p.splits * kHeadDim + lane * kColumns;
  SplitMerge<kColumns> m;
#pragma unroll 4
  for (int s = 0; s < r.splits; ++s) {
    float x[kColumns];
#pragma unroll
    for (int c = 0; c < kColumns; c += 2) {
      const float2 pair = *reinterpret_cast<const float2*>(partial + int64_t(s) * kHeadDim + c);
      x[c] = pair.x, x[c + 1] = pair.y;
    }
    m.add(lse[s], 1.0f, x);
  }
  T* out = static_cast<T*>(p.out) + r.token * p.o_t + r.head * p.o_h + lane * kColumns;
#pragma unroll
  for (int c = 0; c < kColumns; ++c) out[c] = to_element<T>(m.value(c));
}

}  // namespace wavetune::detail::paged

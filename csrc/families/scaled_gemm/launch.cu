// The scaled GEMM's variants (the decode GEMM's kernel with e4m3 inputs), its wave-aware choice, its launch,
// and the activation quantizer (scaled_gemm.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "programmatic_launch.cuh"
#include "scaled_ops.h"
#include "scaled_variants.h"
#include "sm90_decode_gemm.cuh"
#include "wavetune/errors.h"
#include "wavetune/kernels.h"

namespace wavetune {
namespace detail {
namespace {

// NOTES: the wave model of a decode launch, the paper's (G, L) without a table. G CTAs (row tiles x token tiles x
// K splits) run in waves of the kernel's resident CTAs on every SM; in a wave each CTA's warps walk L loop
// steps (their share of K), each step streaming the next weights of all their row tiles at once, so a wave
// lasts about L steps, whatever the rows per warp, plus kDecodeWaveSteps of start, reduction and store. A
// persistent CTA walks its G / slots tiles one after another, without a tail wave. Each K split past the first
// adds kDecodeSplitSteps (the cluster's sum). The fewest predicted steps choose the split count of a variant and
// then the variant (ties: fewer splits). Both constants were set by replaying the choice (benchmarks/
// scaled_gemm.py --replay) on sweeps of every decode variant at 1-8 splits and 1-16 tokens: the design split's
// (H100, H200) and a held-out sample with 128-block scales (H200, seed 5); judged on other held-out runs it picks
// 0.975-0.995 of the best variant and split with per-row scales and 0.95-0.98 with 128-block scales
// (docs/scaled_gemm.md).
constexpr double kDecodeWaveSteps = 8.0;
constexpr double kDecodeSplitSteps = 0.5;
constexpr int32_t kDecodeSplitCounts[] = {1, 2, 4, 8};

// The model's steps for a decode variant (its tile of rows x tokens, its K per loop step, its scheduler and
// resident CTAs per SM) on p with `splits` K splits.
double predicted_steps(int64_t tile_rows, int64_t tokens, int64_t tile_k, bool persistent, int32_t resident,
                       const ScaledGemmProblem& p, int32_t splits, int32_t sm_count) {
  const double tiles = double((p.n + tile_rows - 1) / tile_rows) * double((p.m + tokens - 1) / tokens);
  const double slots = double(resident) * sm_count, steps = std::ceil(double(p.k) / double(tile_k * splits));
  const double waves = persistent ? std::max(tiles / slots, 1.0) : std::ceil(tiles * splits / slots);
  return waves * (steps + kDecodeWaveSteps) + kDecodeSplitSteps * (splits - 1);
}

template <DType kOut, bool kBlockScaled, int kTokens, int kRowTiles, int kWarpsN, int kWarpsK, int kUnroll,
          TileScheduler kScheduler>
struct ScaledVariant {
  using Out = std::conditional_t<kOut == DType::bf16, __nv_bfloat16, __half>;
  using K = decode::Kernel<__nv_fp8_e4m3, Out, kTokens, kRowTiles, kWarpsN, kWarpsK, kUnroll, kBlockScaled>;
  static constexpr bool kPersistent = kScheduler == TileScheduler::persistent;

  static int32_t resident(const DeviceInfo& dev) { return decode::resident_ctas_per_sm<K, kPersistent>(dev.device); }

  static double steps(const ScaledGemmProblem& p, int32_t s, const DeviceInfo& dev) {
    return predicted_steps(K::kTileRows, kTokens, K::kTileK, kPersistent, resident(dev), p, s, dev.sm_count);
  }

  static int32_t splits(const ScaledGemmProblem& p, int32_t requested, const DeviceInfo& dev) {
    if (kPersistent) return 1;
    if (requested > 0) return requested;
    int32_t best = 1;
    double best_steps = std::numeric_limits<double>::infinity();
    for (const int32_t s : kDecodeSplitCounts) {
      const double predicted = steps(p, s, dev);
      if (predicted < best_steps) best = s, best_steps = predicted;
    }
    return best;
  }

  static std::string why_not(const ScaledGemmProblem& p, int32_t requested, const DeviceInfo& dev) {
    if (p.out_dtype != kOut) return std::string("the variant writes ") + to_string(kOut);
    if (kBlockScaled != (p.scale_a_kind == ScaleKind::block128)) {
      return kBlockScaled ? "the variant takes 128-block scales" : "the variant takes per-tensor or per-row scales";
    }
    if (kPersistent && requested > 1) return "a persistent variant does not split K";
    const int32_t s = splits(p, requested, dev);
    if (s > decode::kMaxSplits) {
      return "the K splits of a tile are one cluster: at most " + std::to_string(decode::kMaxSplits) + ", got " +
             std::to_string(s);
    }
    return {};
  }

  static size_t workspace_bytes(const ScaledGemmProblem&, int32_t, const DeviceInfo&) { return 0; }

  static void run(const ScaledGemmProblem& p, int32_t requested, const DeviceInfo& dev, void*, size_t,
                  Stream stream) {
    const int32_t s = splits(p, requested, dev);
    decode::Params params{p.a, p.b, p.d, p.bias, p.lda, p.ldb, p.ldd, p.m, p.n, p.k, 0};
    const int k_blocks = (p.k + decode::kScaleBlock - 1) / decode::kScaleBlock;
    params.scale_x = p.scale_a, params.scale_w = p.scale_b;
    params.scale_x_step = kBlockScaled ? k_blocks : p.scale_a_kind == ScaleKind::row ? 1 : 0;
    params.scale_w_step = kBlockScaled ? k_blocks : p.scale_b_kind == ScaleKind::row ? 1 : 0;
    const cudaError_t status =
        decode::launch<K, kPersistent>(params, s, dev.device, dev.sm_count, programmatic_launch(), stream);
    if (status != cudaSuccess) {
      cudaGetLastError();
      WAVETUNE_FAIL("scaled GEMM launch failed: ", cudaGetErrorString(status), " (M=", p.m, " N=", p.n, " K=", p.k,
                    ", ", s, " splits)");
    }
  }

  static constexpr ScaledVariantOps kOps{&splits, &why_not, &workspace_bytes, &run, &resident};

  static VariantRegistry<ScaledVariantOps>::Entry entry(int32_t id, const char* name) {
    return {{id, name, kOut, BLayout::col, true, Schedule::decode, K::kTileRows, kTokens, K::kTileK, 1, 1,
             kScheduler},
            &kOps};
  }
};

// NOTES: the CUTLASS variants' wave model, the paper's (G, L): G output tiles of the kernel's own problem
// (weight rows x tokens, or tokens x weight rows) run on one persistent CTA per SM in ceil(G / SMs) waves,
// each walking L = ceil(K / tile K) k-blocks. A k-block of a wave costs the larger of what its CTAs stream
// from HBM and one CTA's tensor-core time; each wave adds a fixed start and epilogue. The CTAs of a wave take
// token tiles fastest, so a weight tile is read from HBM once per wave for all token tiles beside it, and the
// token tiles once per weight tile. kFp8TensorFlopsPerUsPerSm is the dense e4m3 peak of an H100 SXM per SM; the
// efficiencies and the wave term were set by replaying the model on benchmarks/scaled_gemm.py's sweep of every
// variant on the design split (it picks 0.994 of the best swapped variant's speed at 9-64 tokens, H200).
constexpr double kFp8TensorFlopsPerUsPerSm = 1979e6 / 132;
constexpr double kTensorEfficiency = 0.7;
// NOTES: a ping-pong kernel runs its two consumer warpgroups' mainloops one after the other, and with block scales
// each k-block's promotion (an FMA per accumulator) holds up the tensor cores; the cooperative tiles overlap one
// warpgroup's promotion with the other's MMAs. Past 64 tokens the block-scaled ping-pong 64x128 tile ran 1.4-1.7x
// the cooperative 128x128 tile's time on the design split's large layers (H100); efficiencies of 0.4-0.5 pick the
// best unswapped variant on all 16 design problems (0.7: 0.944).
constexpr double kBlockPingpongTensorEfficiency = 0.45;
constexpr double kHbmEfficiency = 0.9;
constexpr double kCutlassWaveUs = 2.0;

double cutlass_cost_us(const VariantInfo& v, const ScaledGemmProblem& p, const DeviceInfo& dev) {
  const int64_t weight_tile = v.swap_ab ? v.tile_m : v.tile_n, token_tile = v.swap_ab ? v.tile_n : v.tile_m;
  const int64_t weight_tiles = (p.n + weight_tile - 1) / weight_tile, token_tiles = (p.m + token_tile - 1) / token_tile;
  const int64_t tiles = weight_tiles * token_tiles, active = std::min<int64_t>(tiles, dev.sm_count);
  const double waves = std::ceil(double(tiles) / dev.sm_count), blocks = std::ceil(double(p.k) / v.tile_k);
  const double token_rows = double(std::min(token_tiles, active) * std::min<int64_t>(token_tile, p.m));
  const double weight_rows = double((active + token_tiles - 1) / token_tiles * weight_tile);
  const double hbm_us = (weight_rows + token_rows) * v.tile_k / (kHbmEfficiency * dev.memory_bytes_per_us);
  const bool block_pingpong = p.scale_a_kind == ScaleKind::block128 && v.schedule == Schedule::pingpong;
  const double efficiency = block_pingpong ? kBlockPingpongTensorEfficiency : kTensorEfficiency;
  const double mma_us = 2.0 * v.tile_m * v.tile_n * v.tile_k / (efficiency * kFp8TensorFlopsPerUsPerSm);
  return waves * (blocks * std::max(hbm_us, mma_us) + kCutlassWaveUs);
}

// NOTES: the wave model does not see clusters; among variants of one tile, a pair of CTAs along the longer side of
// the kernel's output first (rank 0), then the other pair (1), then none (2). Past 64 tokens with block scales the
// pair along the longer side ran within 2% of the best of the three on all 16 design problems (H100), and up to
// 1.41x faster than the CTAs without a cluster.
int32_t cluster_rank(const VariantInfo& v, const ScaledGemmProblem& p) {
  if (v.cluster_m * v.cluster_n == 1) return 2;
  const int64_t kernel_m = v.swap_ab ? p.n : p.m, kernel_n = v.swap_ab ? p.m : p.n;
  return (v.cluster_m > 1) == (kernel_m > kernel_n) ? 0 : 1;
}

// The CUTLASS variant (Schedule::cooperative or pingpong) with the tokens along the tile's N (swapped: up to
// kScaledGemmMaxTokens) or M that the wave model predicts fastest (ties: cluster_rank), null if none takes p.
const VariantInfo* cutlass_choice(const ScaledGemmProblem& p, const DeviceInfo& dev, bool swapped = true) {
  const VariantInfo* best = nullptr;
  double best_us = std::numeric_limits<double>::infinity();
  for (const VariantInfo& v : scaled_gemm_variants()) {
    if (v.schedule == Schedule::decode || v.schedule == Schedule::cublas || v.swap_ab != swapped ||
        !scaled_variant_ops(v.id)->why_not(p, 0, dev).empty()) {
      continue;
    }
    const double us = cutlass_cost_us(v, p, dev);
    if (!best || us < best_us || (us == best_us && cluster_rank(v, p) < cluster_rank(*best, p))) {
      best = &v, best_us = us;
    }
  }
  return best;
}

// The token tile the decode choice considers: the smallest of the decode variants that take the problem (0 if
// none), several of them for more tokens.
// NOTES: each CTA of a decode kernel loads its tokens' activations beside its weight rows, so a 16-token tile
// costs about what two 8-token tiles do, and on the narrow layers where the decode kernels serve 9-16 tokens
// (below) two 8-token tiles ran 1.3-1.6x faster than one of 16 (design and held-out rows of
// benchmarks/scaled_gemm.py, H100 and H200).
int32_t token_tile_for(const ScaledGemmProblem& p, const DeviceInfo& dev) {
  int32_t smallest = 0;
  for (const VariantInfo& v : scaled_gemm_variants()) {
    if (v.schedule != Schedule::decode || !scaled_variant_ops(v.id)->why_not(p, 0, dev).empty()) continue;
    if (smallest == 0 || v.tile_n < smallest) smallest = v.tile_n;
  }
  return smallest;
}

// Whether the variant's weight tiles, times the decode kernels' token tiles for M, occupy 1 / share of the SMs.
bool cutlass_occupies(const VariantInfo& v, const ScaledGemmProblem& p, const DeviceInfo& dev, int32_t share) {
  const int32_t tokens = token_tile_for(p, dev);
  if (tokens == 0) return true;
  return share * ((p.n + v.tile_m - 1) / v.tile_m) * ((p.m + tokens - 1) / tokens) >= dev.sm_count;
}

// NOTES: up to kScaledGemmDecodeTokens tokens, a swapped CUTLASS variant streams its weight tile through a deep
// TMA pipeline, one CTA per SM, and with a third of the SMs busy it read the design split's layers faster than
// the decode kernels, which pay for their K splits' reduction (M 1-8: 0.77-0.96 of their time from N = 3072
// at 64 rows a tile); narrower layers leave it too few CTAs, and the decode kernels' K splits fill the GPU.
// Each further token tile of the decode kernels reads the weights again (from L2) and takes as long, so the
// CUTLASS variant wins once its weight tiles, times the decode kernels' token tiles, occupy a third of the SMs:
// at 9-16 tokens a layer of under 22 of its 64-row tiles (N < 1,344) still goes to the decode kernels, which
// ran 1.09-1.41x the CUTLASS variants on such layers (qkv projections at TP 4-8; design and held-out rows).
// NOTES: with 128-block scales the decode variants apply the scales per K block, and the CUTLASS variants won from
// a fifth of the SMs. Replayed (benchmarks/scaled_gemm.py --replay) on an H100 design-split run (28 problems at
// 1-16 tokens) the fifth picked 0.996 of the best variant where the third picked 0.981; on held-out runs 1.000
// (H100, 27 problems) and 1.000 (H200, 28) where the third gave 0.984 and 1.000. On per-row runs the third stays
// ahead (0.996 against 0.991 on the design split, H200).
bool cutlass_fills_the_gpu(const VariantInfo& v, const ScaledGemmProblem& p, const DeviceInfo& dev) {
  return cutlass_occupies(v, p, dev, p.scale_a_kind == ScaleKind::block128 ? 5 : 3);
}

// The decode variant the wave model (predicted_steps, at the split count it picks) predicts fastest among those of
// the token tile for M, -1 if none; equal predictions go to the fewer splits, then to the catalog's order.
int32_t decode_choice(const ScaledGemmProblem& p, const DeviceInfo& dev) {
  const int32_t tokens = token_tile_for(p, dev);
  int32_t best = -1, best_splits = 0;
  double best_steps = std::numeric_limits<double>::infinity();
  for (const VariantInfo& v : scaled_gemm_variants()) {
    const ScaledVariantOps* ops = scaled_variant_ops(v.id);
    if (v.schedule != Schedule::decode || v.tile_n != tokens || !ops->why_not(p, 0, dev).empty()) continue;
    const int32_t splits = ops->splits(p, 0, dev);
    const double steps = predicted_steps(v.tile_m, v.tile_n, v.tile_k, v.scheduler == TileScheduler::persistent,
                                         ops->resident_ctas(dev), p, splits, dev.sm_count);
    if (steps < best_steps || (steps == best_steps && splits < best_splits)) {
      best = v.id, best_steps = steps, best_splits = splits;
    }
  }
  return best;
}

// NOTES: the second pass pays where it moves little next to the weights: it reads and writes 4 bytes per output
// element, at most half the weight's bytes when 8 M <= K. There the per-tensor kernel and the pass ran 1.24-1.29x
// cuBLASLt's outer-vector kernels (held-out problems on an H100 and an H200, design ones on the H200); the rule
// gives 1.11-1.13x torch._scaled_mm at 65-1,024 tokens where the faster variant per problem would give 1.14-1.19x
// (docs/scaled_gemm.md). Past K / 8 tokens the pass often costs more than the outer-vector kernels lose.
bool second_pass_pays(const ScaledGemmProblem& p) {
  const bool per_row = p.scale_a_kind == ScaleKind::row || p.scale_b_kind == ScaleKind::row;
  return per_row && p.scale_a_kind != ScaleKind::block128 && p.out_dtype == DType::bf16 && 8 * int64_t(p.m) <= p.k;
}

// The first cuBLASLt variant, of the second-pass kind or not, that takes p on the current device; -1 if none.
int32_t library_variant(const ScaledGemmProblem& p, bool second_pass) {
  for (const VariantInfo& v : scaled_gemm_variants()) {
    if (v.schedule == Schedule::cublas && scales_in_second_pass(v.id) == second_pass &&
        scaled_variant_ops(v.id)->why_not(p, 0, current_device_info()).empty()) {
      return v.id;
    }
  }
  return -1;
}

// NOTES: past the kernels' token limits, and for per-tensor scales, cuBLASLt: its per-tensor kernels ran as fast
// as the CUTLASS variants, its per-row (outer-vector) kernels are the ones torch._scaled_mm runs (1.00x of it past
// 64 tokens), and its block-scaled kernels ran 1.13-1.33x the block-scaled grouped kernel with one expert past 16
// tokens (held-out problems on an H200, docs/scaled_gemm.md). -1 where it is absent (no libcublasLt, no GPU) or
// refuses the problem (block scales at token counts that are not multiples of 4): the caller runs another GEMM.
// Per-row scales go to the second-pass variant where second_pass_pays.
bool device_usable() {
  try {
    return current_device_error() == nullptr;
  } catch (const RuntimeError&) {  // no driver: a build host
    return false;
  }
}

int32_t library_choice(const ScaledGemmProblem& p) {
  const std::vector<VariantInfo>& variants = scaled_gemm_variants();
  const auto is_library = [](const VariantInfo& v) { return v.schedule == Schedule::cublas; };
  if (std::none_of(variants.begin(), variants.end(), is_library) || !device_usable()) return -1;
  const int32_t rescaled = second_pass_pays(p) ? library_variant(p, true) : -1;
  return rescaled >= 0 ? rescaled : library_variant(p, false);
}

// NOTES: block scales in a build without the block-scaled CUTLASS variants: the decode variants up to
// kScaledGemmMaxBlockTokens tokens, but not past one 8-token tile on large layers. Each further token tile of the
// decode variants reads the weights again, which large layers feel most: there the block-scaled grouped kernel with
// one expert, which streams each weight tile once for all tokens, ran faster than the best decode variant and split
// (about 0.85x its time from 58 MB on the design split, H100; 0.71-0.86x from 42 MB on an H200 held-out run), so
// such calls take the path of more tokens.
int32_t block_choice_without_cutlass(const ScaledGemmProblem& p, const DeviceInfo& dev) {
  const bool reads_twice = p.m > token_tile_for(p, dev) && int64_t(p.n) * p.k >= kScaledGemmBlockDecodeMaxWeightBytes;
  return p.m > kScaledGemmMaxBlockTokens || reads_twice ? library_choice(p) : decode_choice(p, dev);
}

// NOTES: block scales past kScaledGemmMaxTokens tokens: cuBLASLt's block-scaled kernels where it has one (token
// counts that are multiples of 4, library_choice), else the unswapped block-scaled CUTLASS variant the wave model
// picks, else (-1) the caller's block-scaled grouped kernel with one expert. On the 12 of 16 design problems of
// 65-14,000 tokens that cuBLASLt refuses (H100) the variants ran 1.22x that grouped kernel's speed. They were not
// timed beside cuBLASLt's kernels, so those stay first where they apply.
int32_t block_prefill_choice(const ScaledGemmProblem& p) {
  const int32_t library = library_choice(p);
  if (library >= 0 || !device_usable()) return library;
  const VariantInfo* cutlass = cutlass_choice(p, current_device_info(), false);
  return cutlass ? cutlass->id : -1;
}

// NOTES: per-tensor scales. cuBLASLt's per-tensor kernels ran as fast as the CUTLASS variants on the layers those
// fill, and faster than the decode kernels on most layers those serve, but slower than the decode kernels where
// the CUTLASS tiles would occupy under a sixth of the SMs: at up to 8 tokens on the design split (H200) layers of
// 896 and 1,280 rows ran 1.43x and 1.04x the decode kernels' time on cuBLASLt, one of 1,792 rows 0.86x. So
// per-tensor calls go to the decode kernels on such layers (N < 1,408 at up to 8 tokens on 132 SMs), to
// cuBLASLt elsewhere.
int32_t per_tensor_choice(const ScaledGemmProblem& p) {
  if (p.m > kScaledGemmDecodeTokens || !device_usable()) return library_choice(p);
  const DeviceInfo& dev = current_device_info();
  const VariantInfo* cutlass = cutlass_choice(p, dev);
  const int32_t decode = cutlass && !cutlass_occupies(*cutlass, p, dev, 6) ? decode_choice(p, dev) : -1;
  return decode >= 0 ? decode : library_choice(p);
}

}  // namespace

std::vector<VariantRegistry<ScaledVariantOps>::Entry> scaled_decode_variants(int32_t first_id) {
  std::vector<VariantRegistry<ScaledVariantOps>::Entry> out;
#define WAVETUNE_SCALED_ENTRY(OUT, BLOCKS, TOKENS, ROW_TILES, WN, WK, UNROLL, SCHEDULER, NAME)                \
  out.push_back(ScaledVariant<DType::OUT, BLOCKS, TOKENS, ROW_TILES, WN, WK, UNROLL, TileScheduler::SCHEDULER>:: \
                    entry(first_id + int32_t(out.size()), NAME));
  WAVETUNE_SCALED_GEMM_VARIANTS(WAVETUNE_SCALED_ENTRY)
#undef WAVETUNE_SCALED_ENTRY
  return out;
}

}  // namespace detail

int32_t scaled_gemm_choice(const ScaledGemmProblem& p) {
  const bool blocks = p.scale_a_kind == ScaleKind::block128;
  const bool per_tensor = p.scale_a_kind == ScaleKind::tensor && p.scale_b_kind == ScaleKind::tensor;
  if (p.m > kScaledGemmMaxTokens) return blocks ? detail::block_prefill_choice(p) : detail::library_choice(p);
  if (per_tensor) return detail::per_tensor_choice(p);
  if (const char* error = detail::current_device_error()) WAVETUNE_INVALID(error);
  const detail::DeviceInfo& dev = detail::current_device_info();
  const VariantInfo* cutlass = detail::cutlass_choice(p, dev);
  if (blocks && !cutlass) return detail::block_choice_without_cutlass(p, dev);
  if (p.m > kScaledGemmDecodeTokens) return cutlass ? cutlass->id : -1;
  if (cutlass && detail::cutlass_fills_the_gpu(*cutlass, p, dev)) return cutlass->id;
  return detail::decode_choice(p, dev);
}

int32_t scaled_gemm_resident_ctas(int32_t variant_id) {
  const detail::ScaledVariantOps* ops = detail::scaled_variant_ops(variant_id);
  if (!ops) WAVETUNE_INVALID("scaled GEMM variant id ", variant_id, " is not compiled into this build");
  if (const char* error = detail::current_device_error()) WAVETUNE_INVALID(error);
  return ops->resident_ctas ? ops->resident_ctas(detail::current_device_info()) : 0;
}

namespace detail {
namespace {

// The variant's ops on the current device, after the checks every launch and workspace query makes.
const ScaledVariantOps& checked_ops(const ScaledGemmProblem& p, int32_t variant_id, int32_t splits) {
  std::string error = scaled_gemm_problem_error(p);
  if (!error.empty()) WAVETUNE_INVALID(error);
  const ScaledVariantOps* ops = scaled_variant_ops(variant_id);
  if (!ops) WAVETUNE_INVALID("scaled GEMM variant id ", variant_id, " is not compiled into this build");
  if (splits < 0) WAVETUNE_INVALID("splits must be >= 0 (0: the variant's own), got ", splits);
  if (const char* device_error = current_device_error()) WAVETUNE_INVALID(device_error);
  error = ops->why_not(p, splits, current_device_info());
  if (!error.empty()) WAVETUNE_INVALID(error, " (M=", p.m, " N=", p.n, " K=", p.k, ")");
  return *ops;
}

}  // namespace
}  // namespace detail

size_t scaled_gemm_workspace_bytes(const ScaledGemmProblem& p, int32_t variant_id, int32_t splits) {
  return detail::checked_ops(p, variant_id, splits).workspace_bytes(p, splits, detail::current_device_info());
}

void scaled_gemm(const ScaledGemmProblem& p, int32_t variant_id, int32_t splits, void* workspace,
                 size_t workspace_bytes, Stream stream) {
  detail::checked_ops(p, variant_id, splits).run(p, splits, detail::current_device_info(), workspace,
                                                 workspace_bytes, stream);
}

// --- The activation quantizer ---------------------------------------------------------------------------

namespace detail {
namespace {

constexpr int kQuantizeThreads = 256;
constexpr int kGroupThreads = decode::kScaleBlock / 8;  // threads of one 128-element group, 8 elements each
constexpr float kE4m3Max = 448.0f;

template <typename T>
__device__ __forceinline__ float magnitude(const uint4& v) {
  const T* e = reinterpret_cast<const T*>(&v);
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(static_cast<float>(e[j])));
  return amax;
}

// 8 elements of x times `inverse`, rounded to e4m3 with saturation, stored as 8 bytes.
template <typename T>
__device__ __forceinline__ void store_scaled(const uint4& v, float inverse, __nv_fp8_e4m3* out) {
  const T* e = reinterpret_cast<const T*>(&v);
  __align__(8) __nv_fp8_e4m3 packed[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) packed[j] = __nv_fp8_e4m3(static_cast<float>(e[j]) * inverse);  // saturates
  *reinterpret_cast<uint2*>(out) = *reinterpret_cast<const uint2*>(packed);
}

__device__ __forceinline__ float scale_of(float amax) { return amax > 0.0f ? amax / kE4m3Max : 1.0f; }

// The largest magnitude over the CTA (row scales).
__device__ float block_max(float amax) {
  __shared__ float warp_max[kQuantizeThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = 0.0f;
#pragma unroll
  for (int w = 0; w < kQuantizeThreads / 32; ++w) amax = fmaxf(amax, warp_max[w]);
  return amax;
}

// One CTA per row, 8 elements per thread per step (16-byte loads, 8-byte stores). Per row: the row's
// largest magnitude first (or the given scale), then the scaled row. Per group: each group of 128 is 16
// threads' one step, so its scale is known after one shuffle and the row is read once.
template <typename T, bool kGroups>
__global__ void __launch_bounds__(kQuantizeThreads)
    quantize_rows_kernel(const T* x, int64_t ldx, int k, __nv_fp8_e4m3* q, float* scale, const float* static_scale) {
  release_dependents_and_wait();
  const T* row = x + int64_t(blockIdx.x) * ldx;
  __nv_fp8_e4m3* out = q + int64_t(blockIdx.x) * k;
  if constexpr (kGroups) {
    const int groups = (k + decode::kScaleBlock - 1) / decode::kScaleBlock;
    // Whole warps step together (the shuffles take all 32 lanes); lanes past k load zeros and store nothing.
    for (int i = 8 * threadIdx.x; i - 8 * int(threadIdx.x % 32) < k; i += 8 * kQuantizeThreads) {
      const uint4 v = i < k ? *reinterpret_cast<const uint4*>(row + i) : make_uint4(0, 0, 0, 0);
      float amax = magnitude<T>(v);
      for (int offset = kGroupThreads / 2; offset > 0; offset /= 2) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
      }
      const float s = scale_of(amax);
      if (threadIdx.x % kGroupThreads == 0 && i < k) {
        scale[int64_t(blockIdx.x) * groups + i / decode::kScaleBlock] = s;
      }
      if (i < k) store_scaled<T>(v, 1.0f / s, out + i);
    }
  } else {
    float s;
    if (static_scale) {
      s = *static_scale;
    } else {
      float amax = 0.0f;
      for (int i = 8 * threadIdx.x; i < k; i += 8 * kQuantizeThreads) {
        amax = fmaxf(amax, magnitude<T>(*reinterpret_cast<const uint4*>(row + i)));
      }
      s = scale_of(block_max(amax));
      if (threadIdx.x == 0) scale[blockIdx.x] = s;
    }
    for (int i = 8 * threadIdx.x; i < k; i += 8 * kQuantizeThreads) {
      store_scaled<T>(*reinterpret_cast<const uint4*>(row + i), 1.0f / s, out + i);
    }
  }
}

template <typename T>
cudaError_t launch_quantize(const void* x, int64_t ldx, int32_t m, int32_t k, bool groups, void* q, float* scale,
                            const float* static_scale, Stream stream) {
  const T* rows = static_cast<const T*>(x);
  int width = k;
  auto* out = static_cast<__nv_fp8_e4m3*>(q);
  void* args[] = {&rows, &ldx, &width, &out, &scale, &static_scale};
  auto* kernel = groups ? quantize_rows_kernel<T, true> : quantize_rows_kernel<T, false>;
  return launch_programmatic(reinterpret_cast<const void*>(kernel), dim3(unsigned(m)), dim3(kQuantizeThreads), 0, stream,
                             args);
}

}  // namespace
}  // namespace detail

void quantize_fp8(const void* x, int64_t ldx, DType x_dtype, int32_t m, int32_t k, int32_t group_size, void* q,
                  float* scale, const float* static_scale, Stream stream) {
  if (m < 0 || k < 0 || k % 8 != 0 || ldx < k || ldx % 8 != 0) {
    WAVETUNE_INVALID("quantize_fp8 takes m, k >= 0 with k and the row stride multiples of 8 (16-byte loads), got m=",
                     m, " k=", k, " ldx=", ldx);
  }
  if (group_size != 0 && (group_size != detail::decode::kScaleBlock || static_scale)) {
    WAVETUNE_INVALID("quantize_fp8 groups rows by 128 (block-scaled activations) or not at all (0), with no static "
                     "scale; got group_size=", group_size);
  }
  if (!x || !q || (!scale && !static_scale)) WAVETUNE_INVALID("quantize_fp8: null pointer");
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(q) % 8 != 0) {
    WAVETUNE_INVALID("quantize_fp8: x must be 16-byte aligned and q 8-byte aligned");
  }
  if (m == 0 || k == 0) return;
  if (const char* device_error = detail::current_device_error()) WAVETUNE_INVALID(device_error);
  const bool groups = group_size != 0;
  const cudaError_t status =
      x_dtype == DType::bf16
          ? detail::launch_quantize<__nv_bfloat16>(x, ldx, m, k, groups, q, scale, static_scale, stream)
          : detail::launch_quantize<__half>(x, ldx, m, k, groups, q, scale, static_scale, stream);
  if (status != cudaSuccess) {
    cudaGetLastError();
    WAVETUNE_FAIL("quantize_fp8 launch failed: ", cudaGetErrorString(status));
  }
}

}  // namespace wavetune

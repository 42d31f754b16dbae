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
#include "scaled_model.h"
#include "scaled_ops.h"
#include "scaled_variants.h"
#include "sm90_decode_gemm.cuh"
#include "wavetune/errors.h"
#include "wavetune/kernels.h"

namespace wavetune {
namespace detail {
namespace {

// The built-in wave models' constants (scaled_model.h; the [model] table of sm90_scaled_gemm.toml).
constexpr ScaledGemmModel kModel{};

template <DType kOut, bool kBlockScaled, int kTokens, int kRowTiles, int kWarpsN, int kWarpsK, int kUnroll,
          TileScheduler kScheduler>
struct ScaledVariant {
  using Out = std::conditional_t<kOut == DType::bf16, __nv_bfloat16, __half>;
  using K = decode::Kernel<__nv_fp8_e4m3, Out, kTokens, kRowTiles, kWarpsN, kWarpsK, kUnroll, kBlockScaled>;
  static constexpr bool kPersistent = kScheduler == TileScheduler::persistent;

  static int32_t resident(const DeviceInfo& dev) { return decode::resident_ctas_per_sm<K, kPersistent>(dev.device); }

  static int32_t splits(const ScaledGemmProblem& p, int32_t requested, const DeviceInfo& dev) {
    if (kPersistent) return 1;
    if (requested > 0) return requested;
    return decode_splits({K::kTileRows, kTokens, K::kTileK, false, resident(dev)}, p, dev.sm_count, kModel);
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
             kScheduler, arch::sm90a},
            &kOps};
  }
};

// Whether variant `v` takes p on `dev`: it runs on the device's architecture and its own checks pass.
bool takes(const VariantInfo& v, const ScaledGemmProblem& p, const DeviceInfo& dev) {
  return runs_on(v, dev.compute_capability) && scaled_variant_ops(v.id)->why_not(p, 0, dev).empty();
}

// The CUTLASS variant (Schedule::cooperative or pingpong) with the tokens along the tile's N (swapped: up to
// kScaledGemmMaxTokens) or M that the wave model predicts fastest (ties: cluster_rank), null if none takes p.
const VariantInfo* cutlass_choice(const ScaledGemmProblem& p, const DeviceInfo& dev, bool swapped = true) {
  const VariantInfo* best = nullptr;
  double best_us = std::numeric_limits<double>::infinity();
  for (const VariantInfo& v : scaled_gemm_variants()) {
    if (v.schedule == Schedule::decode || v.schedule == Schedule::cublas || v.swap_ab != swapped ||
        !takes(v, p, dev)) {
      continue;
    }
    const double us = cutlass_cost_us(v, p, dev.sm_count, dev.memory_bytes_per_us, kModel);
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
    if (v.schedule != Schedule::decode || !takes(v, p, dev)) continue;
    if (smallest == 0 || v.tile_n < smallest) smallest = v.tile_n;
  }
  return smallest;
}

// The decode variant the wave model (predicted_steps, at the split count it picks) predicts fastest among those of
// the token tile for M, -1 if none; equal predictions go to the fewer splits, then to the catalog's order.
int32_t decode_choice(const ScaledGemmProblem& p, const DeviceInfo& dev) {
  const int32_t tokens = token_tile_for(p, dev);
  int32_t best = -1, best_splits = 0;
  double best_steps = std::numeric_limits<double>::infinity();
  for (const VariantInfo& v : scaled_gemm_variants()) {
    const ScaledVariantOps* ops = scaled_variant_ops(v.id);
    if (v.schedule != Schedule::decode || v.tile_n != tokens || !takes(v, p, dev)) continue;
    const int32_t splits = ops->splits(p, 0, dev);
    const DecodeTile tile{v.tile_m, v.tile_n, v.tile_k, v.scheduler == TileScheduler::persistent,
                          ops->resident_ctas(dev)};
    const double steps = predicted_steps(tile, p, splits, dev.sm_count, kModel);
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
        takes(v, p, current_device_info())) {
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
// per-tensor calls go to the decode kernels on such layers (per_tensor_decode_share: N < 1,408 at up to 8 tokens
// on 132 SMs), to cuBLASLt elsewhere.
int32_t per_tensor_choice(const ScaledGemmProblem& p) {
  if (p.m > kScaledGemmDecodeTokens || !device_usable()) return library_choice(p);
  const DeviceInfo& dev = current_device_info();
  const VariantInfo* cutlass = cutlass_choice(p, dev);
  const bool narrow =
      cutlass && !tiles_occupy(cutlass->tile_m, token_tile_for(p, dev), p, kModel.per_tensor_decode_share, dev.sm_count);
  const int32_t decode = narrow ? decode_choice(p, dev) : -1;
  return decode >= 0 ? decode : library_choice(p);
}

}  // namespace

std::vector<VariantRegistry<ScaledVariantOps>::Entry> scaled_decode_variants() {
  std::vector<VariantRegistry<ScaledVariantOps>::Entry> out;
#define WAVETUNE_SCALED_ENTRY(OUT, BLOCKS, TOKENS, ROW_TILES, WN, WK, UNROLL, SCHEDULER, NAME)                \
  out.push_back(ScaledVariant<DType::OUT, BLOCKS, TOKENS, ROW_TILES, WN, WK, UNROLL, TileScheduler::SCHEDULER>:: \
                    entry(kDecodeVariantIds + int32_t(out.size()), NAME));
  WAVETUNE_SCALED_GEMM_VARIANTS(WAVETUNE_SCALED_ENTRY)
#undef WAVETUNE_SCALED_ENTRY
  return out;
}

int32_t scaled_variant_choice(const ScaledGemmProblem& p) {
  const bool blocks = p.scale_a_kind == ScaleKind::block128;
  const bool per_tensor = p.scale_a_kind == ScaleKind::tensor && p.scale_b_kind == ScaleKind::tensor;
  if (p.m > kScaledGemmMaxTokens) return blocks ? detail::block_prefill_choice(p) : detail::library_choice(p);
  if (per_tensor) return detail::per_tensor_choice(p);
  if (const char* error = detail::current_device_error()) WAVETUNE_INVALID(error);
  const detail::DeviceInfo& dev = detail::current_device_info();
  const VariantInfo* cutlass = detail::cutlass_choice(p, dev);
  if (blocks && !cutlass) return detail::block_choice_without_cutlass(p, dev);
  if (p.m > kScaledGemmDecodeTokens) return cutlass ? cutlass->id : -1;
  if (cutlass && detail::cutlass_fills_the_gpu(cutlass->tile_m, detail::token_tile_for(p, dev), p, dev.sm_count,
                                               detail::kModel)) {
    return cutlass->id;
  }
  return detail::decode_choice(p, dev);
}

}  // namespace detail

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
  const std::vector<VariantInfo>& variants = scaled_gemm_variants();
  const auto info = std::find_if(variants.begin(), variants.end(), [&](const VariantInfo& v) { return v.id == variant_id; });
  error = arch_error(*info);
  if (error.empty()) error = ops->why_not(p, splits, current_device_info());
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

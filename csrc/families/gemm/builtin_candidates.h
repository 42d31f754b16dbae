// The dense family's candidates outside its config space, as data: the decode GEMM's catalog (compiled by
// decode_variants.cu in every build with CUDA) and cuBLAS's names (registered by cublas_variant.cu where
// libcublas loads). Plain C++: the lookup library reads them too (table_rules.cpp), since a table may name a
// candidate that the running process lacks.
#pragma once

#include <cstdint>

// The decode GEMM's catalog, as data: (dtype, tokens per CTA, 16-row tiles per warp, warps along N, warps along K,
// K chunks per loop step, schedule). 4 warps per CTA, so that several CTAs share an SM; 16-row CTAs that
// split K over their warps for narrow layers; more rows per warp for wider token tiles
// (sm90_decode_gemm.cuh says why), with fewer chunks per step to stay within the registers; persistent
// CTAs, which stream one tile after another, for wide layers. Ids are positions here: append to keep them
// stable.
#define WAVETUNE_DECODE_VARIANTS(X)                                                         \
  X(bf16, 8, 1, 4, 1, 4, data_parallel, "bf16_bcol_decode_64x8_4x1")                        \
  X(bf16, 8, 2, 4, 1, 4, data_parallel, "bf16_bcol_decode_128x8_4x1")                       \
  X(bf16, 8, 1, 1, 4, 4, data_parallel, "bf16_bcol_decode_16x8_1x4")                        \
  X(bf16, 16, 1, 4, 1, 4, data_parallel, "bf16_bcol_decode_64x16_4x1")                      \
  X(bf16, 16, 2, 4, 1, 4, data_parallel, "bf16_bcol_decode_128x16_4x1")                     \
  X(bf16, 16, 1, 1, 4, 4, data_parallel, "bf16_bcol_decode_16x16_1x4")                      \
  X(bf16, 32, 2, 4, 1, 2, data_parallel, "bf16_bcol_decode_128x32_4x1")                     \
  X(bf16, 64, 2, 4, 1, 2, data_parallel, "bf16_bcol_decode_128x64_4x1")                     \
  X(fp16, 8, 1, 4, 1, 4, data_parallel, "fp16_bcol_decode_64x8_4x1")                        \
  X(fp16, 8, 2, 4, 1, 4, data_parallel, "fp16_bcol_decode_128x8_4x1")                       \
  X(fp16, 8, 1, 1, 4, 4, data_parallel, "fp16_bcol_decode_16x8_1x4")                        \
  X(fp16, 16, 1, 4, 1, 4, data_parallel, "fp16_bcol_decode_64x16_4x1")                      \
  X(fp16, 16, 2, 4, 1, 4, data_parallel, "fp16_bcol_decode_128x16_4x1")                     \
  X(fp16, 16, 1, 1, 4, 4, data_parallel, "fp16_bcol_decode_16x16_1x4")                      \
  X(fp16, 32, 2, 4, 1, 2, data_parallel, "fp16_bcol_decode_128x32_4x1")                     \
  X(fp16, 64, 2, 4, 1, 2, data_parallel, "fp16_bcol_decode_128x64_4x1")                     \
  X(bf16, 8, 1, 4, 1, 4, persistent, "bf16_bcol_decode_64x8_4x1_persistent")                \
  X(bf16, 8, 2, 4, 1, 4, persistent, "bf16_bcol_decode_128x8_4x1_persistent")               \
  X(bf16, 16, 2, 4, 1, 4, persistent, "bf16_bcol_decode_128x16_4x1_persistent")             \
  X(fp16, 8, 1, 4, 1, 4, persistent, "fp16_bcol_decode_64x8_4x1_persistent")                \
  X(fp16, 8, 2, 4, 1, 4, persistent, "fp16_bcol_decode_128x8_4x1_persistent")               \
  X(fp16, 16, 2, 4, 1, 4, persistent, "fp16_bcol_decode_128x16_4x1_persistent")

namespace wavetune::detail {

// By [dtype][B layout].
inline constexpr const char* kCublasVariantNames[2][2] = {{"cublas_bf16_bcol", "cublas_bf16_brow"},
                                                          {"cublas_fp16_bcol", "cublas_fp16_brow"}};
// NOTES: cuBLAS picks its own tile per problem; the table models it through a nominal 128x128x64 tile
// (its (G, L) mapping), and the calibration corrects the rest, as for any variant.
inline constexpr int32_t kCublasNominalTile[3] = {128, 128, 64};

}  // namespace wavetune::detail

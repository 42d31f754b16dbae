// The scaled GEMM's catalog, as data: (output dtype, 128-block scales, tokens per CTA, 16-row tiles per warp,
// warps along N, warps along K, K chunks per loop step, schedule, name). The decode GEMM's shapes of 8 and
// 16 tokens (sm90_decode_gemm.cuh, decode_variants.cu say why each) with e4m3 inputs, whose 64-wide K chunks
// move the same 16 bytes per load. Their ids follow kDecodeVariantIds in this order: append to keep them stable.
// The family's CUTLASS variants, for more tokens, are generated from cutlass_configs/sm90_scaled_gemm.toml.
#pragma once

#define WAVETUNE_SCALED_GEMM_VARIANTS(X)                                                      \
  X(bf16, false, 8, 1, 4, 1, 4, data_parallel, "e4m3_bf16_decode_64x8_4x1")                   \
  X(bf16, false, 8, 2, 4, 1, 4, data_parallel, "e4m3_bf16_decode_128x8_4x1")                  \
  X(bf16, false, 8, 1, 1, 4, 4, data_parallel, "e4m3_bf16_decode_16x8_1x4")                   \
  X(bf16, false, 16, 1, 4, 1, 4, data_parallel, "e4m3_bf16_decode_64x16_4x1")                 \
  X(bf16, false, 16, 2, 4, 1, 4, data_parallel, "e4m3_bf16_decode_128x16_4x1")                \
  X(bf16, false, 16, 1, 1, 4, 4, data_parallel, "e4m3_bf16_decode_16x16_1x4")                 \
  X(bf16, false, 8, 1, 4, 1, 4, persistent, "e4m3_bf16_decode_64x8_4x1_persistent")           \
  X(bf16, false, 8, 2, 4, 1, 4, persistent, "e4m3_bf16_decode_128x8_4x1_persistent")          \
  X(bf16, false, 16, 2, 4, 1, 4, persistent, "e4m3_bf16_decode_128x16_4x1_persistent")        \
  X(fp16, false, 8, 1, 4, 1, 4, data_parallel, "e4m3_fp16_decode_64x8_4x1")                   \
  X(fp16, false, 8, 2, 4, 1, 4, data_parallel, "e4m3_fp16_decode_128x8_4x1")                  \
  X(fp16, false, 8, 1, 1, 4, 4, data_parallel, "e4m3_fp16_decode_16x8_1x4")                   \
  X(fp16, false, 16, 1, 4, 1, 4, data_parallel, "e4m3_fp16_decode_64x16_4x1")                 \
  X(fp16, false, 16, 2, 4, 1, 4, data_parallel, "e4m3_fp16_decode_128x16_4x1")                \
  X(fp16, false, 16, 1, 1, 4, 4, data_parallel, "e4m3_fp16_decode_16x16_1x4")                 \
  X(fp16, false, 8, 1, 4, 1, 4, persistent, "e4m3_fp16_decode_64x8_4x1_persistent")           \
  X(fp16, false, 8, 2, 4, 1, 4, persistent, "e4m3_fp16_decode_128x8_4x1_persistent")          \
  X(fp16, false, 16, 2, 4, 1, 4, persistent, "e4m3_fp16_decode_128x16_4x1_persistent")        \
  X(bf16, true, 8, 1, 4, 1, 4, data_parallel, "e4m3_bf16_block128_decode_64x8_4x1")           \
  X(bf16, true, 8, 2, 4, 1, 4, data_parallel, "e4m3_bf16_block128_decode_128x8_4x1")          \
  X(bf16, true, 8, 1, 1, 4, 4, data_parallel, "e4m3_bf16_block128_decode_16x8_1x4")           \
  X(bf16, true, 8, 1, 4, 1, 4, persistent, "e4m3_bf16_block128_decode_64x8_4x1_persistent")   \
  X(bf16, true, 8, 2, 4, 1, 4, persistent, "e4m3_bf16_block128_decode_128x8_4x1_persistent")  \
  X(fp16, true, 8, 1, 4, 1, 4, data_parallel, "e4m3_fp16_block128_decode_64x8_4x1")           \
  X(fp16, true, 8, 2, 4, 1, 4, data_parallel, "e4m3_fp16_block128_decode_128x8_4x1")          \
  X(fp16, true, 8, 1, 1, 4, 4, data_parallel, "e4m3_fp16_block128_decode_16x8_1x4")           \
  X(fp16, true, 8, 1, 4, 1, 4, persistent, "e4m3_fp16_block128_decode_64x8_4x1_persistent")   \
  X(fp16, true, 8, 2, 4, 1, 4, persistent, "e4m3_fp16_block128_decode_128x8_4x1_persistent")

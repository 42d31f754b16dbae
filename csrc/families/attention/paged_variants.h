// The paged attention kernels as data: (dtype, head dim, warps per CTA, what the warps split, keys per softmax
// step, name), in id order (append to keep ids stable). paged_launch.cu instantiates them; registry.cpp hashes their
// names.
#pragma once

#define WAVETUNE_PAGED_VARIANTS(X)                            \
  X(bf16, 64, 8, keys, 128, "paged_bf16_d64_w8")              \
  X(bf16, 64, 4, keys, 64, "paged_bf16_d64_w4")               \
  X(bf16, 128, 8, keys, 128, "paged_bf16_d128_w8")            \
  X(bf16, 128, 4, keys, 64, "paged_bf16_d128_w4")             \
  X(bf16, 256, 4, keys, 64, "paged_bf16_d256_w4")             \
  X(bf16, 64, 4, rows, 64, "paged_bf16_d64_rows_w4")          \
  X(bf16, 128, 4, rows, 64, "paged_bf16_d128_rows_w4")        \
  X(bf16, 256, 4, rows, 64, "paged_bf16_d256_rows_w4")        \
  X(fp16, 64, 8, keys, 128, "paged_fp16_d64_w8")              \
  X(fp16, 64, 4, keys, 64, "paged_fp16_d64_w4")               \
  X(fp16, 128, 8, keys, 128, "paged_fp16_d128_w8")            \
  X(fp16, 128, 4, keys, 64, "paged_fp16_d128_w4")             \
  X(fp16, 256, 4, keys, 64, "paged_fp16_d256_w4")             \
  X(fp16, 64, 4, rows, 64, "paged_fp16_d64_rows_w4")          \
  X(fp16, 128, 4, rows, 64, "paged_fp16_d128_rows_w4")        \
  X(fp16, 256, 4, rows, 64, "paged_fp16_d256_rows_w4")        \
  X(bf16, 128, 8, rows, 128, "paged_bf16_d128_rows_w8")       \
  X(fp16, 128, 8, rows, 128, "paged_fp16_d128_rows_w8")       \
  X(bf16, 128, 12, specialized, 64, "paged_bf16_d128_ws")     \
  X(fp16, 128, 12, specialized, 64, "paged_fp16_d128_ws")     \
  X(bf16, 64, 12, specialized, 64, "paged_bf16_d64_ws")       \
  X(fp16, 64, 12, specialized, 64, "paged_fp16_d64_ws")       \
  X(bf16, 128, 12, specialized, 128, "paged_bf16_d128_ws128") \
  X(bf16, 64, 12, specialized, 128, "paged_bf16_d64_ws128")   \
  X(fp16, 128, 12, specialized, 128, "paged_fp16_d128_ws128") \
  X(fp16, 64, 12, specialized, 128, "paged_fp16_d64_ws128")   \
  X(bf16, 128, 8, specialized, 64, "paged_bf16_d128_ws_w8")   \
  X(fp16, 128, 8, specialized, 64, "paged_fp16_d128_ws_w8")   \
  X(bf16, 64, 8, specialized, 64, "paged_bf16_d64_ws_w8")     \
  X(fp16, 64, 8, specialized, 64, "paged_fp16_d64_ws_w8")

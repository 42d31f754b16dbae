"""The block-scaled FP8 grouped GEMM family, for mixture-of-experts layers of FP8 checkpoints with 128-block
scales (DeepSeek-V3, Qwen3 FP8): ``wavetune.block_scaled_grouped_gemm`` (which ``wavetune.scaled_grouped_gemm``
calls when its scales are per block), its torch operator and the variant listing (docs/grouped.md, "FP8").

Modules: ``api`` (entry point, variant listing), ``torch_ops`` (operator; imports torch), ``tuning`` (the
grouped family's tuning on block-scaled e4m3 operands). Its variants are the grouped family's CUTLASS kernel
with e4m3 operands and CUTLASS's blockwise-scaling mainloop, generated from
``cutlass_configs/sm90_block_scaled_grouped_gemm.toml``, chosen by the GPU's block-scaled grouped table, else
by the grouped family's built-in heuristic for 1-byte operands.
"""

from .. import Family, register

FAMILY = register(Family(
    name="block_scaled_grouped_gemm", config_space="sm90_block_scaled_grouped_gemm.toml",
    table_suffix=".block_scaled_grouped_gemm.wtt", table_env="WAVETUNE_BLOCK_SCALED_GROUPED_TABLE",
    entry_points=("block_scaled_grouped_gemm",), configs="block_scaled_grouped_configs",
    config_space_hash="config_space_hash", input_checks="check_operands", size_check="size_error", package=__name__, doc="docs/grouped.md"))

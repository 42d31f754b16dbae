"""The FP8 grouped GEMM family for mixture-of-experts layers with e4m3 weights: ``wavetune.scaled_grouped_gemm``
(scales per token and per expert output channel, as ``torch._scaled_grouped_mm`` takes them), its torch
operator and the variant listing (docs/grouped.md, "FP8").

Modules: ``api`` (entry point, variant listing), ``torch_ops`` (operator; imports torch), ``tuning`` (the
grouped family's tuning on e4m3 operands). Its variants are the grouped family's CUTLASS kernel with e4m3
operands, generated from ``cutlass_configs/sm90_scaled_grouped_gemm.toml``, chosen by the GPU's FP8 grouped
table, else by the grouped family's built-in heuristic for 1-byte operands.
"""

from .. import Family, register

FAMILY = register(Family(
    name="scaled_grouped_gemm", config_space="sm90_scaled_grouped_gemm.toml",
    table_suffix=".scaled_grouped_gemm.wtt", table_env="WAVETUNE_SCALED_GROUPED_TABLE",
    entry_points=("scaled_grouped_gemm",), configs="scaled_grouped_configs", config_space_hash="config_space_hash",
    input_checks="check_operands", size_check="size_error", package=__name__, doc="docs/grouped.md"))

"""The FP8 grouped GEMM family for mixture-of-experts layers with e4m3 weights: ``wavetune.scaled_grouped_gemm``
(scales per token and per expert output channel, as ``torch._scaled_grouped_mm`` takes them), its torch
operator and the variant listing (docs/grouped.md, "FP8").

Modules: ``api`` (entry point, variant listing), ``torch_ops`` (operator; imports torch). Its variants are the
grouped family's CUTLASS kernel with e4m3 operands, generated from ``cutlass_configs/sm90_scaled_grouped_gemm.toml``
and chosen by the grouped family's built-in heuristic; it has no tuned tables yet, so no tuning driver.
"""

from .. import Family, register

FAMILY = register(Family(
    name="scaled_grouped_gemm", config_space="sm90_scaled_grouped_gemm.toml",
    table_suffix=".scaled_grouped_gemm.wtt", table_env="WAVETUNE_SCALED_GROUPED_TABLE",
    entry_points=("scaled_grouped_gemm",), configs="scaled_grouped_configs", config_space_hash="config_space_hash",
    input_checks="check_operands", package=__name__, tuning="", doc="docs/grouped.md"))

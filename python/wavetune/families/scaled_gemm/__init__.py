"""The FP8 scaled GEMM family: ``wavetune.scaled_gemm`` (e4m3 operands with fp32 scales per tensor or per
row, as ``torch._scaled_mm`` takes them), ``wavetune.quantize_fp8`` (the activation quantizer), their torch
operators, and the variant listing (docs/scaled_gemm.md).

Modules: ``api`` (entry points, variant listing), ``torch_ops`` (operators; imports torch); offline, ``cases``
(the benchmark's problems) and ``replay`` (the built-in choice on logged sweeps). Its variants are
CUTLASS kernels generated from ``cutlass_configs/sm90_scaled_gemm.toml`` and built-in decode kernels, chosen
by built-in wave models of the launch, which replayed closer to the best than a fitted table (docs/scaled_gemm.md,
"Tables"), so it has no tuning driver.
"""

from .. import Family, register

FAMILY = register(Family(
    name="scaled_gemm", config_space="sm90_scaled_gemm.toml", table_suffix=".scaled_gemm.wtt", table_env="WAVETUNE_SCALED_GEMM_TABLE",
    entry_points=("scaled_gemm", "quantize_fp8", "dequantize_fp8"), configs="scaled_gemm_configs",
    config_space_hash="config_space_hash",
    input_checks="check_operands", package=__name__, tuning="", doc="docs/scaled_gemm.md"))

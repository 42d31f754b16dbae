"""The grouped-GEMM family for mixture-of-experts layers: ``wavetune.grouped_gemm``, its torch operator
``torch.ops.wavetune.grouped_gemm`` and its tuning (docs/grouped.md).

Modules: ``api`` (entry point, variant listing), ``mapping`` (the (G, L) mapping: the C++ one, bound),
``torch_ops`` (operator; imports torch), ``cases`` (the generated MoE cases of the tune and
held-out splits), ``measure`` (timing the variants on a case; imports torch), ``tuning`` (measure the
tune split, fit the table).
"""

from .. import Family, register

FAMILY = register(Family(
    name="grouped_gemm", config_space="sm90_grouped_gemm.toml", table_suffix=".grouped_gemm.wtt",
    table_env="WAVETUNE_GROUPED_TABLE", entry_points=("grouped_gemm",), configs="grouped_configs",
    config_space_hash="config_space_hash", input_checks="check_shapes", size_check="size_error", package=__name__, doc="docs/grouped.md"))

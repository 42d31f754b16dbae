"""The grouped-GEMM family for mixture-of-experts layers: ``wavetune.grouped_gemm`` and its FP8 entry points
``wavetune.scaled_grouped_gemm`` and ``wavetune.block_scaled_grouped_gemm``, their torch operators and the
family's tuning (docs/grouped.md). The operands' scales are an axis of the family (GroupedScales,
csrc/include/wavetune/grouped.h): none (16-bit x and w), per row ("row") or per 128-block ("block128") of e4m3 x
and w; its variants and tables are per scales mode, its entry points thin names over one launch per mode.

Modules: ``api`` (entry points, variant listings), ``fp8`` (the scaled modes' scale shapes and PyTorch's ways with
them), ``mapping`` (the (G, L) mapping: the C++ one, bound), ``torch_ops`` (operators; imports torch),
``cases`` (the generated MoE cases of the tune and held-out splits), ``measure`` (timing the variants on a case;
imports torch), ``tuning`` (measure the tune split, fit a scales mode's table).
"""

from .. import Family, register

FAMILY = register(Family(
    name="grouped_gemm", config_space="sm90_grouped_gemm.toml", table_suffix=".grouped_gemm.wtt",
    table_env="WAVETUNE_GROUPED_TABLE",
    entry_points=("grouped_gemm", "scaled_grouped_gemm", "block_scaled_grouped_gemm"),
    configs="grouped_family_configs", config_space_hash="config_space_hash", input_checks="check_shapes",
    size_check="size_error", occupancy="ctas_per_sm", package=__name__, doc="docs/grouped.md"))

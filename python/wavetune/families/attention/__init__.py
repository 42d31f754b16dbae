"""The attention family: ``wavetune.attention`` (fused attention forward, CUTLASS's Hopper FMHA), its torch
operator ``torch.ops.wavetune.attention`` and its tuning (docs/attention.md).

Modules: ``api`` (entry point, variant listing), ``torch_ops`` (operator; imports torch), ``cases`` (the
named suite the tables are fitted to), ``measure`` (timing every config on a case; imports torch),
``tuning`` (measure the cases, fit the table), ``replay`` (the choice in Python, on logs that time every
candidate).
"""

from .. import Family, register

FAMILY = register(Family(
    name="attention", config_space="sm90_attention.toml", table_suffix=".attention.wtt",
    table_env="WAVETUNE_ATTENTION_TABLE", entry_points=("attention",), configs="attention_configs",
    config_space_hash="config_space_hash", input_checks="check_shapes", size_check="size_error", package=__name__, doc="docs/attention.md"))

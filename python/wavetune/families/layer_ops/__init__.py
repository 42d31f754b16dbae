"""The layer ops: ``wavetune.rms_norm`` (and ``add_rms_norm``, the residual addition before it),
``wavetune.silu_and_mul`` and ``wavetune.rotary_embedding`` (and ``rotary_cache_write``, with a static cache's
write), the element-wise parts of a decoder layer as one kernel each, and ``wavetune.moe_align``, ``moe_gather`` and
``moe_combine``, a mixture-of-experts layer's routing (docs/torch.md, "Layer ops"), their torch operators, and
the modules ``wavetune.patch`` puts in a model's norms and MLPs (``wavetune.nn``).

Modules: ``api`` (entry points), ``torch_ops`` (operators; imports torch). Fixed kernels: no config space, no
tables, no tuning driver.
"""

from .. import Family, register

FAMILY = register(Family(
    name="layer_ops", config_space="", table_suffix=".layer_ops.wtt", table_env="WAVETUNE_LAYER_OPS_TABLE",
    entry_points=("rms_norm", "add_rms_norm", "silu_and_mul", "rotary_embedding", "rotary_cache_write", "moe_align",
                  "moe_gather", "moe_combine"),
    configs="layer_ops_configs",
    config_space_hash="config_space_hash", input_checks="check_rows", package=__name__, tuning="",
    doc="docs/torch.md"))

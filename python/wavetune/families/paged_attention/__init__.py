"""The paged attention family: ``wavetune.paged_attention`` (attention of new query tokens over a paged KV
cache, vLLM's and FlashInfer's layout, or over a dense cache: decode, prefill after a cached prefix) and
``wavetune.varlen_attention`` (packed sequences of different lengths, FlashAttention's variable-length
layout), their torch operators and the kernel listing (docs/attention.md, "Paged and variable-length
attention").

Modules: ``api`` (entry points, kernel listing), ``torch_ops`` (operators; imports torch), ``replay`` (the
built-in choice on logged sweeps, offline). Its kernels are built in (three per dtype and head dim, nothing
compiled on demand) and their KV split count comes from a wave model of the launch; there is no config space
to tune, so no tuning driver.
"""

from .. import Family, register

FAMILY = register(Family(
    name="paged_attention", config_space="", table_suffix=".paged_attention.wtt",
    table_env="WAVETUNE_PAGED_ATTENTION_TABLE", entry_points=("paged_attention", "varlen_attention"), configs="paged_attention_configs",
    config_space_hash="config_space_hash", input_checks="check_inputs", package=__name__, tuning="",
    doc="docs/attention.md"))

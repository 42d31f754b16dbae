"""The paged attention family: ``wavetune.paged_attention`` (decode attention over a paged KV cache, vLLM's
and FlashInfer's layout, or over a dense cache), its torch operator and the kernel listing
(docs/attention.md, "Paged decode").

Modules: ``api`` (entry point, kernel listing), ``torch_ops`` (operator; imports torch). Its kernels are
built in (one per dtype and head dim, nothing compiled on demand) and their KV split count comes from a wave
model of the launch; there is no config space to tune, so no tuning driver.
"""

from .. import Family, register

FAMILY = register(Family(
    name="paged_attention", config_space="", table_suffix=".paged_attention.wtt",
    table_env="WAVETUNE_PAGED_ATTENTION_TABLE", entry_points=("paged_attention",), configs="paged_attention_configs",
    config_space_hash="config_space_hash", input_checks="check_inputs", package=__name__, tuning="",
    doc="docs/attention.md"))

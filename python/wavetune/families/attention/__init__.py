"""The attention family (docs/attention.md), of two kinds of kernel: ``wavetune.attention`` (fused attention
forward, CUTLASS's Hopper FMHA, with cuDNN's attention and the paged decode kernel as candidates its tables
price), and the paged kernels' ``wavetune.paged_attention`` (new query tokens over a paged or dense KV cache:
decode, prefill after a cached prefix) and ``wavetune.varlen_attention`` (packed sequences of different lengths),
with their torch operators and their tuning.

Modules: ``api`` (entry points, variant listing), ``paged`` (the paged kernels' entry points and listing; their
kernel and split count come from a wave model, not a table), ``torch_ops`` (operators; imports torch), ``cases``
(the named suite the tables are fitted to), ``measure`` (timing every config on a case; imports torch),
``tuning`` (measure the cases, fit the table), ``replay`` (the choice in Python, on logs that time every
candidate), ``paged_replay`` (the paged kernels' wave model on logged sweeps, offline).
"""

from .. import Family, register

FAMILY = register(Family(
    name="attention", config_space="sm90_attention.toml", table_suffix=".attention.wtt",
    table_env="WAVETUNE_ATTENTION_TABLE", entry_points=("attention", "paged_attention", "varlen_attention"),
    configs="attention_configs", config_space_hash="config_space_hash", input_checks="check_shapes",
    size_check="size_error", package=__name__, doc="docs/attention.md"))

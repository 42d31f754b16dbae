"""The dense GEMM family: ``wavetune.gemm`` (a drop-in for ``torch.matmul`` and ``F.linear``), its
torch operators ``torch.ops.wavetune.gemm`` / ``linear``, and its tuning (docs/model.md, docs/tuning.md).

Modules: ``api`` (entry point, variant listing), ``torch_ops`` (operators; imports torch), ``tuning``
(the sparse wave-aware plan, the fit, the table; ``python -m wavetune tune``); offline, for the benchmarks and
tests: ``cases`` (the shapes that judge choices), ``replay`` (the table's choice in Python), ``comparison``
(what the GEMM benchmarks compute without a GPU).
"""

from .. import Family, register

FAMILY = register(Family(
    name="gemm", config_space="sm90_gemm.toml", table_suffix=".wtt", table_env="WAVETUNE_TABLE",
    entry_points=("gemm",), configs="configs", config_space_hash="config_space_hash",
    input_checks="check_operands", size_check="size_error", occupancy="ctas_per_sm", package=__name__,
    doc="docs/model.md"))

"""wavetune: wave-aware GEMM kernel selection for LLM inference on NVIDIA GPUs of compute capability 8.0+.

    import torch, wavetune
    y = wavetune.gemm(x, W.t())          # like torch.matmul(x, W.t()) / F.linear(x, W)
    o = wavetune.attention(q, k, v, causal=True)   # [batch, seq, heads, head_dim], GQA, KV splits
    o = wavetune.paged_attention(q, k_cache, v_cache, block_table, seq_lens)  # decode on a paged KV cache
    o = wavetune.varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=True)  # packed sequences
    xq, sx = wavetune.quantize_fp8(x)    # e4m3 per token; then FP8 x @ W.T like torch._scaled_mm:
    y = wavetune.scaled_gemm(xq, Wq.t(), sx, sw)
    wavetune.configs()                   # the compiled CUTLASS variants
    wavetune.load_table("my-gpu.wtt")    # choices from a table made by `python -m wavetune tune`
    report = wavetune.patch(model)       # a model's nn.Linear layers on wavetune (wavetune.nn)
    with wavetune.batch_invariant(): y = model(x)   # rows independent of the batch (or set_batch_invariant())

Importing needs neither torch nor a GPU: ``patch`` and ``unpatch`` import torch (``wavetune.nn``) on first use.
"""

import importlib
from importlib.metadata import PackageNotFoundError, version

from .runtime.configs import KernelConfig, LaunchConfig
from .runtime.device import build_info, device_properties
from .runtime.invariance import batch_invariant, batch_invariant_level, set_batch_invariant
from .runtime.tables import load_table
# The kernel families' entry points (wavetune.families: one subpackage each).
from .families.gemm.api import configs, gemm
from .families.grouped_gemm.api import (  # mixture-of-experts layers (docs/grouped.md), 16-bit and FP8 experts
    block_scaled_grouped_configs, block_scaled_grouped_gemm, grouped_configs, grouped_gemm, scaled_grouped_configs,
    scaled_grouped_gemm)
from .families.attention.api import (  # attention forward; paged KV caches, variable-length batches (docs/attention.md)
    attention, attention_configs, paged_attention, paged_attention_configs, varlen_attention)
from .families.scaled_gemm.api import (  # FP8 (docs/scaled_gemm.md)
    dequantize_fp8, quantize_fp8, scaled_gemm, scaled_gemm_configs)
from .families.layer_ops.api import (  # a decoder layer's element-wise parts, an MoE layer's routing
    add_rms_norm, moe_align, moe_combine, moe_gather, rms_norm, rotary_cache_write, rotary_embedding, silu_and_mul)

try:
    __version__ = version("wavetune")
except PackageNotFoundError:  # imported from an unusual location
    __version__ = "0+unknown"

__all__ = [
    "KernelConfig", "LaunchConfig", "add_rms_norm", "attention", "attention_configs", "batch_invariant", "batch_invariant_level",
    "block_scaled_grouped_configs",
    "block_scaled_grouped_gemm", "build_info", "configs", "dequantize_fp8",
    "device_properties", "gemm", "grouped_configs", "grouped_gemm", "load_table", "moe_align", "moe_combine",
    "moe_gather", "paged_attention",
    "paged_attention_configs", "patch", "quantize_fp8", "rms_norm", "rotary_cache_write", "rotary_embedding", "scaled_gemm", "scaled_gemm_configs", "scaled_grouped_configs",
    "set_batch_invariant",
    "scaled_grouped_gemm", "silu_and_mul", "unpatch", "varlen_attention",
    "__version__",
]


def __getattr__(name: str):
    # NOTES: wavetune.nn (and its patch and unpatch) imports torch; loading it here on first use keeps
    # `import wavetune` free of torch.
    if name in ("nn", "patch", "unpatch"):
        try:
            nn = importlib.import_module(f"{__name__}.nn")  # not `from . import nn`: that asks this hook for nn
        except ImportError as exc:
            raise ImportError(f"wavetune.{name} needs torch (pip install torch): {exc}") from exc
        return nn if name == "nn" else getattr(nn, name)
    raise AttributeError(f"module 'wavetune' has no attribute {name!r}")

"""wavetune's grouped GEMM as PyTorch operators, one per entry point: ``torch.ops.wavetune.grouped_gemm(x, w,
offsets)``, and ``torch.ops.wavetune.scaled_grouped_gemm`` / ``block_scaled_grouped_gemm(x, w, scale_x, scale_w,
offsets, out_dtype=None)`` (docs/torch.md); importing ``wavetune.torch_ops`` registers them.

The fake implementations let ``torch.compile(fullgraph=True)`` trace them; CUDA graphs capture them (the
choice reads sizes only and the workspace comes from the caching allocator). Inference-only.
"""

from __future__ import annotations

from typing import Callable

import torch

from ...runtime import invariance
from ...torch_library import LIBRARY, STRIDES_TAG
from . import api

# batch_invariance: a level's name (wavetune.runtime.invariance); None: the process-wide level when the call runs.
LIBRARY.define("grouped_gemm(Tensor x, Tensor w, Tensor offsets, str? batch_invariance=None) -> Tensor",
               tags=(STRIDES_TAG,))


def grouped_gemm(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor,
                 batch_invariance: str | None = None) -> torch.Tensor:
    """The kernel behind torch.ops.wavetune.grouped_gemm: ``wavetune.grouped_gemm(x, w, offsets)``."""
    return api.grouped_gemm(x, w, offsets, batch_invariant=batch_invariance)


@torch.library.register_fake("wavetune::grouped_gemm", lib=LIBRARY)
def _grouped_gemm_fake(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor,
                       batch_invariance: str | None = None) -> torch.Tensor:
    invariance.requested(batch_invariance)  # a bad level fails as the kernel does
    api.check_shapes(torch, x, w, offsets, None)
    return x.new_empty((x.shape[0], w.shape[1]))  # contiguous, like grouped_gemm's own output


def define_scaled_op(name: str, entry: Callable, check: Callable) -> Callable:
    """Define ``torch.ops.wavetune.<name>`` running ``entry`` (an FP8 entry point), its fake checking the inputs
    with ``check`` (as the entry point does); returns the kernel."""
    LIBRARY.define(f"{name}(Tensor x, Tensor w, Tensor scale_x, Tensor scale_w, Tensor offsets, "
                   "ScalarType? out_dtype=None) -> Tensor", tags=(STRIDES_TAG,))

    def kernel(x, w, scale_x, scale_w, offsets, out_dtype=None):
        return entry(x, w, scale_x, scale_w, offsets, out_dtype=out_dtype)

    def fake(x, w, scale_x, scale_w, offsets, out_dtype=None):
        check(torch, x, w, scale_x, scale_w, offsets, out_dtype, None)
        return x.new_empty((x.shape[0], w.shape[1]), dtype=out_dtype or torch.bfloat16)

    torch.library.register_fake(f"wavetune::{name}", fake, lib=LIBRARY)
    for backend in ("CUDA", "CPU"):  # the CPU kernel refuses with wavetune's message instead of the dispatcher's
        LIBRARY.impl(name, kernel, backend)
    return kernel


scaled_grouped_gemm = define_scaled_op("scaled_grouped_gemm", api.scaled_grouped_gemm, api.check_operands)
block_scaled_grouped_gemm = define_scaled_op("block_scaled_grouped_gemm", api.block_scaled_grouped_gemm,
                                             api.ENTRIES["block128"].check)

# The CPU kernel refuses with wavetune's message instead of the dispatcher's.
for _backend in ("CUDA", "CPU"):
    LIBRARY.impl("grouped_gemm", grouped_gemm, _backend)

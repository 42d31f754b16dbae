"""The PyTorch operator both FP8 grouped families define for their entry point:
``torch.ops.wavetune.<name>(x, w, scale_x, scale_w, offsets, out_dtype=None)`` with a fake implementation
(``torch.compile(fullgraph=True)`` traces it; CUDA graphs capture it: the choice reads sizes only and the
workspace comes from the caching allocator). Inference-only. Importing this module imports torch."""

from __future__ import annotations

from typing import Callable

import torch

from ...torch_library import LIBRARY, STRIDES_TAG


def define_e4m3_grouped_op(name: str, entry: Callable, check: Callable) -> Callable:
    """Define ``torch.ops.wavetune.<name>`` running ``entry`` (the family's entry point), its fake checking
    the inputs with ``check`` (the family's ``check_operands``); returns the kernel."""
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

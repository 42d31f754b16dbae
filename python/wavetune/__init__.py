"""wavetune: wave-aware GEMM kernel selection for LLM inference on NVIDIA Hopper GPUs.

    import torch, wavetune
    y = wavetune.gemm(x, W.t())          # like torch.matmul(x, W.t()) / F.linear(x, W)
    wavetune.configs()                   # the compiled CUTLASS variants
    wavetune.load_table("my-gpu.wtt")    # choices from a table made by `python -m wavetune tune`

Importing needs neither torch nor a GPU.
"""

from importlib.metadata import PackageNotFoundError, version

from .api import KernelConfig, LaunchConfig, build_info, configs, device_properties, gemm, load_table

try:
    __version__ = version("wavetune")
except PackageNotFoundError:  # imported from an unusual location
    __version__ = "0+unknown"

__all__ = [
    "KernelConfig", "LaunchConfig", "build_info", "configs", "device_properties", "gemm", "load_table", "__version__",
]

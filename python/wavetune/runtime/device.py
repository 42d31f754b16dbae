"""Devices, streams, dtypes and the build: what every family's launch path and tools ask of the GPU and
of the native module."""

from __future__ import annotations

import functools
import sys
from typing import Callable

from .native import _C


def build_info() -> dict:
    """How this build was made: kernels compiled or not, kernel set, config-space hash, versions."""
    return _C.build_info()


def package_version() -> str:
    from .. import __version__

    return __version__


def current_device() -> int:
    """torch's current CUDA device where torch is loaded and has one; else 0."""
    torch = sys.modules.get("torch")
    return torch.cuda.current_device() if torch is not None and torch.cuda.is_available() else 0


def no_gpu_reason() -> str | None:
    """Why wavetune cannot use a CUDA device in this process, in words for a user; None when it can."""
    if not build_info()["kernels_compiled"]:
        return "this wavetune build has no GPU kernels (it was built without nvcc)"
    reason = _C.no_device_reason()
    return f"no CUDA GPU is usable here ({reason})" if reason else None


@functools.cache
def properties(device: int) -> dict:
    """``device_properties`` of a device given by index (cached)."""
    if (reason := no_gpu_reason()) is not None:
        raise RuntimeError(f"{reason}: this needs the GPU; tables can still be read and explained without one "
                           "(wavetune.runtime.tables.open_table(PATH), python -m wavetune explain M N K --table PATH)")
    torch = sys.modules.get("torch")
    if torch is not None and device != torch.cuda.current_device():
        with torch.cuda.device(device):
            return _C.device_properties()
    return _C.device_properties()


def device_properties(device: int | None = None) -> dict:
    """Name, SM count, L2 size, compute capability and peak memory bandwidth (``memory_bytes_per_s``) of a CUDA
    device (default: the current one)."""
    return properties(current_device() if device is None else device)


def unsupported_gpu_reason(module) -> str | None:
    """Why wavetune cannot run on a GPU that holds ``module``'s parameters or buffers: one older than compute
    capability 8.0 (Ampere), named with what wavetune needs. None where it can, or where nothing is on a GPU."""
    torch = sys.modules["torch"]
    tensors = [*module.parameters(), *module.buffers()]
    for device in sorted({t.device.index for t in tensors if t.is_cuda}):
        major, minor = torch.cuda.get_device_capability(device)
        if reason := _C.unsupported_device_error(device, torch.cuda.get_device_name(device), major, minor):
            return reason
    return None


@functools.cache
def dtype_codes(torch) -> dict:
    """torch dtype -> the native dtype code, for the dtypes the kernels take."""
    return {torch.bfloat16: _C.DTYPES.index("bf16"), torch.float16: _C.DTYPES.index("fp16")}


@functools.cache
def stream_getter(torch) -> Callable[[int], int]:
    """device -> the raw cudaStream_t of torch's current stream there (for launches from Python)."""
    # NOTES: torch.cuda.current_stream() builds a Stream object per call (microseconds of host time);
    # the raw getter behind it (what Triton launches with) returns the handle alone. Public API if absent.
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw if raw is not None else (lambda device: torch.cuda.current_stream(device).cuda_stream)

"""Test tiers: the CPU tier runs everywhere; tests marked `gpu` skip, with the reason, unless a Hopper GPU,
torch with CUDA and a wavetune build with kernels are all present."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG_SPACE = REPO / "cutlass_configs" / "sm90_gemm.toml"


@functools.cache
def family_table(family: str = "gemm") -> str:
    """The ``[family]`` table of a shipped config-space file (``cutlass_configs/sm90_<family>.toml``), for
    a test's own file: appended after its groups, it names the family and how its code is generated."""
    lines = (CONFIG_SPACE.parent / f"sm90_{family}.toml").read_text().splitlines()
    start = lines.index("[family]")
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip() or lines[i].startswith("[")), len(lines))
    return "\n" + "\n".join(lines[start:end]) + "\n"


@functools.cache
def gpu_skip_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return f"{torch.cuda.get_device_name()} is sm_{major}{minor}; the kernels need sm_90 (Hopper)"
    import wavetune

    if not wavetune.build_info()["kernels_compiled"]:
        return "this wavetune build has no kernels (built without nvcc)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = gpu_skip_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"GPU tier: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

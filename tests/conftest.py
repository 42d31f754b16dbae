"""Test tiers: the CPU tier runs everywhere; tests marked `gpu` skip, with the reason, unless a Hopper GPU,
torch with CUDA and a wavetune build with kernels are all present."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG_SPACE = REPO / "cutlass_configs" / "sm90_gemm.toml"


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


@pytest.fixture(autouse=True, scope="session")
def private_kernel_cache(tmp_path_factory):
    """The suite neither compiles variants in the background nor loads the user's compiled ones, which would
    change what the tests see mid-run (tests/test_jit.py turns both on in processes of its own)."""
    os.environ["WAVETUNE_JIT"] = "0"
    os.environ["WAVETUNE_CACHE_DIR"] = str(tmp_path_factory.mktemp("kernel-cache"))


def pytest_collection_modifyitems(config, items):
    reason = gpu_skip_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"GPU tier: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

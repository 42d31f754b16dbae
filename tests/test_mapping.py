"""The unified mapping (csrc/include/wavetune/mapping.h, through the bindings) against an independent
Python derivation of docs/model.md, over every compiled variant and many random problems."""

from __future__ import annotations

import math
import random

import pytest

import wavetune
from wavetune import _C

DECOMPOSITIONS = {"data_parallel": 1, "split_k": 2, "stream_k": 3}


def reference(v: wavetune.KernelConfig, m, n, k, decomposition, splits, sm_count):
    tile_m, tile_n, tile_k = v.tile
    cm, cn = v.cluster
    rows, cols = (n, m) if v.swap_ab else (m, n)
    tiles = (math.ceil(math.ceil(rows / tile_m) / cm) * cm) * (math.ceil(math.ceil(cols / tile_n) / cn) * cn)
    k_iters = max(1, math.ceil(k / tile_k))
    capacity = max(cm * cn, sm_count // (cm * cn) * (cm * cn))
    if decomposition == "split_k":
        s = min(max(splits, 1), k_iters)
        grid, steps = tiles * s, math.ceil(k_iters / s)
    elif decomposition == "stream_k":
        grid = min(capacity, tiles * k_iters)
        steps = math.ceil(tiles * k_iters / grid)
    else:
        grid, steps = tiles, k_iters
    return grid, steps, capacity, math.ceil(grid / capacity)


@pytest.mark.skipif(not wavetune.configs(), reason="built without kernels: no variants to map")
def test_cpp_mapping_matches_the_reference():
    rng = random.Random(0)
    for v in wavetune.configs():
        for _ in range(200):
            m, n, k = rng.randint(1, 20000), 8 * rng.randint(1, 8000), 8 * rng.randint(1, 8000)
            decomposition = rng.choice(list(DECOMPOSITIONS))
            splits = rng.choice([1, 2, 3, 4, 8, 16]) if decomposition == "split_k" else 1
            sm_count = rng.choice([114, 132, 78])
            got = _C.map_problem(v.id, m, n, k, DECOMPOSITIONS[decomposition], splits, sm_count)
            assert tuple(got) == reference(v, m, n, k, decomposition, splits, sm_count), (v.name, m, n, k)


@pytest.mark.skipif(not wavetune.configs(), reason="built without kernels: no variants to map")
def test_mapping_examples():
    by_name = {c.name: c for c in wavetune.configs()}
    swap = by_name.get("bf16_bcol_swapab_cooperative_128x32x128_1x1_stream_k")
    if swap is None:
        pytest.skip("the example variant is not in this kernel set")
    # Decode: 16 tokens sit on the 32-wide side; N=4096 gives 32 tiles, K=4096 gives 32 steps of 128.
    assert _C.map_problem(swap.id, 16, 4096, 4096, 1, 1, 132) == (32, 32, 132, 1)
    assert _C.map_problem(swap.id, 16, 4096, 4096, 2, 4, 132) == (128, 8, 132, 1)  # split-K 4
    assert _C.map_problem(swap.id, 16, 4096, 4096, 3, 1, 132) == (132, 8, 132, 1)  # stream-K: one wave
    assert _C.map_problem(swap.id, 16, 4096 * 9, 4096, 1, 1, 132)[3] == 3  # 288 tiles: three waves
    with pytest.raises(ValueError, match="not compiled in"):
        _C.map_problem(10**6, 1, 8, 8, 1, 1, 132)

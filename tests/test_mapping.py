"""The unified mapping (csrc/include/wavetune/mapping.h, through the bindings) against the Python statement
of docs/model.md (model.map_problem), over every compiled variant and many random problems."""

from __future__ import annotations

import random

import pytest

import wavetune
from wavetune import _C
from wavetune.tuning import model

DECOMPOSITIONS = {"data_parallel": 1, "split_k": 2, "stream_k": 3}


def reference(v: wavetune.KernelConfig, m, n, k, decomposition, splits, sm_count):
    return model.map_problem(v.tile, v.cluster, v.swap_ab, m, n, k, decomposition, splits, sm_count)


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


def test_stream_k_is_modeled_only_where_cutlass_runs_it_with_few_peers_a_tile():
    """mapping.h's stream_k_modeled, bound: more than kStreamKMinSteps (8) K steps a tile, tiles not whole waves
    of C, and each tile split among at most kStreamKMaxPeers (8) CTAs (k_iters <= 8 L)."""
    assert _C.stream_k_modeled(tiles=4096, k_iters=16, L=497, C=132)
    assert not _C.stream_k_modeled(tiles=4096, k_iters=8, L=249, C=132)  # 8 K steps: CUTLASS runs it data-parallel
    assert not _C.stream_k_modeled(tiles=3 * 132, k_iters=64, L=192, C=132)  # whole waves: data-parallel too
    assert _C.stream_k_modeled(tiles=1, k_iters=256, L=32, C=132)  # 8 peers a tile
    assert not _C.stream_k_modeled(tiles=1, k_iters=257, L=32, C=132)  # 9
    with pytest.raises(ValueError, match="C"):
        _C.stream_k_modeled(tiles=1, k_iters=256, L=32, C=0)

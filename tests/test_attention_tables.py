"""Attention tables (CPU tier): fitting per-config wave models to benchmarks/attention.py's measurements,
the table file, and the C++ Selector's attention mapping and choice of variant and KV splits."""

from __future__ import annotations

import json
import math

import pytest

import wavetune
from wavetune import _C
from wavetune.tuning import tablefile
from wavetune.tuning.report import geomean, read_jsonl
from wavetune.families.attention import replay, tuning
from wavetune.runtime import tables
from conftest import REPO

SMS = 132


def variant():
    found = [c for c in wavetune.attention_configs() if c.dtype == "bf16" and c.tile == (128, 128, 128)]
    if not found:
        pytest.skip("no bf16 128x128 head-dim-128 attention variant in this build (the ci kernel set has one)")
    return found[0]


def law_us(v, splits, case):
    """A latency law of the fitted form: per launch, waves x (3 us + 1.6 us per KV tile), plus 4 us."""
    G, L, waves, launches = tuning.attention_coordinates(v, splits, case, SMS)
    return launches * (waves * (3.0 + 1.6 * L) + 4.0) + (3.0 + 0.05 * splits if splits > 1 else 0.0)


def cases(v):
    out = []
    for batch, seqlen_k in [(b, k) for b in (1, 2, 8, 64) for k in (1000, 4096, 16384, 32768, 131072)]:
        out.append(dict(phase="decode", model="m", batch=batch, seqlen_q=1, seqlen_k=seqlen_k, heads_q=32, heads_kv=8,
                        head_dim=128))
    for batch, tokens in [(1, 2048), (1, 8192), (2, 4096), (4, 1024), (1, 16384)]:
        out.append(dict(phase="prefill", model="m", batch=batch, seqlen_q=tokens, seqlen_k=tokens, heads_q=32,
                        heads_kv=32, head_dim=128))
    for c in out:
        splits = (1, 2, 4, 8, 16, 32) if c["phase"] == "decode" else (1,)
        c["variants_us"] = {f"{v.name}/{s}": law_us(v, s, c) for s in splits if c["seqlen_k"] // s >= 128}
    return out


def write(tmp_path, v):
    table = tuning.fit_attention(cases(v), [v], SMS)
    meta = {"gpu_name": "NVIDIA H100 80GB HBM3", "sm_count": SMS, "family": "attention",
            "config_space_hash": _C.attention_config_space_hash(), "wavetune_version": "test", "cuda_version": 0,
            "created": "now", "timing": "synthetic", "source": "test"}
    path = tmp_path / "gpu.attention.wtt"
    tablefile.write_table(path, meta=meta, **table)
    return path, table


def test_fit_keeps_a_config_per_variant_and_split(tmp_path):
    v = variant()
    path, table = write(tmp_path, v)
    splits = sorted(c["splits"] for c in table["configs"])
    assert splits[0] == 1 and splits[-1] == 32
    assert all(c["decomposition"] == ("split_k" if c["splits"] > 1 else "data_parallel") for c in table["configs"])
    assert tablefile.read_table(path)["meta"]["family"] == "attention"


def test_selector_splits_decode_of_one_sequence_and_not_prefill(tmp_path):
    v = variant()
    path, _ = write(tmp_path, v)
    selector = tables.open_table(path, "attention")
    assert selector.family == "attention"
    one_sequence = selector.select("bf16", "col", 1, 65536, 128, groups=1, heads_q=32, heads_kv=8)
    assert one_sequence["variant"] == v.id and one_sequence["splits"] >= 8
    many = selector.select("bf16", "col", 1, 2048, 128, groups=256, heads_q=32, heads_kv=8)
    assert many["splits"] == 1
    prefill = selector.select("bf16", "col", 4096, 4096, 128, groups=1, heads_q=32, heads_kv=32, causal=True)
    assert prefill["splits"] == 1 and prefill["decomposition"] == "data_parallel"
    # The fit reproduces the law it was fitted to, at a measured point.
    case = dict(phase="decode", batch=1, seqlen_q=1, seqlen_k=32768, heads_q=32, heads_kv=8, head_dim=128)
    predicted = {r["name"]: r["predicted_us"]
                 for r in selector.explain("bf16", "col", 1, 32768, 128, groups=1, heads_q=32, heads_kv=8)}
    assert predicted[f"{v.name}/split_k/16"] == pytest.approx(law_us(v, 16, case), rel=0.1)


def test_attention_tables_are_refused_by_other_families_and_bad_problems(tmp_path):
    v = variant()
    path, _ = write(tmp_path, v)
    with pytest.raises(ValueError, match="attention kernel family"):
        tables.open_table(path, "gemm")
    selector = tables.open_table(path, "attention")
    with pytest.raises(ValueError, match="multiple of heads_kv"):
        selector.select("bf16", "col", 1, 4096, 128, heads_q=6, heads_kv=4)
    with pytest.raises(ValueError, match="no config of table .* is compiled in this build"):
        selector.select("bf16", "col", 1, 4096, 64, heads_q=8, heads_kv=8)  # no head-dim-64 config


def test_tablefile_refuses_stream_k_in_an_attention_table(tmp_path):
    meta = {"gpu_name": "g", "sm_count": 1, "family": "attention", "config_space_hash": "0123456789abcdef",
            "wavetune_version": "test", "cuda_version": 0, "created": "now", "timing": "none"}
    with pytest.raises(ValueError, match="no stream_k"):
        tablefile.format_table(meta, [{"variant": "attn_x", "decomposition": "stream_k"}], {0: {1: [1, 0, 0, 0]}})


def test_tune_command_fits_a_log(tmp_path, monkeypatch):
    v = variant()
    log = tmp_path / "attention_named.jsonl"
    header = {"gpu": "NVIDIA H100 80GB HBM3", "sm_count": SMS}
    log.write_text("\n".join(json.dumps(x) for x in [header, *cases(v)]) + "\n")
    monkeypatch.setattr(wavetune.families.attention.api, "attention_configs", lambda: [v])
    path = tuning.tune_attention([log], tmp_path)
    assert path.name == "nvidia-h100-80gb-hbm3.attention.wtt"
    assert math.isfinite(tables.open_table(path, "attention").select("bf16", "col", 1, 8192, 128, heads_q=32,
                                                                  heads_kv=8)["predicted_us"])


def test_cudnn_and_paged_candidates_are_listed_and_priced_by_the_h200_table():
    """Every build lists cuDNN's attention and the paged decode kernel per dtype and head dim, with a nominal
    tile; the H200's table prices both beside the CUTLASS configs."""
    listed = [c for c in wavetune.attention_configs() if c.from_library]
    assert {(c.schedule, c.dtype, c.tile) for c in listed} == {
        (s, d, (128, 64, hd)) for s in ("cudnn", "paged") for d in ("bf16", "fp16") for hd in (64, 128, 256)}
    assert all(c.built_in and c.name == f"attn_{c.schedule}_{c.dtype}_hd{c.tile[2]}" for c in listed)
    selector = tables.open_table(REPO / "tables" / "nvidia-h200.attention.wtt", "attention")
    for head_dim in (64, 128, 256):
        predicted = {r["name"].split("/")[0]: r["predicted_us"]
                     for r in selector.explain("bf16", "col", 1, 8192, head_dim, groups=16, heads_q=32, heads_kv=8)}
        for schedule in ("cudnn", "paged"):
            assert predicted[f"attn_{schedule}_bf16_hd{head_dim}"] > 0


def test_the_choice_rules_the_replay_calls():
    """choice_rules.h, bound: the built-in rule between cuDNN and the paged kernel, and the table's margin over it,
    with the constants of the attention config file's [model] table (_C.attention_model())."""
    model = _C.attention_model()
    both, copies = (True, True, False), (True, True, True)

    def cudnn(batch, seqlen_q, seqlen_k, heads=(32, 8), head_dim=128, causal=True, routes=both, **override):
        return _C.attention_builtin_prefers_cudnn((batch, seqlen_q, seqlen_k, *heads, head_dim), causal, routes,
                                                  override)

    assert cudnn(4, 512, 512) and not cudnn(4, 256, 512)  # prefill: where cuDNN's top-left mask is the problem's
    assert cudnn(4, 256, 512, causal=False) and not cudnn(4, 512, 512, routes=(False, True, False))
    # Decode: cuDNN below cudnn_decode_max_bytes of K and V (4 bytes per key, KV head and head dim), not at 256.
    below = model["cudnn_decode_max_bytes"] // (4 * 8 * 128) - 1  # keys of one sequence
    assert cudnn(1, 1, below) and not cudnn(1, 1, below + 1) and not cudnn(1, 1, 1024, head_dim=256)
    assert not cudnn(1, 1, below, cudnn_decode_max_bytes=1024) and not cudnn(1, 1, 1024, routes=copies)
    assert cudnn(1, 1, 10**6, heads=(16, 1), head_dim=64, routes=copies)  # 16 query heads per 64-dim KV head
    margin = model["table_margin"]
    assert _C.attention_table_overrides((1 + 2 * margin) * 10, 10) and not _C.attention_table_overrides(10, 10)
    assert not _C.attention_table_overrides((1 + margin / 2) * 10, 10)
    assert _C.attention_table_overrides((1 + margin / 2) * 10, 10, {"table_margin": 0.0})
    with pytest.raises(ValueError, match="sizes must be >= 1"):
        cudnn(1, 1, 1024, heads=(8, 0))


def test_replay_reproduces_the_documented_held_out_figures(raw_result):
    """The attention choice's replay (benchmarks/attention_replay.py's) on an indexed held-out log gives the
    figures of attention_candidates_replay_h200.md (docs/results.md; no GPU: the table's models and the log's
    timings)."""
    keys, tile, predict = replay.table_predictor(REPO / "tables" / "nvidia-h200.attention.wtt", SMS)
    _, cases = read_jsonl(raw_result("attention_heldout_candidates_h200_seed103.jsonl.gz"))
    ratios = replay.replay(cases, keys, tile, predict)
    assert len(ratios["rule"]) == 57 and len(ratios["perfect"]) == 27
    assert round(geomean(ratios["rule"]), 3) == 1.003 and round(geomean(ratios["table"]), 3) == 1.001
    assert round(geomean(ratios["perfect"]), 3) == 1.021 and round(min(ratios["every config"]), 2) == 0.69

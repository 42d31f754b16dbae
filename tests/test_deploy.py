"""Deployment tuning without a GPU: a model's layers from its files, the sample plan along M, the ranges
from synthetic step-function latencies, and the whole run against a fake measurement log."""

from __future__ import annotations

import json
import math
import random
from types import SimpleNamespace
from pathlib import Path

import pytest

import wavetune
from wavetune import __main__ as cli
from wavetune.tuning import deploy
from wavetune.tuning import tablefile
from wavetune.families.gemm import comparison, tuning
from wavetune.runtime import tables

REPO = Path(__file__).resolve().parents[1]
LLAMA3_8B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
             "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "model_type": "llama"}


def shapes(layers: list[deploy.Layer]) -> dict[str, tuple[int, int, int]]:
    return {layer.name: (layer.n, layer.k, layer.max_m) for layer in layers}


def test_config_layers_as_vllm_runs_them():
    assert shapes(deploy.config_layers(LLAMA3_8B, 1, 16384)) == {
        "qkv_proj": (6144, 4096, 16384), "o_proj": (4096, 4096, 16384), "gate_up_proj": (28672, 4096, 16384),
        "down_proj": (4096, 14336, 16384), "lm_head": (128256, 4096, 512)}
    # Column-parallel layers split N, row-parallel ones K; 8 KV heads over 16 ranks: one per rank.
    assert shapes(deploy.config_layers(LLAMA3_8B, 2, 4096)) == {
        "qkv_proj": (3072, 4096, 4096), "o_proj": (4096, 2048, 4096), "gate_up_proj": (14336, 4096, 4096),
        "down_proj": (4096, 7168, 4096), "lm_head": (64128, 4096, 512)}
    assert shapes(deploy.config_layers(LLAMA3_8B, 16, 4096))["qkv_proj"] == ((2 + 2) * 128, 4096, 4096)
    # Qwen3 states head_dim (128, not hidden / heads = 64); the vocabulary is padded to 64 before splitting.
    qwen3 = {"hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
             "intermediate_size": 3072, "vocab_size": 151669}
    layers = shapes(deploy.config_layers(qwen3, 1, 16384))
    assert layers["qkv_proj"] == (4096, 1024, 16384) and layers["o_proj"] == (1024, 2048, 16384)
    assert layers["lm_head"] == (151680, 1024, 512)
    # Multimodal configs keep the language model's in text_config.
    assert deploy.config_layers({"text_config": LLAMA3_8B}, 1, 64) == deploy.config_layers(LLAMA3_8B, 1, 64)


def test_config_layers_of_mixtures_of_experts_are_the_dense_ones(capsys):
    moe = {"hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
           "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "vocab_size": 151936}
    assert set(shapes(deploy.config_layers(moe, 1, 512))) == {"qkv_proj", "o_proj", "lm_head"}
    assert "128 experts" in capsys.readouterr().out
    shared = {**moe, "shared_expert_intermediate_size": 5632}
    assert shapes(deploy.config_layers(shared, 2, 512))["gate_up_proj"] == (5632, 2048, 512)


@pytest.mark.parametrize("config, tp, message", [
    (LLAMA3_8B, 3, "do not split over 3 ranks"),
    ({**LLAMA3_8B, "kv_lora_rank": 512}, 1, "latent attention"),
    ({**LLAMA3_8B, "intermediate_size": 14340}, 8, "MLP of 14340"),
])
def test_config_layers_refusals(config, tp, message):
    with pytest.raises(ValueError, match=message):
        deploy.config_layers(config, tp, 16384)


def test_model_layers_from_either_file(tmp_path):
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"M": [1], "models": {
        "a": {"qkv": [6144, 4096], "o": [4096, 4096]}, "b": {"qkv": [6144, 4096], "lm_head": [32000, 4096]}}}))
    assert shapes(deploy.model_layers(suite, max_m=4096)) == {
        "a.qkv, b.qkv": (6144, 4096, 4096), "a.o": (4096, 4096, 4096), "b.lm_head": (32000, 4096, 512)}
    assert list(shapes(deploy.model_layers(suite, models="b"))) == ["b.qkv", "b.lm_head"]
    with pytest.raises(ValueError, match="--tp applies to a config.json"):
        deploy.model_layers(suite, tp=2)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA3_8B))
    assert deploy.model_layers(config, tp=2) == deploy.config_layers(LLAMA3_8B, 2, 16384)
    config.write_text(json.dumps({**LLAMA3_8B, "vocab_size": 100}))  # padded to 64 ... 128: N = 128 / 16 = 8
    assert shapes(deploy.model_layers(config, tp=16))["lm_head"][0] == 8
    config.write_text(json.dumps({**LLAMA3_8B, "intermediate_size": 14340}))
    with pytest.raises(ValueError, match="down_proj has N=4096, K=14340; the kernels need multiples of 8"):
        deploy.model_layers(config)


# --- Synthetic candidates: a token tile, a fixed number of tiles across N, C tiles per wave --------------


def synthetic_track(token_tile: int, tiles_n: int, capacity: int, max_m: int) -> list[tuple[int, int]]:
    """(waves, work) along M as the mapping gives them for a data-parallel config (L = 1)."""
    out = []
    for m in range(1, max_m + 1):
        grid = -(-m // token_tile) * tiles_n
        out.append((-(-grid // capacity), grid))
    return out


def staircase(track, overhead: float, per_wave: float, per_tile: float):
    """A latency that is a step function of the tile count: a fixed cost, a jump per wave and a cost per tile."""
    return [overhead + per_wave * w + per_tile * x for w, x in track]


CANDIDATES = {  # key: (token tile, tiles across N, capacity, overhead, per wave, per tile)
    "small_tiles": (16, 8, 132, 4.0, 6.0, 0.05),
    "wide_tiles": (64, 4, 132, 9.0, 15.0, 0.08),
    "big_tiles": (128, 2, 132, 14.0, 24.0, 0.30),
    "stream_like": (32, 6, 66, 7.0, 3.0, 0.21),
}


def synthetic(max_m: int):
    tracks = {key: synthetic_track(*spec[:3], max_m) for key, spec in CANDIDATES.items()}
    truth = {key: staircase(tracks[key], *spec[3:]) for key, spec in CANDIDATES.items()}
    return tracks, truth


def check_cover(ranges, max_m):
    assert ranges[0][0] == 1 and ranges[-1][1] == max_m
    for (first, last, *_), (following, *_) in zip(ranges, ranges[1:]):
        assert first <= last and following == last + 1  # contiguous: no gap, no overlap


def test_ranges_choose_the_true_best_at_unsampled_m():
    max_m = 3000
    tracks, truth = synthetic(max_m)
    plan = deploy.sample_plan(tracks, {key: (1, max_m) for key in tracks}, cap=10_000)
    measured = {key: {m: truth[key][m - 1] for m in plan if key in plan[m]} for key in tracks}
    sampled = set(plan)
    assert len(sampled) < max_m // 5  # sparse
    ranges = deploy.best_ranges(tracks, measured)
    check_cover(ranges, max_m)
    assert len({key for *_, key, _ in ranges}) >= 3  # the winner changes along M
    unsampled = 0
    for first, last, key, us in ranges:
        assert us == pytest.approx(truth[key][last - 1])  # the latency at m_last
        for m in range(first, last + 1):
            times = sorted(truth[k][m - 1] for k in tracks)
            if times[1] - times[0] > 1e-9:  # a unique best
                assert truth[key][m - 1] == times[0], (m, key)
                unsampled += m not in sampled
    assert unsampled > max_m // 2


def test_a_candidate_competes_only_where_it_was_measured():
    max_m = 600
    tracks, truth = synthetic(max_m)
    spans = {"small_tiles": (1, 200), "wide_tiles": (150, 600), "big_tiles": (1, 600)}
    plan = deploy.sample_plan(tracks, spans, cap=10_000)
    measured = {key: {m: truth[key][m - 1] for m in plan if key in plan[m]} for key in spans}
    ranges = deploy.best_ranges(tracks, measured)
    check_cover(ranges, max_m)
    for first, last, key, _ in ranges:
        assert spans[key][0] <= first and last <= spans[key][1]


def test_the_cap_drops_whole_wave_regimes_and_keeps_the_staircase():
    max_m = 8000
    tracks, _ = synthetic(max_m)
    spans = {key: (1, max_m) for key in tracks}
    full = deploy.sample_plan(tracks, spans, cap=10_000)
    thin = deploy.sample_plan(tracks, spans, cap=40)
    assert set(thin) < set(full) and {1, max_m} <= set(thin)
    assert len(thin) <= max(40, len(deploy.sample_plan(tracks, spans, cap=0)))
    # Latency = per-wave cost x waves: the per-wave interpolation is exact across dropped regimes too.
    track = tracks["wide_tiles"]
    truth = [25.0 * w for w, _ in track]
    predicted = deploy.interpolate(track, {m: truth[m - 1] for m in thin})
    assert predicted == pytest.approx(truth)
    # Linear in the tile count inside a regime: M sharing a tile count share a latency, unless two of them
    # were measured apart, when it is linear in M between them (65 and 128 share one here).
    predicted = deploy.interpolate(track, {1: 10.0, 64: 10.0, 65: 20.0, 128: 30.0, 129: 30.0})
    assert predicted[:64] == pytest.approx([10.0] * 64) and predicted[129:] == [None] * (max_m - 129)
    assert predicted[64:128] == pytest.approx([20.0 + 10.0 * i / 63 for i in range(64)])
    assert track[64][1] == track[127][1] != track[128][1]


def test_the_backbone_bounds_the_gap_between_sampled_m():
    backbone = deploy.backbone_ms(16384)
    assert backbone[0] == deploy.BACKBONE_FROM and 16384 / deploy.BACKBONE_STEP <= backbone[-1] <= 16384
    assert all(b / a <= deploy.BACKBONE_STEP + 1e-3 for a, b in zip(backbone, backbone[1:]))
    assert deploy.backbone_ms(deploy.BACKBONE_FROM) == [] and deploy.backbone_ms(512) == []
    max_m = 8000
    tracks, _ = synthetic(max_m)
    backbone = deploy.backbone_ms(max_m)
    plan = deploy.sample_plan(tracks, {key: (1, max_m) for key in tracks}, cap=20 + len(backbone), always=backbone)
    assert set(backbone) <= set(plan) and all(plan[m] == list(tracks) for m in backbone)
    sampled = sorted(plan)
    assert max(b / a for a, b in zip(sampled, sampled[1:]) if a >= deploy.BACKBONE_FROM) <= deploy.BACKBONE_STEP + 1e-3


def test_launch_splits_ranges():
    """Equal choices with different launches (a micro rule from some wave up) form separate ranges."""
    max_m = 500
    tracks, truth = synthetic(max_m)
    measured = {"small_tiles": {m: truth["small_tiles"][m - 1] for m in (1, 250, 500)}}
    ranges = deploy.best_ranges(tracks, measured, lambda key, m: (key, "along_n" if m > 300 else "heuristic"))
    assert [(first, last, launch) for first, last, launch, _ in ranges] == [
        (1, 300, ("small_tiles", "heuristic")), (301, 500, ("small_tiles", "along_n"))]


def test_contender_spans_reach_the_neighbouring_points():
    picks = {1: {0}, 8: {0, 1}, 32: {1}, 128: {2}, 512: {1, 2}}
    assert deploy.contender_spans(picks) == {0: (1, 32), 1: (1, 512), 2: (32, 512)}
    assert deploy.widest({0: (1, 32)}, {0: (16, 64), 3: (5, 6)}) == {0: (1, 64), 3: (5, 6)}
    assert tuning.token_counts(100)[:3] == [1, 2, 3] and tuning.token_counts(100)[-1] == 100
    assert deploy.screen_ms(100) == [1, 8, 32, 100]


# --- The whole run, with a fake measurement log --------------------------------------------------------

needs_bf16_col = pytest.mark.skipif(not tuning.candidates(), reason="no compiled bf16 column-major variant")
GPU, SMS = "NVIDIA H100 80GB HBM3", 132


class FakeLog:
    """MeasurementLog's interface over a synthetic latency, linear in work (G*L) inside each wave regime: a
    fixed cost, a jump per wave that grows with the tile, and a cost per K step that varies by config. A
    launch at other than the default micro parameters runs 1.5x as long: a table's micro rule can mislead."""

    device = {"name": GPU, "sm_count": SMS}
    path = "fake.jsonl"
    gpu_seconds = 0.0

    def __init__(self):
        self.records: dict[tuple, float] = {}
        self.measured = 0

    @staticmethod
    def latency(m, n, k, c: tuning.Candidate, raster="heuristic", max_swizzle=1) -> float:
        g, l, _, w = c.coordinates(m, n, k, SMS)
        tm, tn, _ = c.variant.tile
        us = 2.0 + 0.1 * (c.variant.id % 5) + w * tm * tn / 4096 + 1e-3 * g * l * (1 + 0.25 * (c.variant.id % 4))
        return us * (1.0 if (raster, max_swizzle) == ("heuristic", 1) else 1.5)

    def measure(self, problem, runs):
        for c, raster, swizzle in runs:
            if (*problem, c.key, raster, swizzle) not in self.records:
                self.records[(*problem, c.key, raster, swizzle)] = self.latency(*problem[2:], c, raster, swizzle)
                self.measured += 1

    def get(self, problem, c, raster="heuristic", max_swizzle=1):
        return self.records.get((*problem, c.key, raster, max_swizzle))

    def has(self, problem, c, raster="heuristic", max_swizzle=1):
        return (*problem, c.key, raster, max_swizzle) in self.records


def base_table(path):
    # Without the multistage configs: their CTAs per SM are the GPU's, so which configs contend (and whether
    # config 0's micro rule is screened) would depend on the machine. deploy reads every config through its
    # coordinates alike.
    cands = [c for c in tuning.candidates() if c.variant.schedule != "multistage"]
    tablefile.write_table(
        path,
        meta={"gpu_name": GPU, "sm_count": SMS, "config_space_hash": wavetune.build_info()["config_space_hash"],
              "wavetune_version": wavetune.__version__, "cuda_version": 13000, "created": "2026-11-23T00:00:00+00:00"},
        configs=[{"variant": c.variant.name, "decomposition": c.decomposition, "splits": c.splits} for c in cands],
        waves={i: {1: [2.0 + i, 0.01, 0.05, 1e-4], 4: [6.0 + i, 0.01, 0.1, 1e-4]} for i in range(len(cands))},
        micro={0: [(2, "along_n", 4)]},
        occupancy=tuning.occupancy_records(cands),  # as the tuner records it: what Candidate.coordinates reads
        exact=[{"dtype": "bf16", "b_layout": "col", "m_first": 5, "m_last": 9, "n": n, "k": 1024, "config_id": 0,
                "raster": "heuristic", "max_swizzle": 1, "us": 3.0} for n in (2048, 3072)],
        priors=tuning.prior_records(cands, "bf16", "col"))
    return cands


@needs_bf16_col
def test_deploy_writes_ranges_covering_every_m(tmp_path, capsys):
    if sum(c.variant.schedule != "decode" for c in tuning.candidates()) < 2:
        pytest.skip("needs two or more compiled bf16 column-major candidates besides the decode kernels (the "
                    "builtin and filtered builds may have fewer)")
    cands = base_table(tmp_path / "base.wtt")
    layers = [deploy.Layer("qkv", 3072, 1024, 700), deploy.Layer("down", 1024, 4096, 300)]
    log = FakeLog()
    # Uncapped, every wave regime's ends are measured, so the interpolation below is exact whichever configs
    # the build has (a cap drops regimes: test_the_cap_drops_whole_wave_regimes_and_keeps_the_staircase).
    out = deploy.deploy(log, tmp_path / "base.wtt", layers, tmp_path / "out" / "t.wtt", "model.json", cap=10**6)
    printed = capsys.readouterr().out
    assert "screen:" in printed and "along M:" in printed and f"wrote {out}" in printed

    selector = tables.open_table(out)
    written = tablefile.read_table(out)
    assert "model.json: 3072x1024, 1024x4096" in written["meta"]["deployment"]
    ranges = [e for e in written["exact"] if (e["n"], e["k"]) != (2048, 1024)]
    assert sum(e["n"] == 2048 for e in written["exact"]) == 1  # another layer's range is kept
    assert selector.exact_count() == len(ranges) + 1
    for layer in layers:
        picks = {}
        for m in range(1, layer.max_m + 1):
            choice = selector.select("bf16", "col", m, layer.n, layer.k)
            assert choice["source"] == "exact", (layer, m)
            picks[m] = choice["config"]
        # At every M the choice is the fastest of the configs measured on both sides of it (exactly: the
        # latency is linear in work between the measured ends of each wave regime).
        measured = {}
        for _, _, m, n, k, key, *_ in log.records:
            if (n, k) == (layer.n, layer.k):
                measured.setdefault(key, set()).add(m)
        assert len(set(picks.values())) >= 2  # the choice changes along M
        for m in range(1, layer.max_m + 1):
            times = {i: FakeLog.latency(m, layer.n, layer.k, c) for i, c in enumerate(cands)
                     if min(measured.get(c.key, {math.inf})) <= m <= max(measured.get(c.key, {0}))}
            assert times[picks[m]] == pytest.approx(min(times.values())), (layer, m)
    assert selector.select("bf16", "col", 701, 3072, 1024)["source"] == "model"  # beyond max_m: the model
    # Config 0's micro rule (along N, swizzle 4 from wave 2) is measured, and so is its default launch at the
    # same M, which the fake makes faster: no range records the rule.
    ruled = {r[:5] for r in log.records if r[5] == cands[0].key and r[6:] == ("along_n", 4)}
    assert ruled and all((*problem, cands[0].key, "heuristic", 1) in log.records for problem in ruled)
    assert all((e["raster"], e["max_swizzle"]) == ("heuristic", 1) for e in ranges)

    runs = log.measured
    deploy.deploy(log, tmp_path / "base.wtt", layers, tmp_path / "again.wtt", "model.json")
    assert log.measured == runs  # resumed: everything came from the log
    assert tablefile.read_table(tmp_path / "again.wtt")["exact"] == written["exact"]


def test_cli_tune_shapes_passes_its_options(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(deploy, "run", lambda *args: seen.update(args=args))
    assert cli.main(["tune", "--shapes", "config.json", "--tp", "2", "--max-m", "4096", "--log", "l.jsonl",
                     "--table", "base.wtt", "--out", "x.wtt"]) == 0
    assert seen["args"] == (Path("config.json"), Path("x.wtt"), Path("l.jsonl"), Path("base.wtt"), "bf16", "col", 2,
                            None, 4096, deploy.TOP_CANDIDATES)
    with pytest.raises(SystemExit):
        cli.main(["tune", "--shapes", "config.json", "--budget", "100"])


def test_example_config_is_the_public_suites_llama3_8b():
    layers = deploy.model_layers(REPO / "examples" / "llama-3-8b.config.json")
    assert {(layer.n, layer.k) for layer in layers} == {(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),
                                                        (128256, 4096)}


def test_example_qwen_config_at_two_ranks_gives_the_documented_layers():
    layers = deploy.model_layers(REPO / "examples" / "qwen2.5-14b.config.json", tp=2)
    assert [(layer.n, layer.k, layer.max_m) for layer in layers] == [
        (3584, 5120, 16384), (5120, 2560, 16384), (13824, 5120, 16384), (5120, 6912, 16384), (76032, 5120, 512)]


def test_quality_benchmark_judges_only_unprofiled_m():
    measured = {1, 2, 3, 100, 4096}
    ms = comparison.unprofiled_ms(measured, 16384, 40, random.Random(1))
    assert len(ms) == 40 and not measured & set(ms) and max(ms) > 1000 and min(ms) < 50
    assert comparison.unprofiled_ms({1, 2, 3}, 4, 8, random.Random(1)) == [4]  # only one left


def test_quality_benchmark_times_the_choice_again_against_the_first_passs_fastest(monkeypatch):
    """The second call holds the choice and the fastest finalists of the first, never the choice's own
    launch twice; its ratio is the final one."""
    cands = [tuning.Candidate(SimpleNamespace(id=i, name=f"v{i}"), "data_parallel", 1) for i in range(5)]
    first = {c.launch(): us for c, us in zip(cands, [30.0, 9.0, 11.0, 10.0, 20.0])}
    calls = []

    def fake_profile(problem, launches, seed, precise):
        calls.append(launches)
        if len(calls) == 1:
            return [12.0, 12.1] + [first[launch] for launch in launches[2:]]
        return [10.0, 10.5, 9.5, 11.0][:len(launches)]

    monkeypatch.setattr(tuning, "profile", fake_profile)
    selector = SimpleNamespace(select=lambda *args: {"variant": 3, "decomposition": "data_parallel", "splits": 1,
                                                     "raster": "heuristic", "max_swizzle": 1, "name": "v3",
                                                     "source": "exact"})
    row = comparison.judge(selector, cands, 100, 4096, 4096, finalists=2)
    assert calls[1] == [cands[3].launch(), cands[1].launch(), cands[2].launch()]  # v3 is the choice
    assert row["ratio"] == pytest.approx(9.0 / 12.0) and row["best"] == "v1/data_parallel/1"
    assert row["final_ratio"] == pytest.approx(9.5 / 10.0) and row["final_best"] == "v2/data_parallel/1"

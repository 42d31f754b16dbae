"""Deployment tuning: a model's own layers, measured sparsely along M, written as exact ranges.

    python -m wavetune tune --shapes config.json [--tp 2] [--max-m 16384]   # on the GPU the table is for

An inference engine knows its layers' (N, K) at start-up; only M, the token count, changes from call to
call. For each (N, K) this screens the base table's configs at a few M, measures the contenders (the
model's top few, the prior, the screen's fastest) at the M where their wave regimes begin and end,
predicts every M in 1..max-m from those measurements, and writes the fastest config per M as exact ranges
into a copy of the base table (docs/model.md, section 8).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from pathlib import Path
from typing import Hashable, Mapping, Sequence

from tqdm import tqdm

from .. import families
from ..runtime.tables import default_table_path, open_table, table_slug
from . import model, tablefile

DENSE = families.get("gemm")  # deployment tuning measures the dense GEMM's layers
tuning = DENSE.module("tuning")

# NOTES: serving engines run the LM head on the last token of each sequence only, so its M is a batch
# size (benchmarks/shape_suite.py draws it up to 512 too); larger M there are left to the model.
LM_HEAD_MAX_M = 512
# vLLM pads the vocabulary to a multiple of 64 before splitting it over the ranks.
VOCAB_PADDING = 64
TOP_CANDIDATES = 3  # the model's fastest few at each probed M contend, with the table's choice and prior
# NOTES: the model misses too often to prune alone: in the public suite's 2026-11-22 measurements
# (docs/results.md#compare_*.json) the exhaustive best was among the shipped tables' picks (spans included)
# for 63-65% of the shapes. So every config it does not rule out is also measured at a few M (the screen),
# and the fastest few there contend around those M: with the screen's best alone (what those files record)
# the exhaustive best contends for 85-88% (docs/model.md, section 8).
SCREEN_MS = (1, 8, 32, 128, 512, 2048, 8192)  # and max_m
SCREEN_TOP = 2
# The screen skips configs the model predicts more than twice as slow as its best: the slowest to measure,
# and beyond the model's p90 error (50-66%).
SCREEN_WITHIN = 2.0
# Distinct M measured per (N, K) at most, unless the spans' ends, the screen's M and the first and last wave
# regimes alone need more. The backbone comes on top.
MAX_SAMPLES = 32
# NOTES: the cap thins wave regimes on a log scale of the wave count, so it thins most at large M, where
# the kernels are longest: with regime ends alone an N=4096, K=14336 layer on the H100 was measured at
# M = 2238, 6771, 8064, 8192, 11439 and chose at 0.86-0.87 of the best at M = 8983 and 9610 (NVIDIA H100,
# 2026-11-24, docs/results.md#deploy_*llama3-8b_h100_3replays*). The backbone, one M every
# BACKBONE_STEP from BACKBONE_FROM up, bounds the gap any interpolation spans to 10% of M.
BACKBONE_FROM = 1024
BACKBONE_STEP = 1.1

Launch = tuple[int, str, int]  # (config id, raster, max swizzle)
# A config as it contends along M: launched with its table's micro rule for each wave count (False), or
# at the default micro parameters everywhere (True).
Contender = tuple[int, bool]


@dataclasses.dataclass(frozen=True)
class Layer:
    """A linear layer as a GEMM: out[M, N] = x[M, K] @ W[N, K]^T, for M in 1..max_m."""

    name: str
    n: int
    k: int
    max_m: int


# ---------------------------------------------------------------------------------------------------
# The layers of a model
# ---------------------------------------------------------------------------------------------------


def model_layers(path: str | Path, tp: int = 1, models: str | None = None, max_m: int = 16384) -> list[Layer]:
    """The distinct (N, K) of a shape-suite JSON ({"models": {name: {layer: [N, K]}}}, optionally only the
    comma-separated ``models``) or of a Hugging Face ``config.json`` under tensor parallelism ``tp``."""
    data = read_json(path)
    if "models" in data:
        if tp != 1:
            raise ValueError(f"{path}: --tp applies to a config.json; a shape-suite file lists (N, K) as they run")
        names = models.split(",") if models else list(data["models"])
        layers = [Layer(f"{name}.{layer}", n, k, min(max_m, LM_HEAD_MAX_M) if "lm_head" in layer else max_m)
                  for name in names for layer, (n, k) in data["models"][name].items()]
    else:
        layers = config_layers(data, tp, max_m)
    for layer in layers:
        if layer.n % 8 or layer.k % 8:
            raise ValueError(f"{path}: {layer.name} has N={layer.n}, K={layer.k}; the kernels need multiples of 8")
    return merge_layers(layers)


def read_json(path: str | Path) -> dict:
    """A JSON object from ``path``; ValueError naming the file when it is missing or not a JSON object."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object (a shape suite or a config.json)")
    return data


def config_layers(config: Mapping, tp: int, max_m: int) -> list[Layer]:
    """The linear layers of a Llama, Mistral, Qwen2 or Qwen3 ``config.json`` (and their MoE variants: the
    dense layers only) as vLLM runs them on one of ``tp`` ranks.

    NOTES: vLLM fuses q, k and v into one column-parallel GEMM (N split over the ranks, KV heads fewer
    than the ranks replicated, one per rank) and gate and up into another; o and down are row-parallel
    (K split); the LM head splits the padded vocabulary.
    """
    config = config.get("text_config", config)  # multimodal configs keep the language model's here
    if "kv_lora_rank" in config:
        raise ValueError("multi-head latent attention (DeepSeek) is not supported: list its (N, K) in a "
                         "shape-suite JSON instead")
    missing = [key for key in ("hidden_size", "num_attention_heads", "vocab_size") if key not in config]
    if not {"intermediate_size", "shared_expert_intermediate_size"} & config.keys():
        missing.append("intermediate_size")
    if missing:
        raise ValueError(f"neither a shape suite ('models') nor a Llama/Mistral/Qwen config.json: no "
                         f"{', '.join(missing)}")
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    if heads % tp or (kv_heads % tp and tp % kv_heads):
        raise ValueError(f"{heads} attention heads and {kv_heads} KV heads do not split over {tp} ranks")
    layers = [Layer("qkv_proj", (heads // tp + 2 * max(1, kv_heads // tp)) * head_dim, hidden, max_m),
              Layer("o_proj", hidden, heads // tp * head_dim, max_m)]
    experts = config.get("num_local_experts") or config.get("num_experts") or config.get("n_routed_experts")
    mlp = config.get("shared_expert_intermediate_size") if experts else config["intermediate_size"]
    if experts:
        print(f"mixture of experts ({experts} experts): the expert GEMMs are grouped and not tuned here; "
              f"{'the shared expert, ' if mlp else ''}attention and the LM head are")
    if mlp:
        if mlp % tp:
            raise ValueError(f"an MLP of {mlp} does not split over {tp} ranks")
        layers += [Layer("gate_up_proj", 2 * mlp // tp, hidden, max_m), Layer("down_proj", hidden, mlp // tp, max_m)]
    vocab = -(-config["vocab_size"] // VOCAB_PADDING) * VOCAB_PADDING
    return layers + [Layer("lm_head", -(-vocab // tp), hidden, min(max_m, LM_HEAD_MAX_M))]


def merge_layers(layers: list[Layer]) -> list[Layer]:
    """One layer per (N, K): the names joined, the largest max_m."""
    merged: dict[tuple[int, int], Layer] = {}
    for layer in layers:
        seen = merged.get((layer.n, layer.k))
        merged[(layer.n, layer.k)] = layer if seen is None else Layer(
            f"{seen.name}, {layer.name}", layer.n, layer.k, max(seen.max_m, layer.max_m))
    return list(merged.values())


# ---------------------------------------------------------------------------------------------------
# What to measure
# ---------------------------------------------------------------------------------------------------


def screen_ms(max_m: int) -> list[int]:
    return sorted({m for m in SCREEN_MS if m < max_m} | {max_m})


def backbone_ms(max_m: int) -> list[int]:
    """M from BACKBONE_FROM to max_m, BACKBONE_STEP apart (none unless max_m is above BACKBONE_FROM)."""
    return tuning.geometric_ms(BACKBONE_FROM, BACKBONE_STEP, max_m) if max_m > BACKBONE_FROM else []


def model_picks(selector, table: Mapping, dtype: str, b_layout: str, m: int, n: int, k: int,
                top: int = TOP_CANDIDATES) -> set[int]:
    """Config ids the table's model makes contenders at one M: its ``top`` fastest predictions, the table's
    choice, and the prior for M (the M-bucket default, kept in case the model is wrong to override it)."""
    ranked = sorted(selector.explain(dtype, b_layout, m, n, k), key=lambda r: (r["predicted_us"], r["config"]))
    picks = {r["config"] for r in ranked[:top]} | {selector.select(dtype, b_layout, m, n, k, exact=False)["config"]}
    return picks | ({prior_config(table, dtype, b_layout, m)} & {r["config"] for r in ranked})


def prior_config(table: Mapping, dtype: str, b_layout: str, m: int) -> int | None:
    """The config of the table's prior for M (docs/tables.md): the smallest max-m that holds M, 0 for any."""
    prefix = f"{dtype}_b{b_layout}_"
    rules = sorted((p["max_m"] or math.inf, p["config_id"]) for p in table["priors"]
                   if table["configs"][p["config_id"]]["variant"].startswith(prefix))
    return next((cid for max_m, cid in rules if m <= max_m), None)


def contender_spans(picks_at: Mapping[int, set[int]]) -> dict[int, tuple[int, int]]:
    """Config id -> the M span where it contends, from the picks at a list of M: from the M before the first
    at which it is picked to the M after the last. Picks at 1, at max_m and at every M between make spans
    that cover 1..max_m."""
    points = sorted(picks_at)
    return widest(*({cid: (points[max(0, i - 1)], points[min(len(points) - 1, i + 1)]) for cid in picks_at[m]}
                    for i, m in enumerate(points)))


def widest(*span_maps: Mapping[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """The spans of every config, each the smallest one holding all its given spans; by config id."""
    merged: dict[int, tuple[int, int]] = {}
    for spans in span_maps:
        for cid, (lo, hi) in spans.items():
            old = merged.get(cid, (lo, hi))
            merged[cid] = (min(lo, old[0]), max(hi, old[1]))
    return dict(sorted(merged.items()))


def coordinate_track(c: tuning.Candidate, n: int, k: int, sm_count: int, max_m: int) -> list[tuple[int, int]]:
    """(waves, work) of every M in 1..max_m under a candidate (index M - 1). Work is G*L, the grid's K
    steps: at fixed N and K it grows with the token-tile count, and latency is a step function of it."""
    track = []
    for m in range(1, max_m + 1):
        g, l, _, w = c.coordinates(m, n, k, sm_count)
        track.append((w, g * l))
    return track


def regime_ends(track: Sequence[tuple[int, int]], span: tuple[int, int]) -> dict[int, tuple[int, int]]:
    """Wave count -> the first and last M of that wave regime inside ``span``."""
    ends: dict[int, tuple[int, int]] = {}
    for m in range(span[0], span[1] + 1):
        w = track[m - 1][0]
        ends[w] = (ends.get(w, (m, m))[0], m)
    return ends


def sample_plan(tracks: Mapping[Hashable, Sequence[tuple[int, int]]], spans: Mapping[Hashable, tuple[int, int]],
                cap: int = MAX_SAMPLES, always: Sequence[int] = ()) -> dict[int, list[Hashable]]:
    """M -> the candidates measured there. The M: ``always``, both ends of every candidate's span and the
    first and last M of each of its wave regimes inside it. Over ``cap`` distinct M, whole wave regimes
    are dropped, the same for every candidate, by ``model.thin_waves`` (the first and last stay, the rest
    stay evenly spread on a log scale: a wave's step matters less the more waves there are). At each M,
    every candidate whose span holds it is measured: one interleaved profile, more points per candidate."""
    ends = {key: regime_ends(tracks[key], span) for key, span in spans.items()}
    waves = tuple(sorted({w for e in ends.values() for w in e}))
    while True:
        ms = {*always, *(m for span in spans.values() for m in span)}
        ms |= {m for e in ends.values() for w, pair in e.items() if w in waves for m in pair}
        thinner = model.thin_waves(waves)
        if len(ms) <= cap or thinner == waves:
            break
        waves = thinner
    return {m: [key for key, (lo, hi) in spans.items() if lo <= m <= hi] for m in sorted(ms)}


# ---------------------------------------------------------------------------------------------------
# From measurements to ranges
# ---------------------------------------------------------------------------------------------------


def interpolate(track: Sequence[tuple[int, int]], samples: Mapping[int, float]) -> list[float | None]:
    """Latency at every M of the track (index M - 1) from measurements at a few M; None outside the first
    and last measured M. Between the nearest measured M on either side, the latency per wave is linear in
    work, times M's wave count.

    NOTES: a persistent kernel runs its grid in waves and a partial last wave costs about a full one, so
    latency is a staircase in the wave count whose steps change slowly with work. Inside one wave regime
    (``sample_plan`` measures its first and last M) the rule is linear in the token-tile count. Across
    regimes whose ends were not measured (the cap dropped them) it keeps the staircase: linear in work alone
    would smooth each step by up to a wave's cost. Two measured M of one tile count still differ at times
    (Llama-3-8B's down projection, 64x64 ping-pong on an H100: 54 us at M = 102, 45 us at 121 and 46 at
    116, 2026-11-24, reproduced in three runs), so between them the rule is linear in M.
    """
    ms = sorted(samples)
    out: list[float | None] = [None] * len(track)
    for lo, hi in zip(ms, ms[1:]) if len(ms) > 1 else [(ms[0], ms[0])]:
        (w_lo, x_lo), (w_hi, x_hi) = track[lo - 1], track[hi - 1]
        per_wave_lo, per_wave_hi = samples[lo] / w_lo, samples[hi] / w_hi
        for m in range(lo, hi + 1):
            w, x = track[m - 1]
            share = (x - x_lo) / (x_hi - x_lo) if x_hi != x_lo else (m - lo) / (hi - lo) if hi != lo else 0.0
            out[m - 1] = w * (per_wave_lo + share * (per_wave_hi - per_wave_lo))
    return out


def best_ranges(tracks: Mapping[Hashable, Sequence[tuple[int, int]]],
                measured: Mapping[Hashable, Mapping[int, float]],
                launch=lambda key, m: key) -> list[tuple[int, int, Hashable, float]]:
    """(m_first, m_last, launch, latency at m_last) covering M = 1..len(track) without gaps or overlaps.

    At each M the candidate with the lowest interpolated latency wins (``interpolate``; a candidate competes
    only between its first and last measured M; ties: the first in ``measured``). ``launch(key, m)`` is
    what a range records for the winner at M (its config and micro parameters there); consecutive M with
    equal launches form one range."""
    predicted = {key: interpolate(tracks[key], samples) for key, samples in measured.items() if samples}
    max_m = len(next(iter(tracks.values())))
    ranges: list[tuple[int, int, Hashable, float]] = []
    for m in range(1, max_m + 1):
        timed = [(us[m - 1], key) for key, us in predicted.items() if us[m - 1] is not None]
        if not timed:
            raise ValueError(f"no candidate was measured on both sides of M={m}")
        us, key = min(timed, key=lambda t: t[0])
        choice = launch(key, m)
        if ranges and ranges[-1][2] == choice:
            ranges[-1] = (ranges[-1][0], m, choice, us)
        else:
            ranges.append((m, m, choice, us))
    return ranges


# ---------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class LayerPlan:
    layer: Layer
    tracks: dict[Contender, list[tuple[int, int]]]  # contender -> (waves, work) at every M
    launches: dict[int, list[Launch]]  # M -> what is measured there, each launch once


def table_candidates(table: Mapping, dtype: str, b_layout: str) -> dict[int, tuning.Candidate]:
    """Config id -> the table's configs of this dtype and B layout whose variant is compiled."""
    compiled = {v.name: v for v in DENSE.list_configs() if (v.dtype, v.b_layout) == (dtype, b_layout)}
    return {i: tuning.Candidate(compiled[c["variant"]], c["decomposition"], c["splits"])
            for i, c in enumerate(table["configs"]) if c["variant"] in compiled}


def table_launch(table: Mapping, config_id: int, waves: int) -> Launch:
    """A config with the raster and max swizzle of its table's micro record for this wave count, as the
    table launches it (docs/tables.md)."""
    rules = [rule for rule in sorted(table["micro"].get(config_id, ())) if rule[0] <= waves]
    return (config_id, *(rules[-1][1:] if rules else model.DEFAULT_MICRO))


def contender_launch(table: Mapping, contender: Contender, waves: int) -> Launch:
    """What is measured, and what an exact range records, for a contender at this wave count."""
    config_id, at_default = contender
    return (config_id, *model.DEFAULT_MICRO) if at_default else table_launch(table, config_id, waves)


def contenders(table: Mapping, spans: Mapping[int, tuple[int, int]]) -> dict[Contender, tuple[int, int]]:
    """Each config's span for it under its table's micro rule and, where that rule is not the default
    everywhere, at the default micro parameters too.

    NOTES: a table's micro rule was measured at its anchors, not at this layer's shapes. On Llama-3-8B's
    gate_up (NVIDIA H100, 2026-11-24) it launched cooperative 128x256 along M with swizzle 2 at 1.035x
    cuBLAS's time at M = 8192, where the default launch ran at 0.877x at M = 8324: measured under its rule
    alone, on the screen and along M, the config never contended."""
    ruled = {cid for cid, rules in table["micro"].items() if any(tuple(r[1:]) != model.DEFAULT_MICRO for r in rules)}
    return {**{(cid, False): span for cid, span in spans.items()},
            **{(cid, True): span for cid, span in spans.items() if cid in ruled}}


def screen_launches(selector, table: Mapping, dtype: str, b_layout: str, layer: Layer) -> dict[int, list[Launch]]:
    """M -> the screen's launches there: every compiled config the model predicts within SCREEN_WITHIN of
    its best, under its table's micro rule and at the default micro parameters (``contenders``)."""
    out = {}
    for m in screen_ms(layer.max_m):
        rows = selector.explain(dtype, b_layout, m, layer.n, layer.k)
        best = min(r["predicted_us"] for r in rows)
        near = [r for r in rows if r["predicted_us"] <= SCREEN_WITHIN * best]
        out[m] = list(dict.fromkeys(contender_launch(table, (r["config"], at_default), r["waves"])
                                    for r in near for at_default in (False, True)))
    return out


def plan_layer(selector, table: Mapping, cands: Mapping[int, tuning.Candidate], dtype: str, b_layout: str,
               layer: Layer, screened: Mapping[int, Mapping[Launch, float]], top: int = TOP_CANDIDATES,
               cap: int = MAX_SAMPLES) -> LayerPlan:
    """What to measure along M: the contenders (``contenders``) of the model's probes and of the screen
    (``screened``: M -> {launch: us}), at the M of ``sample_plan`` (the screen's M included, measured
    already, and the backbone's)."""
    probes = {m: model_picks(selector, table, dtype, b_layout, m, layer.n, layer.k, top)
              for m in tuning.token_counts(layer.max_m)}
    fastest = {m: set(list(dict.fromkeys(launch[0] for launch in sorted(us, key=us.get)))[:SCREEN_TOP])
               for m, us in screened.items()}  # the configs of the fastest launches, each config once
    spans = contenders(table, widest(contender_spans(probes), contender_spans(fastest)))
    by_config = {cid: coordinate_track(cands[cid], layer.n, layer.k, selector.sm_count(), layer.max_m)
                 for cid, _ in spans}
    tracks = {key: by_config[key[0]] for key in spans}
    backbone = backbone_ms(layer.max_m)
    samples = sample_plan(tracks, spans, cap + len(backbone), always=[*screened, *backbone])
    return LayerPlan(layer, tracks, {m: list(dict.fromkeys(contender_launch(table, key, tracks[key][m - 1][0])
                                                           for key in keys)) for m, keys in samples.items()})


def measure(log, jobs: list[tuple[Layer, dict[int, list[Launch]]]], cands: Mapping[int, tuning.Candidate],
            dtype: str, b_layout: str, desc: str) -> None:
    """Profile every (layer, {M: launches}) job through the log, one interleaved call per problem."""
    problems = [((dtype, b_layout, m, layer.n, layer.k), [(cands[cid], *micro) for cid, *micro in runs])
                for layer, by_m in jobs for m, runs in by_m.items()]
    new = sum(not log.has(problem, *run) for problem, runs in problems for run in runs)
    print(f"{desc}: {len(problems)} problems, {sum(len(runs) for _, runs in problems)} measurements, {new} not "
          f"in the log yet")
    for problem, runs in tqdm(problems, desc=desc, unit="problem", dynamic_ncols=True):
        log.measure(problem, runs)


def logged(log, layer: Layer, launches: Mapping[int, list[Launch]], cands: Mapping[int, tuning.Candidate],
           dtype: str, b_layout: str) -> dict[int, dict[Launch, float]]:
    """M -> {launch: us} of the launches the log has a time for."""
    out: dict[int, dict[Launch, float]] = {}
    for m, runs in launches.items():
        for cid, raster, swizzle in runs:
            us = log.get((dtype, b_layout, m, layer.n, layer.k), cands[cid], raster, swizzle)
            if us is not None:
                out.setdefault(m, {})[(cid, raster, swizzle)] = us
    return out


def exact_records(log, plan: LayerPlan, table: Mapping, cands: Mapping[int, tuning.Candidate], dtype: str,
                  b_layout: str) -> list[dict]:
    """The layer's exact ranges from its logged measurements (``best_ranges``)."""
    layer = plan.layer

    def launch(key: Contender, m: int) -> Launch:
        return contender_launch(table, key, plan.tracks[key][m - 1][0])

    times = logged(log, layer, plan.launches, cands, dtype, b_layout)
    measured = {key: {m: us[run] for m, us in times.items() if (run := launch(key, m)) in us} for key in plan.tracks}
    ranges = best_ranges(plan.tracks, measured, launch)
    return [{"dtype": dtype, "b_layout": b_layout, "m_first": first, "m_last": last, "n": layer.n, "k": layer.k,
             "config_id": cid, "raster": raster, "max_swizzle": swizzle, "us": us}
            for first, last, (cid, raster, swizzle), us in ranges]


def deploy(log, base: Path, layers: list[Layer], out: Path, source: str, dtype: str = "bf16", b_layout: str = "col",
           top: int = TOP_CANDIDATES, cap: int = MAX_SAMPLES) -> Path:
    """Measure ``layers`` along M through ``log`` (a ``tuning.GemmLog``) and write ``out``: the base
    table with their exact ranges, replacing any it had for these (N, K)."""
    table = tablefile.read_table(base)
    selector = open_table(base)
    selector.check_device(log.device["name"], log.device["sm_count"])
    cands = table_candidates(table, dtype, b_layout)
    print(f"{log.device['name']}: {len(layers)} (N, K) from {source}; {len(cands)} {dtype} {b_layout} configs "
          f"in {base}")
    screens = [(layer, screen_launches(selector, table, dtype, b_layout, layer)) for layer in layers]
    measure(log, screens, cands, dtype, b_layout, "screen")
    plans = [plan_layer(selector, table, cands, dtype, b_layout, layer,
                        logged(log, layer, launches, cands, dtype, b_layout), top, cap) for layer, launches in screens]
    measure(log, [(plan.layer, plan.launches) for plan in plans], cands, dtype, b_layout, "along M")

    tuned = {(dtype, b_layout, layer.n, layer.k) for layer in layers}
    exact = [e for e in table["exact"] if (e["dtype"], e["b_layout"], e["n"], e["k"]) not in tuned]
    for plan in plans:
        records = exact_records(log, plan, table, cands, dtype, b_layout)
        exact += records
        used = sorted({cands[r["config_id"]].variant.name for r in records})
        print(f"{plan.layer.name} (N={plan.layer.n}, K={plan.layer.k}): {len(records)} ranges over M "
              f"1-{plan.layer.max_m}, {len(plan.tracks)} configs measured, {len(used)} chosen: {', '.join(used)}")
    when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    note = f"{when} {source}: {', '.join(f'{layer.n}x{layer.k}' for layer in layers)}"
    meta = {**table["meta"], "deployment": "; ".join(filter(None, (table["meta"].get("deployment"), note)))}
    out.parent.mkdir(parents=True, exist_ok=True)
    tablefile.write_table(out, **{**table, "meta": meta, "exact": exact})
    print(f"wrote {out}: this run measured {log.measured} configs in {log.gpu_seconds:.1f} GPU-seconds "
          f"(log: {log.path}); use it with WAVETUNE_TABLE={out}")
    return out


def run(shapes: Path, out: Path | None, log_path: Path, base: Path | None = None, dtype: str = "bf16",
        b_layout: str = "col", tp: int = 1, models: str | None = None, max_m: int = 16384,
        top: int = TOP_CANDIDATES) -> Path:
    """``python -m wavetune tune --shapes``: ``out`` is a .wtt file or a directory for ``<gpu-slug>.wtt``
    (default: the current one); ``base`` defaults to the table installed for this GPU."""
    layers = model_layers(shapes, tp, models, max_m)  # the input's own errors before any device work
    log = tuning.GemmLog(log_path, precise=True)
    name = log.device["name"]
    base = base or default_table_path(name)
    if base is None:
        raise FileNotFoundError(f"no table for {name} to add exact ranges to: pass --table, or tune one first "
                                f"(python -m wavetune tune)")
    out = Path(out or ".")
    if out.suffix != ".wtt":
        out = out / f"{table_slug(name)}.wtt"
    return deploy(log, Path(base), layers, out, Path(shapes).name, dtype, b_layout, top)

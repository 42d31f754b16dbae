"""The FP8 scaled GEMM's built-in choice replayed offline on logs of benchmarks/scaled_gemm.py (docs/scaled_gemm.md):
the decode variants' loop-step model and split counts, the CUTLASS-or-decode rule at 1-16 tokens, the CUTLASS
choice past 64 tokens with block scales, and a table of the shared wave model fitted to a sweep (why the family
ships none). The models are the choice's own (csrc/families/scaled_gemm/scaled_model.h, bound as
``_C.scaled_gemm_*``, with the constants of ``_C.scaled_gemm_model()``). Needs no GPU, except
``device_decode_facts``.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...runtime.native import _C
from ...tuning import model
from ...tuning.report import read_jsonl
from .api import scaled_gemm_configs
from .cases import VARIANT_M

# ---- the decode variants' choice --------------------------------------------------------------------------

DECODE_NAME = re.compile(r"e4m3_\w+?_(block128_)?decode_(\d+)x(\d+)_\d+x(\d+)(_persistent)?$")


def device_decode_facts() -> dict[str, dict]:
    """Each compiled decode variant's tile, scheduler and resident CTAs per SM on the current GPU (what the
    choice's model reads; a log's header records them)."""
    return {c.name: dict(rows=c.tile[0], tokens=c.tile[1], tile_k=c.tile[2], persistent=c.scheduler == "persistent",
                         resident=_C.scaled_gemm_resident_ctas(c.id))
            for c in scaled_gemm_configs() if c.schedule == "decode"}


def decode_facts(header: dict, name: str) -> dict | None:
    """A decode variant's tile (rows, tokens, K per loop step), scheduler and resident CTAs per SM: as the log
    recorded them, or for logs without them from the name, with the CTAs per SM of these kernels on an H100 or
    H200 (their register counts: 2 for 128-row tiles, else 4, or 3 for the block-scaled data-parallel ones)."""
    if name in header.get("decode_variants", {}):
        return header["decode_variants"][name]
    found = DECODE_NAME.match(name)
    if not found:
        return None
    block, rows, tokens, warps_k, persistent = found.groups()
    resident = 2 if rows == "128" else 3 if block and not persistent else 4
    return dict(rows=int(rows), tokens=int(tokens), tile_k=256 * int(warps_k), persistent=bool(persistent),
                resident=resident)


def decode_tile(facts: dict) -> tuple:
    """A decode variant's facts as the bound decode model takes them (``_C.scaled_gemm_predicted_steps``)."""
    return facts["rows"], facts["tokens"], facts["tile_k"], facts["persistent"], facts["resident"]


def decode_pick(header: dict, row: dict) -> tuple[str, float] | None:
    """The model's (variant/splits, measured us) among a row's 8-token decode variants, and the best's us."""
    sweep = {}
    for key, us in row["us"].items():
        name, _, splits = key.rpartition("/")
        facts = decode_facts(header, name)
        if facts and facts["tokens"] == 8:
            sweep[name, int(splits)] = (facts, us)
    if not sweep:
        return None
    sm_count, (m, n, k) = header.get("sm_count", 132), (row["m"], row["n"], row["k"])
    own = {}  # each variant at the split count the choice gives it, where the row timed that
    for name, facts in {name: facts for (name, _), (facts, _) in sweep.items()}.items():
        splits = _C.scaled_gemm_decode_splits(decode_tile(facts), m, n, k, sm_count)
        if (name, splits) in sweep:
            own[name] = (_C.scaled_gemm_predicted_steps(decode_tile(facts), m, n, k, splits, sm_count), splits)
    name, (steps, splits) = min(own.items(), key=lambda item: item[1])
    return sweep[name, splits][1], min(us for _, us in sweep.values())


def cutlass_share_quality(log: Path, share: int) -> list[float]:
    """The choice's CUTLASS-or-decode rule at 1-16 tokens (``_C.scaled_gemm_cutlass_fills_the_gpu``) with the share
    of the SMs overridden, on a log's rows: the best variant's time over that of the fastest CUTLASS variant where
    the rule takes them (their 64-row tiles times the decode variants' 8-token tiles occupy 1 / share of the SMs),
    else of the decode model's pick."""
    header, rows = read_jsonl(log)
    sm_count = header.get("sm_count", 132)
    scale_kind = _C.scale_kinds().index("block128" if header.get("scales") == "block" else "row")
    shares = {"cutlass_fill_share_row": share, "cutlass_fill_share_block128": share}
    out = []
    for row in rows:
        pick = decode_pick(header, row) if row["m"] <= 16 else None
        cutlass = [us for name, us in row["us"].items() if "_swapab_" in name and "/" in name]
        if pick is None or not cutlass:
            continue
        takes_cutlass = _C.scaled_gemm_cutlass_fills_the_gpu(64, 8, row["m"], row["n"], scale_kind, sm_count, shares)
        out.append(min(us for name, us in row["us"].items() if "/" in name) / (min(cutlass) if takes_cutlass
                                                                               else pick[0]))
    return out


def replay_quality(log: Path) -> dict[tuple[int, int], list[float]]:
    """Per token range (1-8, 9-16): best / chosen time of the 8-token decode variants and splits on a log's rows."""
    header, rows = read_jsonl(log)
    out = {}
    for low, high in ((1, 8), (9, 16)):
        picks = [decode_pick(header, r) for r in rows if low <= r["m"] <= high]
        out[low, high] = [best / us for us, best in filter(None, picks)]
    return out


# ---- block scales past 64 tokens: the CUTLASS choice ------------------------------------------------------

# Each GPU's peak DRAM bandwidth as the choice derives it from the device's memory clock and bus width (bytes / us).
PEAK_BYTES_PER_US = {"NVIDIA H100 80GB HBM3": 3.35e6, "NVIDIA H200": 4.8e6}
UNSWAPPED_TILE = re.compile(r"_block128_(cooperative|pingpong)_(\d+)x(\d+)x(\d+)_(\d+)x(\d+)$")


def prefill_rank(name: str, row: dict, header: dict) -> tuple[float, int]:
    """How the choice orders an unswapped block-scaled variant (tokens along tile M): the CUTLASS wave model's
    microseconds (``_C.scaled_gemm_cutlass_cost_us``), then its cluster (``_C.scaled_gemm_cluster_rank``)."""
    schedule, *shape = UNSWAPPED_TILE.search(name).groups()
    tile, cluster = tuple(map(int, shape[:3])), tuple(map(int, shape[3:]))
    cost = _C.scaled_gemm_cutlass_cost_us(tile, False, schedule, row["m"], row["n"], row["k"],
                                          _C.scale_kinds().index("block128"), header.get("sm_count", 132),
                                          PEAK_BYTES_PER_US[header["device"]])
    return cost, _C.scaled_gemm_cluster_rank(cluster, False, row["m"], row["n"])


def prefill_quality(log: Path) -> list[float]:
    """Per row of a block-scaled log past 64 tokens: the best unswapped variant's time over the choice's."""
    header, rows = read_jsonl(log)
    out = []
    for row in rows:
        timed = {key: us for key, us in row["us"].items() if UNSWAPPED_TILE.search(key.rpartition("/")[0])}
        if row["m"] > VARIANT_M and timed:
            pick = min(timed, key=lambda key: prefill_rank(key.rpartition("/")[0], row, header))
            out.append(min(timed.values()) / timed[pick])
    return out


# ---- a fitted table (docs/scaled_gemm.md, "Tables") ------------------------------------------------------

CUTLASS_TILE = re.compile(r"_swapab_\w+?_(\d+)x(\d+)x(\d+)_(\d+)x(\d+)$")


def table_config(header: dict, key: str) -> tuple | None:
    """(tile, cluster, decomposition, splits) of a logged ``variant/splits`` as a table's mapping takes it: the
    swapped CUTLASS variants unsplit, the decode ones (tile: rows x tokens x K per loop step) at their splits; None
    for the other methods."""
    name, _, splits = key.rpartition("/")
    facts = decode_facts(header, name)
    if facts:
        s = int(splits)
        return (facts["rows"], facts["tokens"], facts["tile_k"]), (1, 1), "split_k" if s > 1 else "data_parallel", s
    found = CUTLASS_TILE.search(name)
    if not found or splits != "1":
        return None
    tm, tn, tk, cm, cn = map(int, found.groups())
    return (tm, tn, tk), (cm, cn), "data_parallel", 1


def table_coordinates(config: tuple, row: dict, sm_count: int) -> tuple[int, int, int, int]:
    """(G, L, C, waves) of a row under a ``table_config``, by the tables' mapping (swapped: weight rows along M)."""
    tile, cluster, decomposition, splits = config
    return model.map_problem(tile, cluster, True, row["m"], row["n"], row["k"], decomposition, splits, sm_count)


def fitted_table(header: dict, rows: list[dict]) -> tuple[dict, float]:
    """The shared wave model (wavetune.tuning.model: one bilinear fit per wave regime of each config, the memory
    floor) fitted to every variant and split the rows of a sweep timed: ``({key: (config, waves)}, bytes/us)``."""
    sm_count = header.get("sm_count", 132)
    keys = set.intersection(*(set(r["us"]) for r in rows))
    configs = {key: config for key in sorted(keys) if (config := table_config(header, key))}
    memory = max(fp8_bytes(r) / min(r["us"][key] for key in configs) for r in rows)
    fits = {}
    for key, config in configs.items():
        G, L, _, W = zip(*(table_coordinates(config, r, sm_count) for r in rows))
        fits[key] = (config, model.fit_config(G, L, W, [r["us"][key] for r in rows]))
    return fits, memory


def fp8_bytes(row: dict) -> int:
    """A problem's operand bytes: e4m3 activations and weights, a 2-byte output."""
    return row["m"] * row["k"] + row["n"] * row["k"] + 2 * row["m"] * row["n"]


def table_pick(fits: dict, memory: float, sm_count: int, row: dict) -> str:
    """The fitted table's choice for a row: the least predicted of its configs the row timed."""
    def predicted(key: str) -> float:
        config, waves = fits[key]
        G, L, C, w = table_coordinates(config, row, sm_count)
        return max(model.predict(waves, G, L, w, C), fp8_bytes(row) / memory)

    return min((key for key in fits if key in row["us"]), key=predicted)


def table_quality(design: Path, held_out: Path, max_m: int = VARIANT_M) -> tuple[list[float], list[float]]:
    """Per row of ``held_out`` up to ``max_m`` tokens: the best timed config's time over that of a table fitted
    to ``design``'s rows (``fitted_table``) and over that of the shipped choice (``wavetune_rowwise``)."""
    header, rows = read_jsonl(design)
    fits, memory = fitted_table(header, [r for r in rows if r["m"] <= max_m])
    held_header, held_rows = read_jsonl(held_out)
    table, shipped = [], []
    for row in (r for r in held_rows if r["m"] <= max_m and "wavetune_rowwise" in r["us"]):
        best = min(row["us"][key] for key in fits if key in row["us"])
        table.append(best / row["us"][table_pick(fits, memory, held_header.get("sm_count", 132), row)])
        shipped.append(best / row["us"]["wavetune_rowwise"])
    return table, shipped

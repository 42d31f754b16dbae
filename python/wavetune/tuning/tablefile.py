"""Writing and reading wavetune table files (docs/tables.md, version 4).

``write_table`` validates everything first, then writes the file atomically (a temporary file in the
same directory, fsynced, then ``os.replace``), so a reader sees the old table or the new one, never a
partial file. The C++ lookup engine is the reader that selects; ``read_table`` gives a table back as
``write_table``'s arguments, for tools that rewrite one (deployment tuning adds exact ranges to a copy).

Standalone on purpose: standard library only (numpy scalars and arrays are accepted as values), and
nothing from the wavetune package, so it loads without the native extension.
"""

from __future__ import annotations

import math
import operator
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = [
    "DECOMPOSITIONS",
    "MAGIC",
    "RASTERS",
    "REQUIRED_META",
    "SWIZZLES",
    "fnv1a64",
    "format_table",
    "read_table",
    "write_table",
]

MAGIC = "wavetune-table 4"
REQUIRED_META = ("gpu_name", "sm_count", "config_space_hash", "wavetune_version", "cuda_version", "created")
DECOMPOSITIONS = ("data_parallel", "split_k", "stream_k")
RASTERS = ("heuristic", "along_m", "along_n")
SWIZZLES = (1, 2, 4, 8)
DTYPES = ("bf16", "fp16")
B_LAYOUTS = ("col", "row")

CONFIG_KEYS = ("variant", "decomposition", "splits")  # plus an optional "id" (must equal the position)
EXACT_KEYS = ("dtype", "b_layout", "m_first", "m_last", "n", "k", "config_id", "raster", "max_swizzle", "us")
PRIOR_KEYS = ("config_id", "max_m", "margin")

MAX_EXTENT = 2**31 - 1  # m_first, m_last, n, k of an exact record

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK64 = 0xFFFFFFFFFFFFFFFF

# A variant name starts with "<dtype>_b<layout>_" (config_space.Variant.name).
_VARIANT_PREFIX = re.compile(r"^(bf16|fp16)_b(col|row)_")


def fnv1a64(data: bytes) -> int:
    """FNV-1a 64-bit hash (offset basis 0xcbf29ce484222325, prime 0x100000001b3)."""
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK64
    return h


# ----------------------------------------------------------------------------------------------------
# Validation helpers
# ----------------------------------------------------------------------------------------------------


def _int(value, what: str, minimum: int | None = None) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    try:
        out = operator.index(value)
    except TypeError:
        raise ValueError(f"{what} must be an integer, got {value!r}") from None
    if minimum is not None and out < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {out}")
    return out


def _float(value, what: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(out):
        raise ValueError(f"{what} must be finite, got {out!r}")
    return out


def _token(value, what: str) -> str:
    """A single field: a non-empty string without whitespace."""
    if not isinstance(value, str) or not value or any(ch.isspace() for ch in value):
        raise ValueError(f"{what} must be a non-empty string without spaces, got {value!r}")
    return value


def _choice(value, choices: Sequence, what: str):
    if isinstance(value, bool) or value not in choices:
        raise ValueError(f"{what} must be one of {', '.join(map(str, choices))}; got {value!r}")
    return value


def _meta_lines(meta: Mapping) -> list[str]:
    if not isinstance(meta, Mapping):
        raise ValueError("meta must be a dict")
    missing = [key for key in REQUIRED_META if key not in meta]
    if missing:
        raise ValueError(f"meta is missing required key(s): {', '.join(missing)}")
    values: dict[str, str] = {}
    for key, value in meta.items():
        if not isinstance(key, str) or not key or any(ch.isspace() for ch in key):
            raise ValueError(f"meta key {key!r} must be a non-empty string without spaces")
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, float):
            value = repr(value)
        text = str(value)
        if not text or text != text.strip() or "\n" in text or "\r" in text:
            raise ValueError(
                f"meta {key}: the value must be non-empty, on one line and without leading or trailing "
                f"spaces, got {text!r}"
            )
        values[key] = text
    if not re.fullmatch(r"[0-9]+", values["sm_count"]) or int(values["sm_count"]) < 1:
        raise ValueError(f"meta sm_count must be a positive integer, got {values['sm_count']!r}")
    if not re.fullmatch(r"[0-9a-f]{16}", values["config_space_hash"]):
        raise ValueError(
            f"meta config_space_hash must be 16 lower-case hex digits, got {values['config_space_hash']!r}"
        )
    if not re.fullmatch(r"[0-9]+", values["cuda_version"]):
        raise ValueError(f"meta cuda_version must be an integer such as 13000, got {values['cuda_version']!r}")
    order = list(REQUIRED_META) + sorted(key for key in values if key not in REQUIRED_META)
    return [f"meta {key} {values[key]}\n" for key in order]


def _config_lines(configs: Sequence[Mapping], family: str = "gemm") -> tuple[list[str], list[str]]:
    if not isinstance(configs, Sequence) or isinstance(configs, (str, bytes)):
        raise ValueError("configs must be a list of dicts")
    if not configs:
        raise ValueError("a table needs at least one config")
    lines, variants, seen = [], [], {}
    for position, config in enumerate(configs):
        where = f"config {position}"
        if not isinstance(config, Mapping):
            raise ValueError(f"{where} must be a dict with keys {', '.join(CONFIG_KEYS)}")
        unknown = sorted(map(str, set(config) - set(CONFIG_KEYS) - {"id"}))
        if unknown:
            known = ", ".join(("id", *CONFIG_KEYS))
            raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {known})")
        if "id" in config and _int(config["id"], f"{where} id") != position:
            raise ValueError(
                f"config ids must be contiguous 0..n-1 in list order: the config at position {position} "
                f"has id {config['id']}"
            )
        for key in ("variant", "decomposition"):
            if key not in config:
                raise ValueError(f"{where} has no {key!r}")
        variant = _token(config["variant"], f"{where} variant")
        decomposition = _choice(config["decomposition"], DECOMPOSITIONS, f"{where} decomposition")
        splits = _int(config.get("splits", 1), f"{where} splits", 1)
        if decomposition != "split_k" and splits != 1:
            raise ValueError(f"{where}: splits must be 1 unless the decomposition is split_k (got {splits})")
        if family == "attention" and decomposition == "stream_k":
            raise ValueError(f"{where}: the attention family splits the keys (split_k), it has no stream_k")
        if family != "attention" and variant.endswith("_persistent") and decomposition != "data_parallel":
            raise ValueError(
                f"{where}: {variant} has the persistent tile scheduler and takes data_parallel only, not "
                f"{decomposition} (split_k and stream_k need a *_stream_k variant)"
            )
        key = (variant, decomposition, splits)
        if key in seen:
            raise ValueError(f"{where} duplicates config {seen[key]} ({variant} {decomposition} {splits})")
        seen[key] = position
        variants.append(variant)
        lines.append(f"config {position} {variant} {decomposition} {splits}\n")
    return lines, variants


def _config_id(value, n_configs: int, what: str) -> int:
    cid = _int(value, what)
    if not 0 <= cid < n_configs:
        raise ValueError(f"{what} {cid} is out of range (configs 0..{n_configs - 1})")
    return cid


def _wave_lines(waves: Mapping, n_configs: int) -> list[str]:
    if not isinstance(waves, Mapping):
        raise ValueError("waves must be a dict {config_id: {w: [a, b, c, d]}}")
    per_config: dict[int, list[str]] = {}
    for cid_raw, fits in waves.items():
        cid = _config_id(cid_raw, n_configs, "waves: config id")
        if cid in per_config:
            raise ValueError(f"waves: config {cid} appears twice")
        if not isinstance(fits, Mapping):
            raise ValueError(f"waves[{cid}] must be a dict {{w: [a, b, c, d]}}")
        rows: dict[int, str] = {}
        for w_raw, coef in fits.items():
            w = _int(w_raw, f"waves[{cid}]: wave", 1)
            if w in rows:
                raise ValueError(f"waves[{cid}]: wave {w} appears twice")
            try:
                values = list(coef)
            except TypeError:
                raise ValueError(f"waves[{cid}][{w}] must be 4 coefficients a, b, c, d, got {coef!r}") from None
            if len(values) != 4:
                raise ValueError(f"waves[{cid}][{w}] must be 4 coefficients a, b, c, d, got {len(values)}")
            a, b, c, d = (_float(x, f"waves[{cid}][{w}] coefficient {n}") for x, n in zip(values, "abcd"))
            rows[w] = f"wave {cid} {w} {a!r} {b!r} {c!r} {d!r}\n"
        if not rows:
            raise ValueError(f"config {cid} has no wave (every config needs at least one)")
        per_config[cid] = [rows[w] for w in sorted(rows)]
    without = [cid for cid in range(n_configs) if cid not in per_config]
    if without:
        raise ValueError(f"config(s) {', '.join(map(str, without))} have no wave (every config needs at least one)")
    return [line for cid in range(n_configs) for line in per_config[cid]]


def _micro_lines(micro: Mapping | None, n_configs: int) -> list[str]:
    if micro is None:
        return []
    if not isinstance(micro, Mapping):
        raise ValueError("micro must be a dict {config_id: [(min_wave, raster, max_swizzle), ...]}")
    per_config: dict[int, list[str]] = {}
    for cid_raw, rules in micro.items():
        cid = _config_id(cid_raw, n_configs, "micro: config id")
        if cid in per_config:
            raise ValueError(f"micro: config {cid} appears twice")
        rows: dict[int, str] = {}
        for rule in rules:
            try:
                w_raw, raster, swizzle = rule
            except (TypeError, ValueError):
                raise ValueError(
                    f"micro[{cid}]: a rule must be (min_wave, raster, max_swizzle), got {rule!r}"
                ) from None
            w = _int(w_raw, f"micro[{cid}]: min_wave", 1)
            if w in rows:
                raise ValueError(f"micro[{cid}]: two rules for min_wave {w}")
            _choice(raster, RASTERS, f"micro[{cid}] raster")
            swizzle = _choice(_int(swizzle, f"micro[{cid}] max_swizzle"), SWIZZLES, f"micro[{cid}] max_swizzle")
            rows[w] = f"micro {cid} {w} {raster} {swizzle}\n"
        per_config[cid] = [rows[w] for w in sorted(rows)]
    return [line for cid in sorted(per_config) for line in per_config[cid]]


def _exact_lines(exact: Sequence[Mapping] | None, variants: list[str]) -> list[str]:
    if exact is None:
        return []
    rows: dict[tuple, str] = {}
    for position, record in enumerate(exact):
        where = f"exact record {position}"
        if not isinstance(record, Mapping):
            raise ValueError(f"{where} must be a dict with keys {', '.join(EXACT_KEYS)}")
        missing = [key for key in EXACT_KEYS if key not in record]
        unknown = sorted(map(str, set(record) - set(EXACT_KEYS)))
        if missing:
            raise ValueError(f"{where}: missing key(s) {', '.join(missing)} (keys: {', '.join(EXACT_KEYS)})")
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)} (keys: {', '.join(EXACT_KEYS)})")
        dtype = _choice(record["dtype"], DTYPES, f"{where} dtype")
        layout = _choice(record["b_layout"], B_LAYOUTS, f"{where} b_layout")
        m_first, m_last, n, k = (_int(record[key], f"{where} {key}", 1) for key in ("m_first", "m_last", "n", "k"))
        if max(m_last, n, k) > MAX_EXTENT:
            raise ValueError(f"{where}: m_last, n and k must be at most 2^31-1, got {m_last} {n} {k}")
        if m_first > m_last:
            raise ValueError(f"{where}: m_first {m_first} is above m_last {m_last}")
        cid = _config_id(record["config_id"], len(variants), f"{where} config_id")
        parsed = _VARIANT_PREFIX.match(variants[cid])
        if parsed and parsed.groups() != (dtype, layout):
            raise ValueError(
                f"{where}: config {cid} ({variants[cid]}) does not take dtype {dtype} with B layout {layout}"
            )
        raster = _choice(record["raster"], RASTERS, f"{where} raster")
        swizzle = _choice(_int(record["max_swizzle"], f"{where} max_swizzle"), SWIZZLES, f"{where} max_swizzle")
        us = _float(record["us"], f"{where} us")
        if us <= 0:
            raise ValueError(f"{where} us must be > 0, got {us!r}")
        key = (dtype, layout, n, k, m_first, m_last)
        if key in rows:
            raise ValueError(f"{where} repeats M {m_first}..{m_last} of {dtype} {layout} N={n} K={k}")
        rows[key] = (
            f"exact {dtype} {layout} {m_first} {m_last} {n} {k} {cid} {raster} {swizzle} {us!r}\n"
        )
    keys = sorted(rows)
    for before, after in zip(keys, keys[1:]):
        if before[:4] == after[:4] and after[4] <= before[5]:
            raise ValueError(f"exact records: M {before[4]}..{before[5]} and M {after[4]}..{after[5]} of "
                             f"{' '.join(map(str, before[:2]))} N={before[2]} K={before[3]} overlap")
    return [rows[key] for key in keys]


def _prior_lines(priors: Sequence[Mapping] | None, variants: list[str]) -> list[str]:
    if priors is None:
        return []
    rows: dict[tuple, str] = {}
    for position, record in enumerate(priors):
        where = f"prior record {position}"
        if not isinstance(record, Mapping) or set(record) != set(PRIOR_KEYS):
            raise ValueError(f"{where} must be a dict with exactly the keys {', '.join(PRIOR_KEYS)}, got {record!r}")
        cid = _config_id(record["config_id"], len(variants), f"{where} config_id")
        max_m = _int(record["max_m"], f"{where} max_m", 0)
        if max_m > MAX_EXTENT:
            raise ValueError(f"{where}: max_m must be at most 2^31-1, got {max_m}")
        margin = _float(record["margin"], f"{where} margin")
        if margin < 0:
            raise ValueError(f"{where} margin must be >= 0, got {margin!r}")
        # The dtype and layout the prior serves are its variant's; one prior per (dtype, layout, max_m).
        parsed = _VARIANT_PREFIX.match(variants[cid])
        key = (parsed.groups() if parsed else (variants[cid],), max_m or MAX_EXTENT + 1)
        if key in rows:
            raise ValueError(f"{where} repeats max_m {max_m} for the data of config {cid} ({variants[cid]})")
        rows[key] = f"prior {cid} {max_m} {margin!r}\n"
    return [rows[key] for key in sorted(rows)]


def _calibration_lines(calibration: Mapping | None, n_configs: int) -> list[str]:
    rows: dict[int, str] = {}
    for config_id, coef in (calibration or {}).items():
        cid = _config_id(config_id, n_configs, "calibration config id")
        if len(coef) != 4:
            raise ValueError(f"calibration of config {cid} must be 4 coefficients, got {coef!r}")
        values = [_float(x, f"calibration coefficient of config {cid}") for x in coef]
        rows[cid] = f"calibration {cid} {' '.join(map(repr, values))}\n"
    return [rows[cid] for cid in sorted(rows)]


# CUDA keeps at most this many CTAs resident per SM (compute capability 8.0 to 9.0).
MAX_CTAS_PER_SM = 32


def _occupancy_lines(occupancy: Mapping | None, n_configs: int) -> list[str]:
    rows: dict[int, str] = {}
    for config_id, ctas in (occupancy or {}).items():
        cid = _config_id(config_id, n_configs, "occupancy config id")
        ctas = _int(ctas, f"occupancy of config {cid}", 1)
        if ctas > MAX_CTAS_PER_SM:
            raise ValueError(f"occupancy of config {cid} must be at most {MAX_CTAS_PER_SM} CTAs per SM, got {ctas}")
        if ctas > 1:  # one CTA per SM is the default: no record
            rows[cid] = f"occupancy {cid} {ctas}\n"
    return [rows[cid] for cid in sorted(rows)]


# Rate records: the record type -> its key in ``read_table``'s dict and ``write_table``'s arguments.
_RATE_KEYS = {"memory": "memory_bytes_per_us", "traffic": "traffic_bytes_per_us", "compute": "compute_flop_per_us"}


def _rate_lines(kind: str, per_us) -> list[str]:
    """The ``memory`` or ``traffic`` record of a rate in bytes per us, or the ``compute`` record of one in
    flop per us (None: no record)."""
    if per_us is None:
        return []
    name = _RATE_KEYS[kind]
    value = _float(per_us, name)
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return [f"{kind} {value!r}\n"]


# ----------------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------------


def format_table(
    meta: Mapping,
    configs: Sequence[Mapping],
    waves: Mapping,
    micro: Mapping | None = None,
    exact: Sequence[Mapping] | None = None,
    priors: Sequence[Mapping] | None = None,
    memory_bytes_per_us: float | None = None,
    traffic_bytes_per_us: float | None = None,
    calibration: Mapping | None = None,
    compute_flop_per_us: float | None = None,
    occupancy: Mapping | None = None,
) -> bytes:
    """The bytes of a table file (validated; see ``write_table``), checksum line included."""
    meta_lines = _meta_lines(meta)
    config_lines, variants = _config_lines(configs, str(meta.get("family", "gemm")))
    body = [MAGIC + "\n", *meta_lines, *config_lines, *_wave_lines(waves, len(variants)),
            *_micro_lines(micro, len(variants)), *_exact_lines(exact, variants),
            *_prior_lines(priors, variants), *_calibration_lines(calibration, len(variants)),
            *_occupancy_lines(occupancy, len(variants)),
            *_rate_lines("memory", memory_bytes_per_us),
            *_rate_lines("traffic", traffic_bytes_per_us),
            *_rate_lines("compute", compute_flop_per_us)]  # fmt: skip
    data = "".join(body).encode("utf-8")
    return data + f"checksum {fnv1a64(data):016x}\n".encode("ascii")


def read_table(path: str | os.PathLike) -> dict:
    """A table file as ``write_table``'s keyword arguments: ``write_table(out, **read_table(path))``
    writes the same bytes. Checks the version and the checksum and converts the fields; the values
    themselves are checked by ``write_table`` and by the C++ loader.

    Raises ValueError naming the file (and the line) when it is not a readable version-4 table: tables of
    earlier versions must be re-tuned.
    """
    data = Path(path).read_bytes()
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines[-1] == "":
        lines.pop()
    first = lines[0] if lines else ""
    if first != MAGIC:
        what = f"version {first[15:]!r}" if first.startswith("wavetune-table ") else f"first line {first[:40]!r}"
        raise ValueError(f"{path}: not a {MAGIC} file ({what}): re-tune with python -m wavetune tune")
    if len(lines) < 2 or not lines[-1].startswith("checksum "):
        raise ValueError(f"{path}: no checksum line: the file is truncated")
    body = data[: data.rindex(b"\nchecksum ") + 1]
    if lines[-1] != f"checksum {fnv1a64(body):016x}":
        raise ValueError(f"{path}: checksum mismatch: the file is corrupt, truncated or was edited by hand")

    table: dict = {"meta": {}, "configs": [], "waves": {}, "micro": {}, "exact": [], "priors": [],
                   "calibration": {}, "occupancy": {}, **dict.fromkeys(_RATE_KEYS.values())}  # fmt: skip
    for number, line in enumerate(lines[1:-1], start=2):
        if line and not line.startswith("#"):
            try:
                _read_record(line, table)
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: malformed record {line[:60]!r} ({exc})") from None
    return table


# Fields after the record type, per record (meta: a key and the rest of the line).
_RECORD_FIELDS = {"config": 4, "wave": 6, "micro": 4, "exact": len(EXACT_KEYS), "prior": 3, "calibration": 5,
                  "occupancy": 2,
                  **dict.fromkeys(_RATE_KEYS, 1)}


def _read_record(line: str, table: dict) -> None:
    kind, _, rest = line.partition(" ")
    if kind == "meta":
        key, _, value = rest.partition(" ")
        table["meta"][key] = value
        return
    if kind not in _RECORD_FIELDS:
        raise ValueError(f"unknown record type {kind!r}")
    f = rest.split(" ")
    if len(f) != _RECORD_FIELDS[kind]:
        raise ValueError(f"{len(f)} fields after {kind!r}, expected {_RECORD_FIELDS[kind]}")
    if kind == "config":
        table["configs"].append({"id": int(f[0]), "variant": f[1], "decomposition": f[2], "splits": int(f[3])})
    elif kind == "wave":
        table["waves"].setdefault(int(f[0]), {})[int(f[1])] = [float(x) for x in f[2:]]
    elif kind == "micro":
        table["micro"].setdefault(int(f[0]), []).append((int(f[1]), f[2], int(f[3])))
    elif kind == "exact":
        record = dict(zip(EXACT_KEYS, f))
        for key in ("m_first", "m_last", "n", "k", "config_id", "max_swizzle"):
            record[key] = int(record[key])
        table["exact"].append({**record, "us": float(record["us"])})
    elif kind == "prior":
        table["priors"].append({"config_id": int(f[0]), "max_m": int(f[1]), "margin": float(f[2])})
    elif kind == "calibration":
        table["calibration"][int(f[0])] = [float(x) for x in f[1:]]
    elif kind == "occupancy":
        table["occupancy"][int(f[0])] = int(f[1])
    else:
        table[_RATE_KEYS[kind]] = float(f[0])


def write_table(
    path: str | os.PathLike,
    meta: Mapping,
    configs: Sequence[Mapping],
    waves: Mapping,
    micro: Mapping | None,
    exact: Sequence[Mapping] | None,
    priors: Sequence[Mapping] | None = None,
    memory_bytes_per_us: float | None = None,
    traffic_bytes_per_us: float | None = None,
    calibration: Mapping | None = None,
    compute_flop_per_us: float | None = None,
    occupancy: Mapping | None = None,
) -> None:
    """Write a table file in the docs/tables.md format, atomically.

    - ``meta``: ``{key: value}``; the required keys (gpu_name, sm_count, config_space_hash,
      wavetune_version, cuda_version, created) must be present; values are written with ``str`` (floats
      with ``repr``) and must fit on one line without leading or trailing spaces. sm_count and
      cuda_version must be integers, config_space_hash 16 lower-case hex digits.
    - ``configs``: ``[{"variant": name, "decomposition": "data_parallel"|"split_k"|"stream_k",
      "splits": int}]``; the config id is the list position (an optional ``"id"`` key must equal
      it); splits defaults to 1 and must be 1 unless split_k; a ``*_persistent`` variant takes
      data_parallel only; no other keys; no duplicates.
    - ``waves``: ``{config_id: {w: [a, b, c, d]}}``; every config needs at least one wave.
    - ``micro``: ``{config_id: [(min_wave, raster, max_swizzle), ...]}`` (min_wave >= 1, one rule per
      min_wave; raster heuristic, along_m or along_n; max_swizzle 1, 2, 4 or 8); configs without rules
      may be absent. None: no rules.
    - ``exact``: ``[{"dtype", "b_layout", "m_first", "m_last", "n", "k", "config_id", "raster",
      "max_swizzle", "us"}]``: the best config for M in m_first..m_last of one (dtype, b_layout, n, k);
      each of m_first <= m_last, n, k in 1..2^31-1, us > 0 (the latency at m_last); the ranges of one
      (dtype, b_layout, n, k) do not overlap; the config's variant must take that dtype and B layout
      (checked when its name starts with ``<dtype>_b<layout>_``). None: no records.
    - ``priors``: ``[{"config_id", "max_m", "margin"}]``: the config the table picks for problems of its
      dtype and B layout with M <= max_m (0: any M) unless the model predicts another more than
      ``margin`` (a fraction, >= 0) faster; one per (dtype, B layout, max_m). None: no records.
    - ``memory_bytes_per_us``: the fastest operand traffic measured while tuning (> 0), the floor under
      every prediction (docs/tables.md). None: no record.
    - ``traffic_bytes_per_us``: the fastest tile traffic measured while tuning (> 0), the floor under
      each config's prediction (docs/tables.md). None: no record.
    - ``calibration``: ``{config_id: [c0, c1, c2, c3]}``: that config's prediction is multiplied by
      ``exp(c0 + c1 ln M + c2 ln N + c3 ln K)`` (docs/tables.md); configs without one keep factor 1.
    - ``compute_flop_per_us``: the fastest arithmetic measured while tuning (> 0), the floor under every
      calibrated prediction (docs/tables.md). None: no record.
    - ``occupancy``: ``{config_id: ctas_per_sm}``: CTAs of the config's variant resident per SM of the GPU (1 to
      32), which multiplies its capacity in the mapping; 1 (the default) writes no record. None: no records.

    Layout (deterministic, so equal inputs give equal bytes): the magic line; meta with the required
    keys in the order above, then the others sorted by key; config lines in id order; wave lines by
    config id then w; micro lines by config id then min_wave; exact lines sorted by (dtype, b_layout, n,
    k, m_first); prior lines by (dtype, B layout, max_m with 0 last); calibration lines by config id; occupancy lines by config id; the memory line, the traffic line, the compute line; then ``checksum <16 hex digits>``, the
    FNV-1a 64 of all preceding bytes. Floats are written with ``repr`` (round-trips), integers in
    decimal. No comments are written.

    Raises ValueError naming the offending entry before anything touches the file system. The file is
    written to a temporary file in the same directory and moved into place with ``os.replace``; on any
    error the temporary file is removed and an existing table is left as it was.
    """
    data = format_table(meta, configs, waves, micro, exact, priors, memory_bytes_per_us, traffic_bytes_per_us,
                        calibration, compute_flop_per_us, occupancy)
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        try:
            mode = os.stat(path).st_mode & 0o777
        except FileNotFoundError:
            mode = 0o644
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            fd = -1
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if fd != -1:
            os.close(fd)
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


"""Grouped tables without a GPU: the fit from grouped benchmark logs, the file names, and the C++ Selector
over a grouped table (the expert count as `groups`, the family checks) where a grouped variant is compiled."""

from __future__ import annotations

import json
import re
from collections import namedtuple

import pytest

import wavetune
from wavetune import _C, families
from wavetune.families.grouped_gemm import mapping as grouped_mapping
from wavetune.tuning import model
from wavetune.tuning import tablefile
from wavetune.families.grouped_gemm import tuning
from wavetune.tuning import fitting
from wavetune.runtime import tables

SM_COUNT = 132
# What the fit reads of a variant. Its schedule says whether its CTAs per SM are read from its kernel (multistage,
# on a GPU); these fits map every variant with one, as a Hopper kernel's.
Shape = namedtuple("Shape", "name dtype tile cluster swap_ab schedule", defaults=("pingpong",))
NARROW = Shape("grouped_bf16_swapab_pingpong_64x16x128_1x1", "bf16", (64, 16, 128), (1, 1), True)
WIDE = Shape("grouped_bf16_cooperative_128x256x64_1x1", "bf16", (128, 256, 64), (1, 1), False)

GROUPED = families.get("grouped_gemm")


def cases(us_of, variants=(NARROW, WIDE)):
    """Cases over token counts and shapes, each variant's time us_of(variant, coordinates, case)."""
    out = []
    for experts, n, k in ((8, 28672, 4096), (128, 1536, 2048), (64, 2048, 1408), (16, 12800, 4096)):
        for rows in (1, 7, 16, 100, 640, 2000, 8192, 30000, 65536):
            case = {"rows": rows, "experts": experts, "n": n, "k": k, "torch_us": 1.0}
            case["variants_us"] = {v.name: us_of(v, tuning.grouped_coordinates(v, case, SM_COUNT), case)
                                   for v in variants}
            out.append(case)
    return out


def synthetic_us(v, coords, case):
    """The narrow swap-AB tile wins at few rows per expert, the wide tile above about 16."""
    rows = tuning.group_rows(case)
    return 3.0 + 0.5 * rows if v is NARROW else 10.0 + 0.05 * rows


def test_grouped_priors_are_each_regimes_winner():
    measured = cases(synthetic_us)
    assert tuning.grouped_priors(measured) == [(NARROW.name, 16), (WIDE.name, 0)]
    assert tuning.grouped_priors(measured, edges=(4,)) == [(NARROW.name, 4), (WIDE.name, 0)]
    only_wide = [dict(c, variants_us={WIDE.name: c["variants_us"][WIDE.name]}) for c in measured]
    assert tuning.grouped_priors(only_wide) == [(WIDE.name, 0)]


def test_fit_grouped_keeps_the_priors_variants_with_floors_and_calibration():
    measured = cases(synthetic_us)
    table = tuning.fit_grouped(measured, [NARROW, WIDE], SM_COUNT)
    assert [c["variant"] for c in table["configs"]] == [NARROW.name, WIDE.name]
    assert table["priors"] == [{"config_id": 0, "max_m": 16, "margin": tuning.GROUPED_PRIOR_MARGIN},
                               {"config_id": 1, "max_m": 0, "margin": tuning.GROUPED_PRIOR_MARGIN}]
    # The floors are the fastest rates measured: no case moves its bytes faster than the memory record.
    assert all(tuning.grouped_bytes(c) / min(c["variants_us"].values()) <= table["memory_bytes_per_us"] * (1 + 1e-12)
               for c in measured)
    assert set(table["calibration"]) == {0, 1} and all(len(c) == 4 for c in table["calibration"].values())
    assert set(table["waves"]) == {0, 1} and not tuning.fit_grouped(measured, [NARROW, WIDE], SM_COUNT,
                                                                     calibrate=False)["calibration"]
    # Variants that win no regime are left out (the default build compiles what tables name).
    assert [c["variant"] for c in tuning.fit_grouped(measured, [WIDE], SM_COUNT)["configs"]] == [WIDE.name]


def test_grouped_bytes_count_the_busy_experts_weights():
    case = {"rows": 3, "experts": 128, "n": 1536, "k": 2048}
    assert tuning.grouped_bytes(case) == 2.0 * (3 * 2048 + 3 * 1536 * 2048 + 3 * 1536)
    assert tuning.grouped_bytes(dict(case, rows=1000)) == 2.0 * (1000 * 2048 + 128 * 1536 * 2048 + 1000 * 1536)


def test_benchmark_log_refuses_mixed_gpus_and_empty_logs(tmp_path):
    a, b, empty = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "empty.jsonl"
    a.write_text(json.dumps({"gpu": "NVIDIA H100 80GB HBM3", "sm_count": 132}) + "\n" + json.dumps({"rows": 1}) + "\n")
    b.write_text(json.dumps({"gpu": "NVIDIA H200", "sm_count": 132}) + "\n")
    empty.write_text("")
    header, measured = fitting.benchmark_log([a])
    assert header["sm_count"] == 132 and measured == [{"rows": 1}]
    with pytest.raises(ValueError, match="measured on a NVIDIA H200"):
        fitting.benchmark_log([a, b])
    with pytest.raises(ValueError, match="empty log"):
        fitting.benchmark_log([empty])
    with pytest.raises(ValueError, match="no measurements"):
        fitting.benchmark_log([b])


def test_table_file_names_per_family(monkeypatch):
    assert tables.table_file_name("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3.wtt"
    assert tables.table_file_name("NVIDIA H100 80GB HBM3", "grouped_gemm") == "nvidia-h100-80gb-hbm3.grouped_gemm.wtt"
    assert tables.table_file_name("NVIDIA H200", "attention") == "nvidia-h200.attention.wtt"
    with pytest.raises(ValueError, match="unknown kernel family"):
        tables.table_file_name("NVIDIA H200", "vision")
    monkeypatch.setenv("WAVETUNE_GROUPED_TABLE", "/somewhere/mine.wtt")
    assert str(tables.default_table_path("NVIDIA H200", "grouped_gemm")) == "/somewhere/mine.wtt"
    monkeypatch.delenv("WAVETUNE_TABLE", raising=False)
    assert tables.default_table_path("NVIDIA H200", "gemm") != tables.default_table_path("NVIDIA H200", "grouped_gemm")
    # A scales mode's table: its own file and variable.
    assert tables.table_file_name("NVIDIA H200", "grouped_gemm", "block128") == "nvidia-h200.grouped_gemm.block128.wtt"
    assert tables.default_table_path("NVIDIA H200", "grouped_gemm", "row") == tables.TABLE_DIR / \
        "nvidia-h200.grouped_gemm.row.wtt"
    monkeypatch.setenv("WAVETUNE_GROUPED_TABLE_ROW", "/somewhere/row.wtt")
    assert str(tables.default_table_path("NVIDIA H200", "grouped_gemm", "row")) == "/somewhere/row.wtt"
    with pytest.raises(ValueError, match="the grouped_gemm family's tables have no scales mode 'block64'"):
        tables.checked_devices("grouped_gemm", "block64")


def test_each_shipped_grouped_table_names_its_scales_mode_and_others_are_refused(tmp_path):
    """A grouped table's meta scales is its file's mode; a mode its family has not, or a scales key in a table of
    a family without modes, is refused with the modes named."""
    modes = [layout["name"] for layout in _C.GROUPED_SCALES]
    assert _C.table_scales("grouped_gemm") == modes and _C.table_scales("gemm") == [""]
    shipped = sorted(tables.TABLE_DIR.glob("*.grouped_gemm*.wtt"))
    assert {path.name.split(".")[2] if path.name.count(".") == 3 else "" for path in shipped} <= set(modes)
    for path in shipped:
        scales = path.name.split(".")[2] if path.name.count(".") == 3 else ""
        assert tables.open_table(path, "grouped_gemm").scales == scales, path.name
    read = tablefile.read_table(tables.TABLE_DIR / "nvidia-h200.grouped_gemm.row.wtt")
    tablefile.write_table(tmp_path / "t.wtt", **{**read, "meta": {**read["meta"], "scales": "block64"}})
    with pytest.raises(ValueError, match="meta scales 'block64' is not a scales mode of the grouped_gemm family's "
                                         f"tables \\({re.escape(', '.join(map(repr, modes)))}\\)"):
        tables.open_table(tmp_path / "t.wtt", "grouped_gemm")
    read = tablefile.read_table(tables.TABLE_DIR / "nvidia-h200.wtt")
    tablefile.write_table(tmp_path / "g.wtt", **{**read, "meta": {**read["meta"], "scales": "row"}})
    with pytest.raises(ValueError, match="is not a scales mode of the gemm family's tables"):
        tables.open_table(tmp_path / "g.wtt")


def test_a_scales_modes_fitted_table_is_named_and_marked_by_its_mode(tmp_path, capsys):
    table = tuning.fit_grouped(cases(synthetic_us), [NARROW, WIDE], SM_COUNT)
    header = {"gpu_name": "NVIDIA H200", "sm_count": SM_COUNT}
    path = fitting.write_family_table(tmp_path, header, "grouped_gemm", GROUPED.table_hash("row"), "t", "s",
                                      table, scales="row")
    assert path.name == "nvidia-h200.grouped_gemm.row.wtt"
    assert tablefile.read_table(path)["meta"]["scales"] == "row"
    assert tables.open_table(path, "grouped_gemm").scales == "row"


# ---- the C++ Selector over a grouped table ---------------------------------------------------------

def grouped_variants():
    found = [v for v in wavetune.grouped_configs()]
    if not found:
        pytest.skip("no grouped variant compiled (kernel set ci, tables or full compiles one or more)")
    return found


def write_grouped_table(path, variants, family="grouped_gemm", exact=None, hash_=None):
    shapes = [Shape(v.name, v.dtype, v.tile, v.cluster, v.swap_ab) for v in variants]
    measured = cases(lambda v, coords, case: 3.0 + coords[3] * coords[1] * 0.01, shapes)
    table = tuning.fit_grouped(measured, shapes, SM_COUNT, calibrate=False)
    if exact:
        table["exact"] = exact
    meta = {"gpu_name": "NVIDIA H200", "sm_count": SM_COUNT, "family": family,
            "config_space_hash": hash_ or GROUPED.table_hash(), "wavetune_version": wavetune.__version__,
            "cuda_version": 13000, "created": "2026-11-23T00:00:00+00:00"}
    tablefile.write_table(path, meta=meta, **table)
    return table


def test_selector_maps_groups_as_the_balanced_mapping(tmp_path):
    variants = grouped_variants()
    path = tmp_path / "t.grouped_gemm.wtt"
    table = write_grouped_table(path, variants)
    selector = tables.open_table(path, "grouped_gemm")
    by_id = {v.id: v for v in variants}
    assert selector.family == "grouped_gemm" and selector.config_count() == len(table["configs"]) >= 1
    for rows, experts, n, k in ((1, 128, 1536, 2048), (300, 8, 28672, 4096), (5000, 256, 4096, 7168)):
        rows_explained = selector.explain("bf16", "col", rows, n, k, experts)
        assert [r["name"].split("/")[0] for r in rows_explained] == [c["variant"] for c in table["configs"]]
        for r in rows_explained:
            v = by_id[r["variant"]]
            coords = grouped_mapping.balanced(v.tile, v.cluster, v.swap_ab, rows, experts, n, k, SM_COUNT)
            assert (r["grid"], r["k_iters"], r["capacity"], r["waves"]) == tuple(coords)
            floor = tuning.grouped_bytes({"rows": rows, "experts": experts, "n": n, "k": k})
            expected = max(model.predict(table["waves"][r["config"]], coords.grid, coords.k_iters, coords.waves,
                                         coords.capacity), floor / table["memory_bytes_per_us"],
                           model.traffic_floor_us(coords.grid, coords.k_iters, v.tile, table["traffic_bytes_per_us"]))
            assert r["predicted_us"] == pytest.approx(expected, rel=1e-12)
        choice = selector.select("bf16", "col", rows, n, k, groups=experts)
        assert choice["predicted_us"] in [r["predicted_us"] for r in rows_explained]
    # The cache keys on the groups too: one expert of the same rows is another problem.
    one = selector.select("bf16", "col", 300, 28672, 4096, groups=1)
    eight = selector.select("bf16", "col", 300, 28672, 4096, groups=8)
    assert one["predicted_us"] != eight["predicted_us"]


def test_grouped_priors_apply_by_rows_per_busy_group(tmp_path):
    variants = [v for v in grouped_variants() if v.dtype == "bf16"]
    if len(variants) < 2:
        pytest.skip("needs two compiled bf16 grouped variants (kernel set full)")
    v0, v1 = variants[:2]
    path = tmp_path / "t.grouped_gemm.wtt"
    meta = {"gpu_name": "NVIDIA H200", "sm_count": SM_COUNT, "family": "grouped_gemm",
            "config_space_hash": GROUPED.table_hash(), "wavetune_version": wavetune.__version__,
            "cuda_version": 13000, "created": "2026-11-23T00:00:00+00:00"}
    tablefile.write_table(path, meta=meta, configs=[{"variant": v.name, "decomposition": "data_parallel", "splits": 1} for v in (v0, v1)],
                          waves={0: {1: [10.0, 0, 0, 0]}, 1: {1: [5.0, 0, 0, 0]}}, micro=None, exact=None,
                          priors=[{"config_id": 0, "max_m": 16, "margin": 1e6}, {"config_id": 1, "max_m": 0, "margin": 1e6}])
    selector = tables.open_table(path, "grouped_gemm")
    for rows, groups, expected in ((100, 8, v0), (128, 8, v0), (129, 8, v1), (100, 1, v1), (16, 1, v0), (5, 256, v0)):
        assert selector.select("bf16", "col", rows, 4096, 4096, groups=groups)["variant"] == expected.id, (rows, groups)


def test_selector_refuses_the_wrong_family_and_groups(tmp_path):
    variants = grouped_variants()
    path = tmp_path / "t.grouped_gemm.wtt"
    write_grouped_table(path, variants)
    with pytest.raises(ValueError, match="grouped_gemm kernel family, but it is loaded for gemm"):
        tables.open_table(path)
    selector = tables.open_table(path, "grouped_gemm")
    with pytest.raises(ValueError, match=r"groups=0 is out of range: it must be in \[1, 536870912\]"):
        selector.select("bf16", "col", 10, 1536, 2048, groups=0)
    with pytest.raises(ValueError, match="grouped_gemm kernel family, but it is loaded for attention"):
        tables.open_table(path, "attention")
    with pytest.raises(ValueError, match="unknown kernel family"):
        tables.open_table(path, "vision")
    exact = [{"dtype": "bf16", "b_layout": "col", "m_first": 1, "m_last": 8, "n": 1536, "k": 2048, "config_id": 0,
              "raster": "heuristic", "max_swizzle": 1, "us": 5.0}]
    write_grouped_table(path, variants, exact=exact)
    with pytest.raises(ValueError, match="the grouped_gemm family.s tables have no exact records"):
        tables.open_table(path, "grouped_gemm")
    write_grouped_table(path, variants, hash_="0123456789abcdef")
    with pytest.raises(ValueError, match="config space"):
        tables.open_table(path, "grouped_gemm")


def test_gemm_tables_take_one_group():
    path = tables.TABLE_DIR / "nvidia-h200.wtt"
    if not path.exists():
        pytest.skip("the shipped H200 table is not installed")
    try:
        selector = tables.open_table(path)
    except ValueError as exc:
        pytest.skip(f"the shipped table does not fit this build: {exc}")
    with pytest.raises(ValueError, match="must be 1 for a gemm table"):
        selector.explain("bf16", "col", 64, 4096, 4096, 2)


def test_grouped_table_round_trips_and_the_shipped_one_is_well_formed(tmp_path):
    table = tuning.fit_grouped(cases(synthetic_us), [NARROW, WIDE], SM_COUNT)
    meta = {"gpu_name": "NVIDIA H200", "sm_count": SM_COUNT, "family": "grouped_gemm",
            "config_space_hash": "0123456789abcdef", "wavetune_version": wavetune.__version__,
            "cuda_version": 13000, "created": "2026-11-23T00:00:00+00:00"}
    first, second = tmp_path / "a.wtt", tmp_path / "b.wtt"
    tablefile.write_table(first, meta=meta, **table)
    read = tablefile.read_table(first)
    tablefile.write_table(second, **read)
    assert first.read_bytes() == second.read_bytes()
    assert read["meta"]["family"] == "grouped_gemm" and len(read["priors"]) == 2
    for path in tables.TABLE_DIR.glob("*.grouped_gemm.wtt"):
        shipped = tablefile.read_table(path)
        assert shipped["meta"]["family"] == "grouped_gemm" and not shipped["exact"]
        assert shipped["priors"] and all(p["margin"] == tuning.GROUPED_PRIOR_MARGIN for p in shipped["priors"])


def test_cli_fits_a_grouped_table_from_a_log(tmp_path, capsys):
    from wavetune.__main__ import main

    # A multistage variant's CTAs per SM are read from its kernel on the GPU, which a fit from logs needs then.
    variants = [v for v in grouped_variants() if v.dtype == "bf16" and v.schedule != "multistage"]
    if not variants:
        pytest.skip("no bf16 Hopper grouped variant compiled")
    shapes = [Shape(v.name, v.dtype, v.tile, v.cluster, v.swap_ab) for v in variants]
    log = tmp_path / "grouped_tune.jsonl"
    measured = cases(lambda v, coords, case: 3.0 + coords[3] * coords[1] * 0.01, shapes)
    log.write_text("\n".join(json.dumps(r) for r in [{"gpu": "NVIDIA H200", "sm_count": SM_COUNT}, *measured]) + "\n")
    # The command of a benchmark's log as it was before the families measured their own cases (no --offline).
    assert main(["tune", "--family", "grouped_gemm", "--log", str(log), "--out", str(tmp_path)]) == 0
    assert "without measuring, as --offline does" in capsys.readouterr().err
    path = tmp_path / "nvidia-h200.grouped_gemm.wtt"
    selector = tables.open_table(path, "grouped_gemm")
    assert selector.meta()["family"] == "grouped_gemm" and selector.config_count() >= 1
    choice = selector.select("bf16", "col", 64, 4096, 4096, groups=8)
    assert choice["name"] in {v.name for v in variants}
    capsys.readouterr()
    assert main(["explain", "64", "4096", "4096", "--family", "grouped_gemm", "--groups", "8", "--table", str(path)]) == 0
    assert f"choice: {choice['name']} " in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["tune", "--family", "grouped_gemm", "--shapes", "config.json", "--log", str(log)])

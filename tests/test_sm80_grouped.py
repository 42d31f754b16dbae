"""The grouped family's Ampere-style variants (arch sm80 groups of cutlass_configs/sm90_grouped_gemm.toml) without a
GPU: their config validation (Hopper-only axes refused), names, generated sources and kernel sets, the shipped
grouped tables' hash, the mapping's capacity of several CTAs per SM, and the occupancy the tuner records."""

from __future__ import annotations

from pathlib import Path

import pytest

from wavetune import _C
from wavetune.codegen import config_space as cs
from wavetune.families.grouped_gemm import mapping, tuning
from wavetune.runtime.configs import KernelConfig
from wavetune.tuning import tablefile

from conftest import REPO, builtin_choice_compiles, config_space_with

CONFIG_SPACE = REPO / "cutlass_configs" / "sm90_grouped_gemm.toml"
SM80_GROUP = """
[[group]]
arch = "sm80"
dtypes = ["bf16"]
tiles = ["64x64x32"]
warps = ["2x2"]
stages = [3]
"""


@pytest.fixture(scope="module")
def space() -> cs.ConfigSpace:
    return cs.load(CONFIG_SPACE)


def ampere_variants(space):
    return [v for v in space.variants if v.arch == "sm80"]


def with_group(tmp_path: Path, group: str, text: str | None = None) -> Path:
    """The shipped grouped config space with ``group`` appended (before its [kernel_sets] table)."""
    return config_space_with(tmp_path, CONFIG_SPACE, group, "[kernel_sets]", text)


def test_sm80_variants_are_appended_and_named_by_what_they_are(space):
    sm80 = ampere_variants(space)
    assert 8 <= len(sm80) <= 16
    assert [v.id for v in sm80] == list(range(len(space.variants) - len(sm80), len(space.variants)))
    v = next(v for v in sm80 if v.name == "grouped_bf16_sm80_128x128x32_2x2warps_3stage")
    assert (v.tile_m, v.tile_n, v.tile_k, v.warps_m, v.warps_n, v.stages) == (128, 128, 32, 2, 2, 3)
    # The family's B layout, and its scheduler: a grid of the resident CTAs visits every expert's tiles.
    assert (v.schedule, v.scheduler, v.b_layout, v.cluster_m, v.cluster_n, v.swap_ab, v.scales) == (
        "multistage", "persistent", "col", 1, 1, False, "")
    assert {v.dtype for v in sm80} == set(cs.DTYPES)
    for v in sm80:
        assert v.name == f"grouped_{v.dtype}_sm80_{v.tile_m}x{v.tile_n}x{v.tile_k}_{v.warps_m}x{v.warps_n}warps_" \
                         f"{v.stages}stage"
        # Every one fits the 99 KB a CTA gets on compute capability 8.6 and 8.9 (the file's NOTES).
        assert cs.multistage_shared_bytes(v) <= 99 * 1024, v.name
    tiles = {(v.tile_m, v.tile_n, v.tile_k) for v in sm80}
    assert {(64, 64, 64), (128, 128, 32), (128, 64, 64), (64, 128, 64)} <= tiles
    assert {v.stages for v in sm80} == {3, 4}


def test_the_hopper_variants_keep_their_ids_and_the_tables_their_hash(space):
    """The sm80 groups come last and are left out of the hash a grouped table is tuned against (each scales
    mode's, of the file's architecture): every shipped grouped table still carries its mode's hash."""
    hopper = [v for v in space.variants if v.arch == space.arch]
    assert [v.id for v in hopper] == list(range(len(hopper)))
    tables = sorted((REPO / "tables").glob("*.grouped_gemm*.wtt"))
    assert tables
    for table in tables:
        meta = tablefile.read_table(table)["meta"]
        assert meta["config_space_hash"] == space.scales_hash(meta.get("scales", "")), table.name
    assert space.hash != space.scales_hash("")
    assert _C.config_space("grouped_gemm")["scales_hashes"][""] == space.scales_hash("")


def test_an_sm80_group_added_leaves_the_table_hash_and_the_other_ids(tmp_path, space):
    grown = cs.load(with_group(tmp_path, SM80_GROUP))
    assert grown.scales_hash("") == space.scales_hash("") and grown.hash != space.hash
    assert [v.name for v in grown.variants[:len(space.variants)]] == [v.name for v in space.variants]
    assert grown.variants[-1].name == "grouped_bf16_sm80_64x64x32_2x2warps_3stage"


@pytest.mark.parametrize("edit, message", [
    (("stages = [3]", "stages = [3]\nscales = \"row\""), "scales: Hopper axes .*FP8 scales"),
    (("stages = [3]", "stages = [3]\nswap_ab = true"), "swap_ab: Hopper axes"),
    (("stages = [3]", "stages = [3]\nclusters = [\"1x1\"]"), "clusters: Hopper axes"),
    (("stages = [3]", "stages = [3]\nschedule = \"pingpong\""), "schedule: Hopper axes"),
    (("stages = [3]", "stages = [3]\nschedulers = [\"persistent\"]"), "schedulers: Hopper axes"),
    (("stages = [3]", "stages = [3]\nb_layouts = [\"row\"]"), r"has b_layouts = \['col'\] only"),
    (("warps = [\"2x2\"]\n", ""), r"missing keys \['warps'\]"),
    (("64x64x32", "64x64x128"), "tile 64x64x128 is not supported"),
    (("2x2", "1x4"), "warp tile 64x16 is not supported"),
    (("stages = [3]", "stages = [2]"), "stages=2"),
])
def test_sm80_groups_are_validated(tmp_path, edit, message):
    with pytest.raises(cs.ConfigError, match=message):
        cs.load(with_group(tmp_path, SM80_GROUP.replace(*edit)))


def test_an_sm80_group_may_name_the_familys_b_layout(tmp_path):
    grown = cs.load(with_group(tmp_path, SM80_GROUP.replace("stages = [3]", "stages = [3]\nb_layouts = [\"col\"]")))
    assert grown.variants[-1].b_layout == "col"


def test_an_sm80_group_needs_the_familys_sm80_template(tmp_path):
    text = CONFIG_SPACE.read_text()
    at = text.index("\n[family.archs.sm80]\n")
    text = text[:at] + text[text.index("\n\n", at):]
    with pytest.raises(cs.ConfigError, match=r"needs a GEMM family with a \[family.archs.sm80\] table"):
        cs.load(with_group(tmp_path, "", text))


def test_generated_sources_instantiate_the_sm80_grouped_template_and_are_portable(space):
    v = next(v for v in ampere_variants(space) if v.name == "grouped_fp16_sm80_64x64x64_2x2warps_4stage")
    source = cs.render_variant(v, CONFIG_SPACE.name)
    assert source.splitlines()[1] == "// wavetune: portable"
    assert '#include "sm80_grouped_gemm.cuh"' in source and "grouped_scales.cuh" not in source
    assert ("WAVETUNE_GROUPED_SM80_INSTANTIATE_VARIANT(grouped_fp16_sm80_64x64x64_2x2warps_4stage, fp16, col, false, "
            "multistage, 64, 64, 64, 1, 1, persistent, 4, 2, 2)") in source
    hopper = cs.render_variant(space.variants[0], CONFIG_SPACE.name)
    assert "portable" not in hopper and "WAVETUNE_GROUPED_INSTANTIATE_VARIANT(" in hopper
    assert '"grouped_scales.cuh"' in hopper
    registry = cs.render_registry(space, [v], "sm80")
    assert (f"WAVETUNE_VARIANT({v.id}, {v.name}, fp16, col, false, multistage, 64, 64, 64, 1, 1, persistent, sm80)"
            in registry)
    # A run-time library of both kinds is one translation unit: each template has its own macro.
    library = cs.render_variant_library(space, [space.variants[0], v])
    assert library.count('#include "grouped_scales.cuh"') == library.count('#include "sm80_grouped_gemm.cuh"') == 1


def test_the_sm80_kernel_set_compiles_both_gemm_families_ampere_variants(tmp_path, space):
    chosen = space.select("sm80")
    assert 3 <= len(chosen) <= 8 and all(v.arch == "sm80" for v in chosen)
    assert {v.dtype for v in chosen} == set(cs.DTYPES) and len({v.stages for v in chosen}) == 2
    assert not any(v.arch == "sm80" for v in space.select("ci"))
    assert space.select("builtin") == []
    assert not any(v.arch == "sm80" for v in space.select("tables", tables_dir=REPO / "tables"))
    spaces = [cs.load(path) for path in sorted((REPO / "cutlass_configs").glob("*.toml"))]
    sources = cs.generate_families(spaces, tmp_path, "sm80", "", with_kernels=True)
    assert {p.parent.name for p in sources} == {"variants", "grouped_variants"}
    assert {p.stem for p in sources if p.parent.name == "grouped_variants"} == {v.name for v in chosen}
    assert all("// wavetune: portable" in p.read_text() for p in sources)


def test_capacity_counts_every_resident_cta():
    tile, cluster = (128, 128, 32), (1, 1)
    one = mapping.balanced(tile, cluster, False, 8192, 8, 4096, 4096, 108)
    three = mapping.balanced(tile, cluster, False, 8192, 8, 4096, 4096, 108, 3)
    assert one == (8 * 8 * 32, 128, 108, 19) and three == (8 * 8 * 32, 128, 324, 7)
    assert mapping.routed(tile, cluster, False, [0, 300, 0, 5], 256, 64, 108, 2) == (3 * 2 + 1 * 2, 2, 216, 1)
    with pytest.raises(ValueError, match="ctas_per_sm=0 must be >= 1"):
        mapping.balanced(tile, cluster, False, 64, 8, 256, 64, 108, 0)


def grouped_variant(schedule: str) -> KernelConfig:
    return KernelConfig(70, f"grouped_{schedule}", "bf16", "col", False, schedule, (64, 64, 64), (1, 1),
                        "persistent", "sm80" if schedule == "multistage" else "sm90a")


def test_the_tuner_reads_the_occupancy_of_multistage_variants_only_on_a_gpu(monkeypatch):
    def no_gpu(variant_id):
        raise RuntimeError("no CUDA device")

    monkeypatch.setattr(tuning._C, "grouped_ctas_per_sm", no_gpu)
    assert tuning.ctas_per_sm(grouped_variant("pingpong")) == 1
    with pytest.raises(ValueError, match="grouped_multistage are neither in the measurement log nor readable from its kernel on a GPU: re-measure"):
        tuning.ctas_per_sm(grouped_variant("multistage"))
    monkeypatch.setattr(tuning._C, "grouped_ctas_per_sm", lambda variant_id: 0)
    with pytest.raises(ValueError, match="does not fit an SM of this GPU"):
        tuning.ctas_per_sm(grouped_variant("multistage"))


def test_a_fitted_grouped_table_records_the_occupancy_it_was_mapped_with(monkeypatch):
    """The fit maps a multistage variant's cases with its CTAs per SM and writes them as the table's record."""
    monkeypatch.setattr(tuning._C, "grouped_ctas_per_sm", lambda variant_id: 3)
    ampere, hopper = grouped_variant("multistage"), grouped_variant("pingpong")
    case = {"rows": 8192, "experts": 8, "n": 4096, "k": 4096}
    assert tuning.grouped_coordinates(ampere, case, 132)[2] == 3 * 132
    assert tuning.grouped_coordinates(hopper, case, 132)[2] == 132
    cases = [{**case, "rows": rows, "variants_us": {ampere.name: 10.0 + rows * 1e-3, hopper.name: 20.0 + rows * 1e-3}}
             for rows in (16, 256, 4096, 8192, 30000)]
    table = tuning.fit_grouped(cases, [ampere, hopper], 132, calibrate=False)
    assert [c["variant"] for c in table["configs"]] == [ampere.name]
    assert table["occupancy"] == {0: 3}


def test_a_grouped_refit_takes_the_occupancy_its_log_recorded_without_the_gpu(tmp_path, monkeypatch):
    """A case log whose header records a multistage variant's CTAs per SM refits, offline, into a table whose
    occupancy record is that count, the GPU binding failing."""
    import json

    from wavetune import families
    from wavetune.families.grouped_gemm import api
    from wavetune.runtime import configs

    def no_gpu(variant_id):
        raise RuntimeError("no CUDA device")

    ampere, hopper = grouped_variant("multistage"), grouped_variant("pingpong")
    monkeypatch.setattr(configs, "RECORDED_CTAS", {})
    monkeypatch.setattr(tuning._C, "grouped_ctas_per_sm", no_gpu)
    monkeypatch.setattr(api, "grouped_family_configs", lambda: [ampere, hopper])
    header = {"gpu_name": "NVIDIA A100-SXM4-80GB", "sm_count": 108, "l2_bytes": 41943040,
              "config_space_hash": families.get("grouped_gemm").table_hash(), "family": "grouped_gemm"}
    case = {"experts": 8, "n": 4096, "k": 4096}
    lines = [json.dumps({**case, "case_key": f"c{rows}", "rows": rows,
                         "variants_us": {ampere.name: 10.0 + rows * 1e-3, hopper.name: 20.0 + rows * 1e-3}})
             for rows in (16, 256, 4096, 8192, 30000)]
    old = tmp_path / "old.jsonl"
    old.write_text("\n".join([json.dumps(header), *lines]) + "\n")
    with pytest.raises(ValueError, match=f"{ampere.name} are neither in the measurement log .* re-measure"):
        tuning.driver("").tune([old], tmp_path / "old")
    logged = tmp_path / "log.jsonl"
    logged.write_text("\n".join([json.dumps({**header, "ctas_per_sm": {ampere.name: 4}}), *lines]) + "\n")
    path = tuning.driver("").tune([logged], tmp_path)
    table = tablefile.read_table(path)
    assert [c["variant"] for c in table["configs"]] == [ampere.name] and table["occupancy"] == {0: 4}
    assert tuning.grouped_coordinates(ampere, {**case, "rows": 8192}, 108)[2] == 4 * 108


@pytest.mark.parametrize("gpu, arch", [((86, 86), "sm80"), ((89, 89), "sm80"), ((120, 120), "sm80"),
                                       ((90, 90), "sm90a"), ((90, 80), "sm80")])
def test_a_gpu_without_a_table_compiles_the_built_in_variants_of_the_newest_architecture_it_runs(gpu, arch, space,
                                                                                                monkeypatch):
    queued = builtin_choice_compiles(monkeypatch, "grouped_gemm", gpu)
    assert queued and {v.arch for v in queued} == {arch}
    assert {v.name for v in queued} == {v.name for v in space.heuristic_set() if v.arch == arch}
    if arch == "sm80":  # a decode tile and a prefill tile of each dtype
        assert {(v.dtype, v.tile[0]) for v in queued} == {(d, m) for d in ("bf16", "fp16") for m in (64, 128)}


def test_the_tables_set_builds_the_hopper_heuristic_variants_only(space):
    chosen = space.select("tables", tables_dir=REPO / "tables")
    assert not [v.name for v in chosen if v.arch == "sm80"]
    assert {v.name for v in space.heuristic_set() if v.arch == "sm90a"} <= {v.name for v in chosen}

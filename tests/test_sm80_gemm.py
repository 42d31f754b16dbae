"""The dense GEMM family's Ampere-style variants (arch sm80 groups of cutlass_configs/sm90_gemm.toml) without a GPU:
their config validation, generated sources and kernel sets, the shipped tables' hash, and the mapping's capacity
of several CTAs per SM (TileShape::ctas_per_sm, a table's `occupancy` record)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wavetune import _C
from wavetune.codegen import config_space as cs
from wavetune.runtime.tables import open_table
from wavetune.tuning import model, tablefile

from conftest import REPO, config_space_with

CONFIG_SPACE = REPO / "cutlass_configs" / "sm90_gemm.toml"
SM80_GROUP = """
[[group]]
arch = "sm80"
dtypes = ["bf16"]
b_layouts = ["col"]
tiles = ["128x128x32"]
warps = ["2x2"]
stages = [3]
"""


@pytest.fixture(scope="module")
def space() -> cs.ConfigSpace:
    return cs.load(CONFIG_SPACE)


def portable(space):
    return [v for v in space.variants if v.arch == "sm80"]


def with_group(tmp_path: Path, group: str, text: str | None = None) -> Path:
    """The shipped config space with ``group`` appended (before its [fallback] table)."""
    return config_space_with(tmp_path, CONFIG_SPACE, group, "[fallback]", text)


def test_sm80_variants_are_appended_and_named_by_what_they_are(space):
    sm80 = portable(space)
    assert 16 <= len(sm80) <= 30
    assert [v.id for v in sm80] == list(range(len(space.variants) - len(sm80), len(space.variants)))
    v = next(v for v in sm80 if v.name == "bf16_bcol_sm80_128x128x32_2x2warps_3stage")
    assert (v.tile_m, v.tile_n, v.tile_k, v.warps_m, v.warps_n, v.stages) == (128, 128, 32, 2, 2, 3)
    assert (v.schedule, v.scheduler, v.cluster_m, v.cluster_n, v.swap_ab) == ("multistage", "data_parallel", 1, 1, False)
    # Only the two 128 KB kernels exceed the 99 KB a CTA gets on compute capability 8.6 and 8.9 (docs/kernels.md).
    assert {v.name for v in sm80 if cs.multistage_shared_bytes(v) > 99 * 1024} == {
        "bf16_bcol_sm80_128x128x64_2x2warps_4stage", "fp16_bcol_sm80_128x128x64_2x2warps_4stage"}
    for v in sm80:
        assert f"_sm80_{v.tile_m}x{v.tile_n}x{v.tile_k}_{v.warps_m}x{v.warps_n}warps_{v.stages}stage" in v.name
        assert cs.multistage_shared_bytes(v) <= cs.MULTISTAGE_MAX_SHARED_BYTES


def test_the_tables_keep_their_hash(space):
    """The sm80 variants are left out of the hash a table is tuned against: every shipped dense table still
    carries it, while the space's own hash (a variant library's) covers them."""
    gemm_tables = [t for t in (REPO / "tables").glob("*.wtt") if ".grouped_gemm" not in t.name
                   and ".attention" not in t.name and ".scaled_gemm" not in t.name]
    assert gemm_tables
    for table in gemm_tables:
        assert tablefile.read_table(table)["meta"]["config_space_hash"] == space.scales_hash(""), table.name
    assert space.hash != space.scales_hash("")
    assert _C.config_space("gemm")["scales_hashes"][""] == space.scales_hash("")


def test_an_sm80_group_added_leaves_the_table_hash_and_the_other_ids(tmp_path, space):
    grown = cs.load(with_group(tmp_path, SM80_GROUP.replace("128x128x32", "64x64x32")))
    assert grown.scales_hash("") == space.scales_hash("") and grown.hash != space.hash
    assert [v.name for v in grown.variants[:len(space.variants)]] == [v.name for v in space.variants]


@pytest.mark.parametrize("edit, message", [
    (("warps = [\"2x2\"]", "warps = [\"2x2\"]\nclusters = [\"1x1\"]"), "clusters: Hopper axes"),
    (("warps = [\"2x2\"]", "warps = [\"2x2\"]\nschedule = \"pingpong\""), "schedule: Hopper axes"),
    (("warps = [\"2x2\"]", "warps = [\"2x2\"]\nswap_ab = true"), "swap_ab: Hopper axes"),
    (("warps = [\"2x2\"]\n", ""), "missing keys \\['warps'\\]"),
    (("128x128x32", "128x128x128"), "tile 128x128x128 is not supported"),
    (("128x128x32", "96x128x32"), "tile 96x128x32 is not supported"),
    (("2x2", "4x4"), "warps 4x4 do not split"),
    (("2x2", "1x4"), "warp tile 128x32 is not supported"),
    (("stages = [3]", "stages = [2]"), "stages=2"),
    (("stages = [3]", "stages = []"), "stages must be a non-empty list of integers"),
    (("arch = \"sm80\"", "arch = \"sm100\""), "arch 'sm100'"),
    (("128x128x32\"]\nwarps = [\"2x2\"]\nstages = [3]", "256x128x64\"]\nwarps = [\"4x2\"]\nstages = [5]"),
     "need 240 KB of shared memory"),
])
def test_sm80_groups_are_validated(tmp_path, edit, message):
    with pytest.raises(cs.ConfigError, match=message):
        cs.load(with_group(tmp_path, SM80_GROUP.replace(*edit)))


def test_an_sm80_group_needs_its_family_template(tmp_path):
    text = CONFIG_SPACE.read_text()
    at = text.index("[family.archs.sm80]")
    text = text[:at] + text[text.index("\n\n", at):]
    with pytest.raises(cs.ConfigError, match=r"needs a GEMM family with a \[family.archs.sm80\] table"):
        cs.load(with_group(tmp_path, "", text))
    with pytest.raises(cs.ConfigError, match="unknown keys"):  # a Hopper group has no sm80 keys
        cs.load(with_group(tmp_path, SM80_GROUP.replace('arch = "sm80"\n', "")))


def test_generated_sources_instantiate_the_sm80_template_and_are_portable(space):
    v = next(v for v in portable(space) if v.name == "fp16_brow_sm80_64x64x64_2x2warps_4stage")
    source = cs.render_variant(v, CONFIG_SPACE.name)
    assert source.splitlines()[1] == "// wavetune: portable"
    assert '#include "sm80_gemm.cuh"' in source
    assert ("WAVETUNE_SM80_INSTANTIATE_VARIANT(fp16_brow_sm80_64x64x64_2x2warps_4stage, fp16, row, false, "
            "multistage, 64, 64, 64, 1, 1, data_parallel, 4, 2, 2)") in source
    hopper = cs.render_variant(space.variants[0], CONFIG_SPACE.name)
    assert "portable" not in hopper and "WAVETUNE_INSTANTIATE_VARIANT(" in hopper and '"sm90_gemm.cuh"' in hopper
    registry = cs.render_registry(space, [v], "sm80")
    assert f"WAVETUNE_VARIANT({v.id}, {v.name}, fp16, row, false, multistage, 64, 64, 64, 1, 1, data_parallel, sm80)" \
        in registry
    # A run-time library of both kinds is one translation unit: each template has its own macro.
    library = cs.render_variant_library(space, [space.variants[0], v])
    assert library.count('#include "sm90_gemm.cuh"') == library.count('#include "sm80_gemm.cuh"') == 1


def test_kernel_sets(space):
    chosen = space.select("sm80")
    assert 6 <= len(chosen) <= 10 and all(v.arch == "sm80" for v in chosen)
    assert {(v.dtype, v.b_layout) for v in chosen} == {(d, b) for d in cs.DTYPES for b in cs.B_LAYOUTS}
    assert not any(v.arch == "sm80" for v in space.select("ci"))
    assert space.select("builtin") == []
    assert not any(v.arch == "sm80" for v in space.select("tables", tables_dir=REPO / "tables"))


def test_capacity_counts_every_resident_cta():
    tile, cluster = (128, 128, 32), (1, 1)
    one = model.map_problem(tile, cluster, False, 4096, 4096, 4096, "data_parallel", 1, 108)
    three = model.map_problem(tile, cluster, False, 4096, 4096, 4096, "data_parallel", 1, 108, 3)
    assert one == (1024, 128, 108, 10) and three == (1024, 128, 324, 4)
    # Split-K multiplies the grid; the capacity stays SMs x CTAs per SM.
    assert model.map_problem(tile, cluster, False, 128, 4096, 4096, "split_k", 4, 108, 2) == (128, 32, 216, 1)


def one_config_table(path: Path, variant: str, occupancy: dict | None) -> Path:
    """A table of one config of ``variant`` (data-parallel, a flat wave model) on a 132-SM GPU."""
    import wavetune

    tablefile.write_table(
        path,
        meta={"gpu_name": "NVIDIA H100", "sm_count": 132, "config_space_hash": _C.config_space("gemm")["scales_hashes"][""],
              "wavetune_version": wavetune.__version__, "cuda_version": 13000, "created": "2026-12-01T00:00:00+00:00"},
        configs=[{"variant": variant, "decomposition": "data_parallel", "splits": 1}],
        waves={0: {1: [2.0, 0.01, 0.05, 1e-4]}}, micro=None, exact=None, occupancy=occupancy)
    return path


@pytest.fixture()
def compiled_variant() -> str:
    names = [v["name"] for v in _C.variants() if v["dtype"] == "bf16" and v["b_layout"] == "col"]
    if not names:
        pytest.skip("no bf16 column-major variant compiled into this build")
    return names[0]


def test_an_occupancy_record_multiplies_the_lookups_capacity(tmp_path, compiled_variant):
    plain = open_table(one_config_table(tmp_path / "a.wtt", compiled_variant, None))
    doubled = open_table(one_config_table(tmp_path / "b.wtt", compiled_variant, {0: 3}))
    (one,) = plain.explain("bf16", "col", 4096, 4096, 4096)
    (three,) = doubled.explain("bf16", "col", 4096, 4096, 4096)
    assert one["capacity"] == 132 and three["capacity"] == 3 * 132
    assert three["grid"] == one["grid"] and three["waves"] == -(-one["grid"] // (3 * 132))


def test_occupancy_records_are_written_only_above_one_and_checked(tmp_path, compiled_variant):
    path = one_config_table(tmp_path / "t.wtt", compiled_variant, {0: 3})
    text = path.read_text()
    assert "occupancy 0 3\n" in text and tablefile.read_table(path)["occupancy"] == {0: 3}
    assert "occupancy" not in one_config_table(tmp_path / "one.wtt", compiled_variant, {0: 1}).read_text()
    with pytest.raises(ValueError, match="at most 32 CTAs per SM"):
        one_config_table(tmp_path / "x.wtt", compiled_variant, {0: 33})
    with pytest.raises(ValueError, match="must be >= 1"):
        one_config_table(tmp_path / "x.wtt", compiled_variant, {0: 0})
    for edit, message in [("occupancy 0 3\noccupancy 0 2\n", "a second occupancy record for config 0"),
                          ("occupancy 1 2\n", "config id 1"), ("occupancy 0 33\n", "CTAs per SM")]:
        bad = tmp_path / "bad.wtt"
        body = text[:text.index("checksum ")].replace("occupancy 0 3\n", edit)
        bad.write_text(body + f"checksum {tablefile.fnv1a64(body.encode()):016x}\n")
        with pytest.raises(ValueError, match=message):
            open_table(bad)


def test_the_tuner_reads_the_occupancy_of_multistage_variants_only_on_a_gpu(monkeypatch):
    from wavetune.families.gemm import tuning
    from wavetune.runtime.configs import KernelConfig

    def variant(schedule):
        return KernelConfig(7, f"v_{schedule}", "bf16", "col", False, schedule, (128, 128, 32), (1, 1),
                            "data_parallel", "sm80")

    def no_gpu(variant_id):
        raise RuntimeError("no CUDA device")

    monkeypatch.setattr(tuning._C, "gemm_ctas_per_sm", no_gpu)
    assert tuning.ctas_per_sm(variant("pingpong")) == 1
    with pytest.raises(ValueError, match="v_multistage are neither in the measurement log"):
        tuning.ctas_per_sm(variant("multistage"))
    monkeypatch.setattr(tuning._C, "gemm_ctas_per_sm", lambda variant_id: 3)
    assert tuning.ctas_per_sm(variant("multistage")) == 3


def test_a_log_measured_here_records_the_occupancy_an_offline_refit_reads_without_the_gpu(tmp_path, monkeypatch):
    """The log's header keeps each multistage variant's CTAs per SM; a log opened offline gives them to the
    mapping and the table's occupancy records, with the GPU binding failing."""
    import json

    from wavetune import families
    from wavetune.families.gemm import api, tuning
    from wavetune.runtime import configs
    from wavetune.tuning import log as log_module

    ampere = logged_variant("multistage")
    hopper = logged_variant("pingpong")
    monkeypatch.setattr(configs, "RECORDED_CTAS", {})
    monkeypatch.setattr(api, "configs", lambda: [ampere, hopper])
    monkeypatch.setattr(log_module, "device_properties",
                        lambda: {"name": "NVIDIA A100-SXM4-80GB", "sm_count": 108, "l2_bytes": 41943040})
    monkeypatch.setattr(tuning._C, "gemm_ctas_per_sm", lambda variant_id: 3)
    path = tmp_path / "log.jsonl"
    tuning.GemmLog(path)  # measuring here: the header reads the GPU
    header = json.loads(path.read_text().splitlines()[0])
    assert header["ctas_per_sm"] == {ampere.name: 3}
    assert header["config_space_hash"] == families.get("gemm").table_hash()

    def no_gpu(variant_id):
        raise RuntimeError("no CUDA device")

    monkeypatch.setattr(tuning._C, "gemm_ctas_per_sm", no_gpu)
    with pytest.raises(ValueError, match=f"{ampere.name} are neither in the measurement log .* re-measure"):
        tuning.ctas_per_sm(ampere)
    tuning.GemmLog(path, offline=True)
    assert tuning.ctas_per_sm(ampere) == 3 and tuning.ctas_per_sm(hopper) == 1
    assert tuning.occupancy_records([tuning.Candidate(hopper), tuning.Candidate(ampere)]) == {0: 1, 1: 3}


def test_a_log_without_occupancy_still_reads_and_a_device_probed_elsewhere_records_the_probes(tmp_path, monkeypatch):
    import json

    from wavetune.families.gemm import tuning
    from wavetune.runtime import configs

    monkeypatch.setattr(configs, "RECORDED_CTAS", {})
    device = {"name": "NVIDIA A100-SXM4-80GB", "sm_count": 108, "l2_bytes": 41943040}
    path = tmp_path / "log.jsonl"
    tuning.GemmLog(path, device=device)  # properties probed elsewhere, without occupancy
    assert "ctas_per_sm" not in json.loads(path.read_text().splitlines()[0])
    assert tuning.GemmLog(path, offline=True).device == device
    assert configs.RECORDED_CTAS == {}
    probed = tmp_path / "probed.jsonl"
    tuning.GemmLog(probed, device={**device, "ctas_per_sm": {"bf16_bcol_sm80_64x64x64_2x2warps_3stage": 4}})
    assert json.loads(probed.read_text().splitlines()[0])["ctas_per_sm"] == {
        "bf16_bcol_sm80_64x64x64_2x2warps_3stage": 4}
    tuning.GemmLog(probed, offline=True)
    assert configs.RECORDED_CTAS == {"bf16_bcol_sm80_64x64x64_2x2warps_3stage": 4}


def logged_variant(schedule: str):
    from wavetune.runtime.configs import KernelConfig

    return KernelConfig(7, f"logged_{schedule}", "bf16", "col", False, schedule, (128, 128, 32), (1, 1),
                        "data_parallel", "sm80" if schedule == "multistage" else "sm90a")

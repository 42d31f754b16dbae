"""Config-space parsing, validation, kernel sets and code generation (no GPU, no torch)."""

from __future__ import annotations

import os
import re

import pytest

from conftest import CONFIG_SPACE, compiled_rows, family_table
from wavetune.codegen import config_space as cs

GOOD_GROUP = """
[[group]]
dtypes = ["bf16"]
b_layouts = ["col"]
schedule = "cooperative"
tiles = ["128x128x64", "256x128x64"]
clusters = ["1x1", "2x1"]
schedulers = ["persistent", "stream_k"]
"""


def write(tmp_path, body, header='schema = 1\narch = "sm90a"\n'):
    path = tmp_path / "space.toml"
    path.write_text(header + body + family_table())
    return path


def test_shipped_space_expands_to_unique_sequential_variants():
    space = cs.load(CONFIG_SPACE)
    assert [v.id for v in space.variants] == list(range(len(space.variants)))
    names = [v.name for v in space.variants]
    assert len(set(names)) == len(names)
    # Both dtypes, both B layouts, both schedules and both GEMM tile schedulers are represented among the Hopper
    # variants; the Ampere-style ones (arch sm80, appended) are multistage kernels of both dtypes and layouts.
    hopper = [v for v in space.variants if v.arch == space.arch]
    for field, values in [("dtype", cs.DTYPES), ("b_layout", cs.B_LAYOUTS), ("schedule", cs.SCHEDULES),
                          ("scheduler", ("persistent", "stream_k"))]:
        assert {getattr(v, field) for v in hopper} == set(values)
    portable = space.variants[len(hopper):]
    assert portable and {(v.arch, v.schedule, v.scheduler) for v in portable} == {("sm80", "multistage", "data_parallel")}
    assert {(v.dtype, v.b_layout) for v in portable} == {(d, b) for d in cs.DTYPES for b in cs.B_LAYOUTS}
    tiles = {(v.tile_m, v.tile_n, v.tile_k) for v in space.variants}
    for tile in [(64, 64, 64), (64, 128, 64), (64, 256, 64), (128, 64, 64), (128, 128, 64), (128, 256, 64),
                 (256, 128, 64), (128, 128, 128)]:
        assert tile in tiles
    assert {(v.cluster_m, v.cluster_n) for v in space.variants} == {(1, 1), (2, 1), (1, 2), (4, 1)}
    swapped = [v for v in space.variants if v.swap_ab]
    assert swapped and all(v.b_layout == "col" and "_swapab_" in v.name for v in swapped)
    assert {v.tile_n for v in swapped} >= {16, 32}


def test_token_side_tiles_cover_every_token_count_finely():
    """Under swap-AB the tile's N runs over the tokens: for any M up to 256 some bf16 tile pads it by less
    than 16 rows, and ping-pong and cooperative schedules both have token tiles from 64 in steps of 16."""
    swapped = [v for v in cs.load(CONFIG_SPACE).variants if v.swap_ab and v.dtype == "bf16"]
    token_tiles = {v.tile_n for v in swapped}
    for m in range(1, 257):
        assert min(t * -(-m // t) - m for t in token_tiles) < 16, m
    for schedule in cs.SCHEDULES:
        tiles = sorted({v.tile_n for v in swapped if v.schedule == schedule and v.tile_n >= 64})
        assert tiles and all(b - a <= 16 for a, b in zip(tiles, tiles[1:])), (schedule, tiles)
    assert {v.tile_m for v in swapped} == set(cs.TILE_M)


def test_template_enables_the_extended_wgmma_shapes():
    """A tile N such as 152 or 208 needs CUTLASS's extended wgmma atoms, switched on before any include."""
    template = (CONFIG_SPACE.parents[1] / "csrc" / "families" / "gemm" / "sm90_gemm.cuh").read_text()
    define = template.index("#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED")
    assert define < template.index("#include")
    default_atoms = {8, 16, 24, 32, 64, 96, 128, 192, 256}
    assert any(v.tile_n not in default_atoms for v in cs.load(CONFIG_SPACE).variants)


def test_group_is_a_cross_product_in_order(tmp_path):
    space = cs.load(write(tmp_path, GOOD_GROUP))
    assert len(space.variants) == 2 * 2 * 2
    assert space.variants[0].name == "bf16_bcol_cooperative_128x128x64_1x1_persistent"
    assert space.variants[1].name == "bf16_bcol_cooperative_128x128x64_1x1_stream_k"
    assert space.variants[-1].name == "bf16_bcol_cooperative_256x128x64_2x1_stream_k"


def test_hash_changes_with_the_space(tmp_path):
    a = cs.load(write(tmp_path, GOOD_GROUP)).hash
    assert a == cs.load(write(tmp_path, GOOD_GROUP)).hash
    assert re.fullmatch(r"[0-9a-f]{16}", a)
    assert a != cs.load(write(tmp_path, GOOD_GROUP.replace('"2x1"', '"1x2"'))).hash


def test_kernel_sets_and_filter():
    space = cs.load(CONFIG_SPACE)
    assert space.select("full") == list(space.variants)
    ci = space.select("ci")
    assert 1 <= len(ci) <= 5, "the ci set must stay small: every variant costs ~40 s of CI compile time"
    # what the shipped tables choose, with both schedules and stream-K (the lookup's mapping paths)
    assert {(v.dtype, v.b_layout) for v in ci} == {("bf16", "col")}
    assert {v.schedule for v in ci} == set(cs.SCHEDULES) and any(v.scheduler == "stream_k" for v in ci)
    bf16_col = space.select("full", "bf16_bcol_*")
    assert bf16_col and all(v.dtype == "bf16" and v.b_layout == "col" for v in bf16_col)
    both = space.select("full", "bf16_bcol_*_stream_k, fp16_brow_*")
    assert {v.name for v in both} == {v.name for v in space.variants if
                                      (v.name.startswith("bf16_bcol_") and v.scheduler == "stream_k")
                                      or v.name.startswith("fp16_brow_")}
    with pytest.raises(cs.ConfigError, match="unknown kernel set 'nope'"):
        space.select("nope")
    with pytest.raises(cs.ConfigError, match="selects no variant"):
        space.select("full", "int8_*")


@pytest.mark.parametrize(
    "body, message",
    [
        (GOOD_GROUP.replace('"128x128x64", ', '"64x128x64", '), "need tile M >= 128"),
        (GOOD_GROUP.replace('"cooperative"', '"pingpong"').replace('"256x128x64"', '"128x64x64"'),
         "does not support the stream_k scheduler"),
        (GOOD_GROUP.replace('"cooperative"', '"pingpong"').replace(', "stream_k"', ""), "must be 64 or 128"),
        (GOOD_GROUP.replace('"128x128x64"', '"128x100x64"'), "is not supported"),
        (GOOD_GROUP.replace('"128x128x64"', '"128x264x64"'), "is not supported"),
        (GOOD_GROUP.replace('"128x128x64"', '"128x152x64"'), "N 8 or a multiple of 16"),
        (GOOD_GROUP.replace('"128x128x64"', '"128x24x64"'), "N 8 or a multiple of 16"),
        (GOOD_GROUP.replace('"256x128x64"', '"256x176x64"'), "needs 176 accumulator registers"),
        (GOOD_GROUP.replace('"128x128x64"', '"128x128"'), "is not of the form NxNxN"),
        (GOOD_GROUP.replace('"2x1"', '"8x1"'), "cluster 8x1 is not supported"),
        (GOOD_GROUP.replace('"2x1"', '"4x2"'), "cluster 4x2 is not supported"),
        (GOOD_GROUP.replace('["bf16"]', '["int8"]'), "dtypes has 'int8'"),
        (GOOD_GROUP.replace('["bf16"]', '[]'), "must be a non-empty list"),
        (GOOD_GROUP.replace("dtypes", "dtype"), "missing keys \\['dtypes'\\], unknown keys \\['dtype'\\]"),
        (GOOD_GROUP + GOOD_GROUP, "already defined by"),
        (GOOD_GROUP.replace('"cooperative"', '"warp"'), "schedule 'warp'"),
        (GOOD_GROUP + '[kernel_sets]\nsmall = ["nothing_*"]\n', "selects no variant"),
        (GOOD_GROUP + '[kernel_sets]\nfull = ["*"]\n', "is built in"),
        (GOOD_GROUP + '[kernel_sets]\ntables = ["*"]\n', "is built in"),
        (GOOD_GROUP + '[kernel_sets]\nbuiltin = ["*"]\n', "is built in"),
        (GOOD_GROUP.replace('["col"]', '["row"]').replace("[[group]]", "[[group]]\nswap_ab = true"),
         "swap_ab is supported for column-major B"),
        (GOOD_GROUP.replace("[[group]]", "[[group]]\nswap_ab = 1"), "swap_ab must be true or false"),
        (GOOD_GROUP.replace('"128x128x64"', '"128x32x64"'), "tile N below 64 is for swap_ab groups"),
        (GOOD_GROUP.replace("[[group]]", '[[group]]\nscales = "block64"'), "scales 'block64'; allowed: block128"),
        (GOOD_GROUP.replace("[[group]]", '[[group]]\nscales = "block128"'), "name_format has no \\{scales\\}"),
        ("", "no \\[\\[group\\]\\] tables"),
        ("[[group\n", "cannot read config space"),
    ],
)
def test_bad_files_are_refused_with_the_reason(tmp_path, body, message):
    with pytest.raises(cs.ConfigError, match=message):
        cs.load(write(tmp_path, body))


def test_bad_header_is_refused(tmp_path):
    with pytest.raises(cs.ConfigError, match="schema must be 1"):
        cs.load(write(tmp_path, GOOD_GROUP, header='schema = 2\narch = "sm90a"\n'))
    with pytest.raises(cs.ConfigError, match="arch must be one of sm80, sm89, sm90a"):
        cs.load(write(tmp_path, GOOD_GROUP, header='schema = 1\narch = "sm70"\n'))
    with pytest.raises(cs.ConfigError, match="cannot read"):
        cs.load(tmp_path / "missing.toml")


def test_swap_ab_group(tmp_path):
    space = cs.load(write(tmp_path, GOOD_GROUP.replace("[[group]]", "[[group]]\nswap_ab = true")
                          .replace('"128x128x64"', '"128x16x128"')))
    v = space.variants[0]
    assert v.swap_ab and v.name == "bf16_bcol_swapab_cooperative_128x16x128_1x1_persistent"
    text = cs.render_variant(v, "x.toml")
    assert "(bf16_bcol_swapab_cooperative_128x16x128_1x1_persistent, bf16, col, true, cooperative, 128, 16, 128," in text


def test_a_scales_group_is_named_and_instantiated_by_its_scales():
    """The shipped FP8 space: its block-scaled groups carry "_block128" in their names and are instantiated by
    the template's _BLOCK128_ macro; the others keep the plain names and macro."""
    space = cs.load(CONFIG_SPACE.parent / "sm90_scaled_gemm.toml")
    block = [v for v in space.variants if v.scales == "block128"]
    assert block and all(f"_block128{'_swapab' if v.swap_ab else ''}_{v.schedule}_" in v.name for v in block)
    assert "WAVETUNE_SCALED_BLOCK128_INSTANTIATE_VARIANT(" + block[0].name in cs.render_variant(block[0], "x.toml")
    plain = next(v for v in space.variants if not v.scales)
    assert "_block128" not in plain.name
    assert "WAVETUNE_SCALED_INSTANTIATE_VARIANT(" + plain.name in cs.render_variant(plain, "x.toml")


def test_generate_writes_one_source_per_variant_and_only_on_change(tmp_path):
    space = cs.load(write(tmp_path, GOOD_GROUP))
    out = tmp_path / "gen"
    sources = cs.generate(space, out, "full", "*_persistent", with_kernels=True)
    assert [p.name for p in sources] == [f"{v.name}.cu" for v in space.variants if v.scheduler == "persistent"]
    text = sources[1].read_text()
    assert '#include "sm90_gemm.cuh"' in text
    assert ("WAVETUNE_INSTANTIATE_VARIANT(bf16_bcol_cooperative_128x128x64_2x1_persistent, bf16, col, "
            "false, cooperative, 128, 128, 64, 2, 1, persistent)") in text
    registry = (out / "registry.inc").read_text()
    assert f'#define WAVETUNE_CONFIG_SPACE_HASH "{space.hash}"' in registry
    assert len(compiled_rows(registry)) == len(sources)
    assert compiled_rows(registry)[1].startswith("WAVETUNE_VARIANT(2, bf16_bcol_cooperative_128x128x64_2x1_persistent, "
                                                 "bf16, col, false,")
    assert all(row.endswith(", sm90a)") for row in compiled_rows(registry))  # the space's arch, per variant
    assert registry.count("  WAVETUNE_VARIANT(") == len(sources) + len(space.variants)  # and the whole space

    # Unchanged sources keep their timestamps (no recompilation); a narrowed set removes stale ones.
    os.utime(sources[0], (1, 1))
    again = cs.generate(space, out, "full", "*_persistent", with_kernels=True)
    assert again == sources and sources[0].stat().st_mtime == 1
    fewer = cs.generate(space, out, "full", "*128x128x64_1x1_persistent", with_kernels=True)
    assert sorted((out / "variants").glob("*.cu")) == fewer and len(fewer) == 1


FALLBACK = """
[fallback]
col = [[64, "bcol_cooperative_128x128x64_1x1_persistent"], [0, "bcol_cooperative_256x128x64_2x1_persistent"]]
row = [[0, "brow_cooperative_128x128x64_1x1_persistent"]]
"""


def test_fallback_and_the_tables_kernel_set(tmp_path):
    body = GOOD_GROUP + GOOD_GROUP.replace('["col"]', '["row"]').replace('["bf16"]', '["bf16", "fp16"]') + FALLBACK
    body = body.replace('["bf16"]', '["bf16", "fp16"]')
    space = cs.load(write(tmp_path, body))
    assert [(d, layout, m, v.name) for d, layout, m, v in space.fallback][:2] == [
        ("bf16", "col", 64, "bf16_bcol_cooperative_128x128x64_1x1_persistent"),
        ("bf16", "col", 0, "bf16_bcol_cooperative_256x128x64_2x1_persistent")]
    assert len(space.fallback) == 2 * 3  # both dtypes
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "gpu.wtt").write_text("wavetune-table 4\nconfig 0 bf16_bcol_cooperative_128x128x64_2x1_stream_k split_k 2\n")
    chosen = {v.name for v in space.select("tables", tables_dir=tables)}
    assert chosen == {v.name for *_, v in space.fallback} | {"bf16_bcol_cooperative_128x128x64_2x1_stream_k"}
    registry = cs.render_registry(space, space.select("tables", tables_dir=tables), "tables")
    fallback_rows = [line for line in registry.splitlines() if line.strip().startswith("WAVETUNE_FALLBACK(")]
    assert fallback_rows[0].strip().startswith("WAVETUNE_FALLBACK(bf16, col, 64, ")
    assert len(fallback_rows) == 6
    # Only compiled fallback variants are listed: a narrower set drops the others.
    narrow = cs.render_registry(space, space.select("full", "bf16_*"), "x")
    assert len([line for line in narrow.splitlines() if line.strip().startswith("WAVETUNE_FALLBACK(")]) == 3


@pytest.mark.parametrize(
    "fallback, message",
    [
        ('[fallback]\ncol = [[0, "bcol_cooperative_128x128x64_1x1_persistent"]]\n', "needs a bucket list for each B layout"),
        ('[fallback]\ncol = [[0, "bcol_nope"]]\nrow = [[0, "bcol_nope"]]\n', "is not a col-major variant"),
        ('[fallback]\ncol = [[64, "bcol_cooperative_128x128x64_1x1_persistent"]]\n'
         'row = [[0, "brow_cooperative_128x128x64_1x1_persistent"]]\n', "last bucket must be 0"),
        ('[fallback]\ncol = [[64, "x"], [16, "x"], [0, "x"]]\nrow = [[0, "x"]]\n', "must ascend"),
        ('[fallback]\ncol = [64]\nrow = [[0, "x"]]\n', "list of \\[max_m, variant\\] pairs"),
    ],
)
def test_bad_fallback_is_refused(tmp_path, fallback, message):
    body = GOOD_GROUP + GOOD_GROUP.replace('["col"]', '["row"]') + fallback
    with pytest.raises(cs.ConfigError, match=message):
        cs.load(write(tmp_path, body))


def test_shipped_fallback_covers_every_dtype_and_layout():
    space = cs.load(CONFIG_SPACE)
    assert {(d, layout) for d, layout, *_ in space.fallback} == {(d, b) for d in cs.DTYPES for b in cs.B_LAYOUTS}


def test_generate_without_kernels_writes_an_empty_registry(tmp_path):
    space = cs.load(write(tmp_path, GOOD_GROUP))
    assert cs.generate(space, tmp_path / "gen", "full", "", with_kernels=False) == []
    registry = (tmp_path / "gen" / "registry.inc").read_text()
    assert '#define WAVETUNE_KERNEL_SET_NAME "none"' in registry
    assert compiled_rows(registry) == []


def test_command_line_reports_errors(tmp_path, capsys):
    assert cs.main([str(write(tmp_path, GOOD_GROUP)), str(tmp_path / "gen"), "--kernel-set=nope"]) == 1
    assert "unknown kernel set 'nope'" in capsys.readouterr().err
    assert cs.main([str(write(tmp_path, GOOD_GROUP)), str(tmp_path / "gen"), "--filter=*2x1_stream_k"]) == 0
    printed = capsys.readouterr().out.strip().split(";")
    assert [p.rsplit("/", 1)[-1] for p in printed] == [
        "bf16_bcol_cooperative_128x128x64_2x1_stream_k.cu", "bf16_bcol_cooperative_256x128x64_2x1_stream_k.cu"]


def test_the_family_table_says_how_the_family_is_generated(tmp_path):
    """Each file names its family and how its code is generated in a [family] table: codegen has no list of
    families, so a file without one (or with a bad one) is refused with what it needs."""
    space = cs.load(write(tmp_path, GOOD_GROUP))
    assert space.family == "gemm" and space.generation.macro_prefix == "WAVETUNE"
    assert space.generation.registry == "registry.inc" and space.generation.sources_dir == "variants"
    path = tmp_path / "bare.toml"
    path.write_text('schema = 1\narch = "sm90a"\n' + GOOD_GROUP)
    with pytest.raises(cs.ConfigError, match=r"no \[family\] table"):
        cs.load(path)
    for old, new, message in [('check = "gemm"', 'check = "conv"', "check 'conv'; allowed: gemm, attention"),
                              ('macro_prefix = "WAVETUNE"\n', "", r"misses keys \['macro_prefix'\]"),
                              ('check = "gemm"', 'check = "gemm"\nfixed_axes = { tiles = 3 }', "must be a non-empty list"),
                              ('check = "gemm"', 'check = "gemm"\nfixed_axes = { warps = ["4"] }', "fixed_axes must be a table")]:
        path.write_text('schema = 1\narch = "sm90a"\n' + GOOD_GROUP + family_table().replace(old, new))
        with pytest.raises(cs.ConfigError, match=message):
            cs.load(path)
    # A new family is a new file: its [family] table alone names it, its template and its registry.
    path.write_text('schema = 1\narch = "sm90a"\n' + GOOD_GROUP + family_table().replace('"gemm"', '"conv"', 1)
                    .replace('"WAVETUNE"', '"WAVETUNE_CONV"').replace('"registry.inc"', '"conv_registry.inc"')
                    .replace('"variants"', '"conv_variants"').replace('name_format = "', 'name_format = "conv_'))
    conv = cs.load(path)
    assert conv.family == "conv" and all(v.name.startswith("conv_") for v in conv.variants)
    sources = cs.generate(conv, tmp_path / "gen", "full", "", with_kernels=True)
    assert {p.parent.name for p in sources} == {"conv_variants"}
    assert "WAVETUNE_CONV_INSTANTIATE_VARIANT(" in sources[0].read_text()
    assert '#define WAVETUNE_CONV_CONFIG_SPACE_HASH' in (tmp_path / "gen" / "conv_registry.inc").read_text()


def test_generated_sources_of_the_shipped_spaces_are_unchanged(tmp_path):
    """The generated files of the shipped spaces: the C++ side includes them by these names and macros, and
    the first line still names the generator's former path (nothing recompiles after its move)."""
    spaces = [cs.load(CONFIG_SPACE.parent / f"sm90_{f}.toml") for f in ("gemm", "grouped_gemm", "attention")]
    cs.generate_families(spaces, tmp_path, "full", "", True)
    names = {p.name for p in tmp_path.iterdir()}
    family_code = {f"{f}_{kind}.cpp" for f in ("gemm", "grouped_gemm", "attention")
                   for kind in ("registration", "unavailable", "bindings")}
    assert names == {"registry.inc", "grouped_registry.inc", "attention_registry.inc", "variants", "grouped_variants",
                     "attention_variants", "families.inc", "attention_model_data.h", "family_sources.cmake",
                     *family_code}
    families = (tmp_path / "families.inc").read_text()
    assert '#include "grouped_registry.inc"' in families and ('WAVETUNE_FAMILY("grouped_gemm", '
                                                              "WAVETUNE_GROUPED_CONFIG_SPACE_HASH, "
                                                              "WAVETUNE_GROUPED_VARIANT_LIST)") in families
    text = (tmp_path / "grouped_registry.inc").read_text()
    assert text.startswith("// Generated by python/wavetune/codegen/config_space.py from sm90_grouped_gemm.toml. Do not edit.\n")
    assert "#define WAVETUNE_GROUPED_VARIANT_LIST(WAVETUNE_VARIANT)" in text
    one = next((tmp_path / "attention_variants").iterdir()).read_text()
    assert '#include "sm90_attention.cuh"' in one and "WAVETUNE_ATTENTION_INSTANTIATE_VARIANT(attn_" in one


MODEL = """
[model]
wave_steps = { value = 8.0, why = "what a wave adds" }
split_counts = { value = [1, 2, 4, 8], why = "the splits weighed" }
share = { value = 3, why = "a third of the SMs" }
persistent = { value = true, why = "a flag" }
"""


def test_a_model_table_is_generated_into_the_familys_model_struct(tmp_path):
    """A family's [model] table: its named constants, each with a one-line why, become the fields of
    <Family>Model in <family>_model_data.h, in the file's order, with a visitor the bindings read them by; a
    file without one generates no struct."""
    space = cs.load(write(tmp_path, GOOD_GROUP + MODEL))
    assert [(v.name, v.value, v.cpp_type) for v in space.model] == [
        ("wave_steps", 8.0, "double"), ("split_counts", (1, 2, 4, 8), "std::array<int64_t, 4>"),
        ("share", 3, "int64_t"), ("persistent", True, "bool")]
    cs.generate(space, tmp_path / "gen", "full", "", with_kernels=False)
    text = (tmp_path / "gen" / "gemm_model_data.h").read_text()
    assert text.startswith("// Generated by python/wavetune/codegen/config_space.py from space.toml's [model] table.")
    assert "struct GemmModel {\n  // what a wave adds\n  double wave_steps = 8.0;\n" in text
    assert "  std::array<int64_t, 4> split_counts = {1, 2, 4, 8};\n" in text and "bool persistent = true;" in text
    assert text.index('visit("wave_steps", self.wave_steps);') < text.index('visit("persistent", self.persistent);')
    bare = cs.load(write(tmp_path, GOOD_GROUP))
    cs.generate(bare, tmp_path / "bare", "full", "", with_kernels=False)
    assert bare.model == () and not (tmp_path / "bare" / "gemm_model_data.h").exists()


@pytest.mark.parametrize("entry, message", [
    ('wave_steps = 8.0', "must be \\{ value = ..., why"),
    ('wave_steps = { value = 8.0 }', "must be \\{ value = ..., why"),
    ('wave_steps = { value = 8.0, why = "" }', "why must be one non-empty line"),
    ('WaveSteps = { value = 8.0, why = "x" }', "a name is lower case letters"),
    ('wave_steps = { value = "8", why = "x" }', "value must be a bool, an integer, a float"),
    ('wave_steps = { value = [1, 2.0], why = "x" }', "value must be a bool, an integer, a float"),
    ('wave_steps = { value = [], why = "x" }', "value must be a bool, an integer, a float"),
    ('wave_steps = { value = [true], why = "x" }', "value must be a bool, an integer, a float"),
    ('wave_steps = { value = nan, why = "x" }', "value must be finite"),
])
def test_bad_model_entries_are_refused_with_the_reason(tmp_path, entry, message):
    with pytest.raises(cs.ConfigError, match=f"\\[model\\] {entry.split()[0]}: {message}"):
        cs.load(write(tmp_path, GOOD_GROUP + "[model]\n" + entry + "\n"))


def test_every_shipped_model_is_what_its_binding_reads():
    """Python reads a family's built-in model through _C.<family>_model(): for each shipped config file with a
    [model] table, the compiled struct holds the file's values."""
    from wavetune import _C

    with_model = [s for s in map(cs.load, sorted(CONFIG_SPACE.parent.glob("*.toml"))) if s.model]
    assert {s.family for s in with_model} >= {"scaled_gemm", "attention"}
    for space in with_model:
        bound = getattr(_C, f"{space.family}_model")()
        assert bound == {v.name: list(v.value) if isinstance(v.value, tuple) else v.value for v in space.model}


def test_the_family_table_generates_the_registration_stubs_and_bindings(tmp_path):
    """A family's registry, its launch stubs without nvcc and its bindings' registration are generated from the
    C++ names of its [family] table; its kernel_entries (built-in variants of its .cu files) only with kernels."""
    space = cs.load(CONFIG_SPACE)
    cs.generate_families([space], tmp_path / "cuda", "builtin", "", True)
    cs.generate_families([space], tmp_path / "none", "builtin", "", False)
    registration = (tmp_path / "cuda" / "gemm_registration.cpp").read_text()
    assert "extern const VariantOps variant_##NAME;" in registration
    assert "{decode_variants(), library_variants()}" in registration
    assert 'registration("gemm", &detail::config_space_hash)' in registration
    assert "const VariantInfo* find_variant(int32_t id)" in registration
    assert "{}" in (tmp_path / "none" / "gemm_registration.cpp").read_text().split("WAVETUNE_REGISTRY_ENTRY)},")[1]
    stubs = (tmp_path / "cuda" / "gemm_unavailable.cpp").read_text()
    assert [line.split(" {")[0] for line in stubs.splitlines() if "WAVETUNE_FAIL" in line] == list(space.generation.code.stubs)
    bindings = (tmp_path / "cuda" / "gemm_bindings.cpp").read_text()
    assert 'FamilyBindings registration("gemm", &bind);' in bindings and "bind_gemm(m, registration);" in bindings
    assert 'm.def("variants", [] { return variant_dicts(variants()); }' in bindings
    assert "config_space_hash" not in bindings  # private: build_info gives it
    listed = (tmp_path / "cuda" / "family_sources.cmake").read_text()
    assert f'set(WAVETUNE_GENERATED_BINDINGS "{(tmp_path / "cuda" / "gemm_bindings.cpp").resolve()}")' in listed

    path = tmp_path / "bad.toml"
    for old, new, message in [('ops = "VariantOps"', 'ops = "Variant Ops"', "ops must be a C\\+\\+ name"),
                              ('public_header = "wavetune/kernels.h"', 'public_header = "kernels"',
                               "public_header must be a C\\+\\+ header"),
                              ('kernel_entries = [', 'kernel_entries = ["f()", ', "kernel_entries must be a C\\+\\+ name"),
                              ('stubs = [', 'stubs = ["void f", ', "stubs must be a C\\+\\+ declaration"),
                              ('variant_ops = "variant_ops"\n', "", r"misses keys \['variant_ops'\]")]:
        path.write_text('schema = 1\narch = "sm90a"\n' + GOOD_GROUP + family_table().replace(old, new))
        with pytest.raises(cs.ConfigError, match=message):
            cs.load(path)

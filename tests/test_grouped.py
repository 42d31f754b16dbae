"""The grouped-GEMM family without a GPU: its config file and code generation, the mapping (C++ through
the bindings, against hand-worked coordinates), the built-in heuristic, and grouped_gemm's input checks."""

from __future__ import annotations

import fnmatch
import math
import random

import pytest

import wavetune
from conftest import CONFIG_SPACE, compiled_rows, family_table
from wavetune import _C
from wavetune.codegen import config_space as cs
from wavetune.families.grouped_gemm import mapping as gm

GROUPED_SPACE = CONFIG_SPACE.parent / "sm90_grouped_gemm.toml"
HEADER = 'schema = 1\narch = "sm90a"\n'
GROUP = """
[[group]]
dtypes = ["bf16"]
swap_ab = true
schedule = "pingpong"
tiles = ["64x32x128"]
clusters = ["1x1"]
"""


def write(tmp_path, body, name="grouped.toml", family=family_table("grouped_gemm")):
    path = tmp_path / name
    path.write_text(body + family)
    return path


def shape(v):
    return (v.tile_m, v.tile_n, v.tile_k), (v.cluster_m, v.cluster_n), v.swap_ab


# ---- the config file and generation ---------------------------------------------------------------

def test_shipped_grouped_space():
    space = cs.load(GROUPED_SPACE)
    assert space.family == "grouped_gemm"
    assert [v.id for v in space.variants] == list(range(len(space.variants)))
    fragments = dict(space.generation.scales)  # how names spell each scales mode: e4m3_grouped_..., ...
    assert all(v.name.startswith(fragments.get(v.scales, "") + "grouped_") and v.b_layout == "col"
               and v.scheduler == "persistent" for v in space.variants)
    modes = {layout["name"] for layout in _C.GROUPED_SCALES}
    assert {v.scales for v in space.variants} == modes and {"", "row", "block128"} <= modes
    names = {v.name for v in space.variants}
    assert not names & {v.name for v in cs.load(CONFIG_SPACE).variants}, "names become C++ symbols: no clashes"
    # torch._grouped_mm's two configs are in the space, and swap-AB tiles for few tokens per expert.
    assert {"grouped_bf16_pingpong_64x128x128_2x1", "grouped_bf16_cooperative_128x256x64_2x1"} <= names
    assert any(v.swap_ab and v.tile_n <= 32 for v in space.variants)
    # The tables build compiles the heuristic's Hopper variants for both dtypes and what the shipped grouped
    # tables name; CI compiles one grouped variant of each scales mode.
    tables = CONFIG_SPACE.parents[1] / "tables"
    chosen = {v.name for v in space.select("tables", tables_dir=tables)}
    heuristic = [v for v in space.variants if any(fnmatch.fnmatch(v.name, p) for p in space.heuristic_variants)]
    assert len(heuristic) == 2 * len(space.heuristic_variants)
    hopper = {v.name for v in heuristic if v.arch == space.arch}
    assert chosen == hopper | (cs.table_variant_names(tables) & names)
    assert sorted(v.scales for v in space.select("ci")) == sorted(modes)


def test_grouped_variant_names_and_fixed_axes(tmp_path):
    v = cs.load(write(tmp_path, HEADER + GROUP)).variants[0]
    assert v.name == "grouped_bf16_swapab_pingpong_64x32x128_1x1"
    assert (v.b_layout, v.scheduler, v.family) == ("col", "persistent", "grouped_gemm")
    text = cs.render_variant(v, "g.toml")
    assert '#include "grouped_scales.cuh"' in text
    assert "WAVETUNE_GROUPED_INSTANTIATE_VARIANT(grouped_bf16_swapab_pingpong_64x32x128_1x1, bf16, col, true," in text
    # A scales mode: named with its fragment, instantiated by its macro.
    for scales, name in (("row", "e4m3_grouped_bf16_swapab_pingpong_64x32x128_1x1"),
                         ("block128", "e4m3_block128_grouped_bf16_swapab_pingpong_64x32x128_1x1")):
        v = cs.load(write(tmp_path, HEADER + GROUP.replace("[[group]]", f'[[group]]\nscales = "{scales}"'))).variants[0]
        assert (v.name, v.scales) == (name, scales)
        assert f"WAVETUNE_GROUPED_{scales.upper()}_INSTANTIATE_VARIANT({name}, bf16," in cs.render_variant(v, "g.toml")


@pytest.mark.parametrize(
    "body, message",
    [
        (HEADER + GROUP.replace("[[group]]", '[[group]]\nb_layouts = ["row"]'), "has b_layouts = \\['col'\\] only"),
        (HEADER + GROUP.replace("[[group]]", '[[group]]\nschedulers = ["stream_k"]'),
         "has schedulers = \\['persistent'\\] only"),
        (HEADER + 'heuristic_variants = ["grouped_fp16_*"]\n' + GROUP, "matches no variant"),
        (HEADER + GROUP.replace('"1x1"', '"1x2"').replace('"64x32x128"', '"64x128x128"').replace(
            "swap_ab = true\n", "").replace("pingpong", "cooperative"), "cooperative tiles split M"),
    ],
)
def test_bad_grouped_space_is_refused(tmp_path, body, message):
    with pytest.raises(cs.ConfigError, match=message):
        cs.load(write(tmp_path, body))


def test_generation_over_families(tmp_path):
    dense, grouped = cs.load(CONFIG_SPACE), cs.load(GROUPED_SPACE)
    out = tmp_path / "gen"
    # A filter that only grouped variants pass: the dense registry is empty, not an error.
    sources = cs.generate_families([dense, grouped], out, "full", "grouped_bf16_*", True)
    assert sources and all(p.parent.name == "grouped_variants" for p in sources)
    assert compiled_rows((out / "registry.inc").read_text()) == []
    registry = (out / "grouped_registry.inc").read_text()
    assert f'#define WAVETUNE_GROUPED_CONFIG_SPACE_HASH "{grouped.hash}"' in registry
    assert len(compiled_rows(registry)) == len(sources)
    # `ci` is defined in both files; the sets join.
    ci = cs.generate_families([dense, grouped], out, "ci", "", True)
    assert len(ci) == len(dense.select("ci")) + len(grouped.select("ci"))
    assert not (out / "grouped_variants" / sources[0].name).exists()
    with pytest.raises(cs.ConfigError, match="unknown kernel set 'nope'"):
        cs.generate_families([dense, grouped], out, "nope", "", True)
    with pytest.raises(cs.ConfigError, match="selects no variant"):
        cs.generate_families([dense, grouped], out, "full", "int8_*", True)
    with pytest.raises(cs.ConfigError, match="one config-space file per kernel family"):
        cs.generate_families([grouped, grouped], out, "full", "", True)
    assert cs.main([str(CONFIG_SPACE), str(GROUPED_SPACE), str(out), "--filter=grouped_fp16_*"]) == 0


# ---- the mapping ----------------------------------------------------------------------------------

def test_mapping_by_hand():
    sms = 132
    # Decode: 1 token at top-8 on a 128-expert layer is 8 rows on 8 busy experts, not 128 experts.
    coords = gm.balanced((64, 32, 128), (1, 1), True, rows=8, experts=128, n=1536, k=2048, sm_count=sms)
    assert coords == (8 * 1536 // 64, 16, 132, 2)
    # Prefill: 512 rows on each of 256 experts, 128x256 tiles in 2x1 clusters.
    coords = gm.balanced((128, 256, 64), (2, 1), False, rows=131072, experts=256, n=4096, k=7168, sm_count=sms)
    assert coords == (256 * 4 * 16, 112, 132, math.ceil(256 * 64 / 132))
    # Cluster padding per expert: 3 row tiles round up to 4 with 2x1 clusters; an empty expert has none.
    assert gm.expert_tiles((128, 128, 64), (2, 1), False, rows=300, n=256) == 4 * 2
    assert gm.expert_tiles((128, 128, 64), (2, 1), False, rows=0, n=256) == 0
    assert gm.routed((64, 16, 128), (1, 1), True, [0, 20, 0, 3], n=512, k=64, sm_count=sms).grid == 8 * 2 + 8
    assert gm.balanced((64, 16, 128), (1, 1), True, rows=0, experts=8, n=512, k=64, sm_count=sms).waves == 0


def test_balanced_estimate_is_exact_for_even_routing_and_misses_skew_either_way():
    t = ((64, 128, 128), (1, 1), False)
    sizes = dict(n=2048, k=1024, sm_count=132)
    even = gm.routed(*t, [30] * 16, **sizes)
    assert gm.balanced(*t, rows=480, experts=16, **sizes) == even
    assert gm.routed(*t, [60] * 8 + [0] * 8, **sizes).grid < even.grid  # gathered: fuller tiles
    assert gm.routed(*t, [480 - 15] + [1] * 15, **sizes).grid > even.grid  # one hot expert: more partial tiles


def test_the_balanced_mapping_is_the_routed_one_of_its_even_spread():
    """map_grouped_balanced is the exact mapping of its own picture: min(experts, rows) busy experts with
    ceil(rows / busy) rows each, the rest empty; over every grouped variant's shape and random layers."""
    shapes = [shape(v) for v in cs.load(GROUPED_SPACE).variants]
    rng = random.Random(17)
    for _ in range(400):
        tile, cluster, swap = rng.choice(shapes)
        rows, experts = rng.choice([0, 1, 7, 64, 333, 4096, 131072]), rng.choice([1, 8, 128, 256])
        n, k, sms = 8 * rng.randint(1, 2048), 8 * rng.randint(1, 1024), rng.choice([78, 114, 132])
        busy, rows_each = gm.balanced_groups(rows, experts)
        assert busy == min(rows, experts) and rows_each == (-(-rows // busy) if busy else 0)
        spread = [rows_each] * busy + [0] * (experts - busy)
        assert gm.balanced(tile, cluster, swap, rows, experts, n, k, sms) == gm.routed(tile, cluster, swap, spread,
                                                                                       n, k, sms)


def test_bad_tile_shapes_are_refused():
    with pytest.raises(ValueError, match="sides must be >= 1"):
        gm.balanced((64, 0, 128), (1, 1), True, rows=8, experts=8, n=512, k=64, sm_count=132)


# ---- the built-in heuristic -----------------------------------------------------------------------

def heuristic_choice(rows, experts, n, k, sms=132, dtype="bf16"):
    variants = [v for v in cs.load(GROUPED_SPACE).variants if v.dtype == dtype]
    index, costs = _C.grouped_heuristic([shape(v) for v in variants], rows, experts, n, k, sms)
    return variants[index], costs


def test_heuristic_takes_the_first_cheapest():
    rng = random.Random(3)
    for _ in range(100):
        rows, experts = rng.randint(1, 20000), rng.choice([8, 64, 128, 256])
        chosen, costs = heuristic_choice(rows, experts, 8 * rng.randint(16, 4096), 8 * rng.randint(16, 1024))
        assert costs.index(min(costs)) == [v.name for v in cs.load(GROUPED_SPACE).variants
                                           if v.dtype == "bf16"].index(chosen.name)


@pytest.mark.parametrize("hidden, inter, experts, topk", [(4096, 14336, 8, 2), (2048, 768, 128, 8),
                                                          (4096, 1536, 128, 8), (7168, 2048, 256, 8)])
def test_heuristic_puts_few_tokens_per_expert_on_the_narrow_tile_side(hidden, inter, experts, topk):
    for n, k in [(2 * inter, hidden), (hidden, inter)]:
        assert heuristic_choice(1 * topk, experts, n, k)[0].swap_ab, "decode: a swap-AB variant"
        big, _ = heuristic_choice(16384 * topk, experts, n, k)
        assert not big.swap_ab and big.tile_m >= 64 and big.tile_n >= 128, "prefill: a wide tile"


# ---- grouped_gemm's argument checks (torch on the CPU) -------------------------------------------

def test_compiled_grouped_variants_match_the_config_file():
    expected = {v.id: v for v in cs.load(GROUPED_SPACE).variants}
    listed = wavetune.grouped_configs()
    assert [c.id for c in listed] == sorted(c.id for c in listed)
    for c in listed:
        v = expected[c.id]
        assert (c.name, c.dtype, c.swap_ab, c.schedule) == (v.name, v.dtype, v.swap_ab, v.schedule)
        assert (c.tile, c.cluster, c.b_layout, c.scheduler) == (shape(v)[0], shape(v)[1], "col", "persistent")


class TestInputs:
    torch = pytest.importorskip("torch")

    def operands(self, rows=6, experts=2, n=32, k=64, dtype=None):
        torch = self.torch
        dtype = dtype or torch.bfloat16
        return (torch.randn(rows, k, dtype=dtype), torch.randn(experts, n, k, dtype=dtype),
                torch.tensor([rows // 2, rows] + [rows] * (experts - 2), dtype=torch.int32)[:experts])

    @pytest.mark.parametrize(
        "change, error, message",
        [
            (lambda x, w, o: (x.float().numpy(), w, o), TypeError, "takes torch tensors x, w and offsets, got ndarray"),
            (lambda x, w, o: (x[None], w, o), ValueError, "expected x \\[rows, K\\], w \\[experts, N, K\\]"),
            (lambda x, w, o: (x, w[0], o), ValueError, "expected x \\[rows, K\\]"),
            (lambda x, w, o: (x[:, :32], w, o), ValueError, "differ in K \\(32 != 64\\)"),
            (lambda x, w, o: (x, w, o[:1]), ValueError, "offsets has 1 entries for 2 experts"),
            (lambda x, w, o: (x.float(), w.float(), o), TypeError, "must both be bfloat16 or both float16"),
            (lambda x, w, o: (x, w.half(), o), TypeError, "got torch.bfloat16 and torch.float16"),
            (lambda x, w, o: (x, w, o.long()), TypeError, "offsets must be int32 .* got torch.int64"),
            (lambda x, w, o: (x, w.transpose(1, 2).contiguous().transpose(1, 2), o), ValueError,
             "w must be contiguous"),
            (lambda x, w, o: (x.t().contiguous().t(), w, o), ValueError, "x must be contiguous"),
        ],
    )
    def test_bad_arguments(self, change, error, message):
        with pytest.raises(error, match=message):
            wavetune.grouped_gemm(*change(*self.operands()))

    def test_bad_out(self):
        x, w, o = self.operands()
        expected = "out must be a torch.bfloat16 tensor of shape \\(6, 32\\), got .*\\(6, 16\\)"
        with pytest.raises(ValueError, match=expected):
            wavetune.grouped_gemm(x, w, o, out=x.new_empty(6, 16))
        with pytest.raises(ValueError, match="out must be contiguous"):
            wavetune.grouped_gemm(x, w, o, out=x.new_empty(32, 6).t())

    def test_sizes_are_checked_before_the_device(self):
        x, w, o = self.operands(n=36)
        with pytest.raises(ValueError, match="K=64 and N=36 must be multiples of 8"):
            wavetune.grouped_gemm(x, w, o)
        with pytest.raises(ValueError, match="one CUDA device, got cpu, cpu, cpu"):
            wavetune.grouped_gemm(*self.operands())
        with pytest.raises(ValueError, match="one CUDA device"):
            wavetune.grouped_gemm(*self.operands(rows=0))  # no work, still the wrong device

    def test_bad_config(self):
        with pytest.raises(ValueError, match="no compiled grouped variant 'nope'"):
            wavetune.grouped_gemm(*self.operands(), config="nope")
        with pytest.raises(TypeError, match="grouped variant id or name"):
            wavetune.grouped_gemm(*self.operands(), config=True)


class TestTorchOp:
    """torch.ops.wavetune.grouped_gemm on the CPU: registration, the fake implementation, tracing."""

    torch = pytest.importorskip("torch")

    def meta(self, rows=6, experts=3, n=32, k=64):
        torch = self.torch
        return (torch.empty(rows, k, device="meta", dtype=torch.bfloat16),
                torch.empty(experts, n, k, device="meta", dtype=torch.bfloat16),
                torch.empty(experts, device="meta", dtype=torch.int32))

    def test_registered_with_its_schema(self):
        pytest.importorskip("wavetune.torch_ops")
        schema = str(self.torch.ops.wavetune.grouped_gemm.default._schema)
        assert schema == ("wavetune::grouped_gemm(Tensor x, Tensor w, Tensor offsets, str? batch_invariance=None) "
                          "-> Tensor")

    def test_fake_shapes_and_opcheck(self):
        pytest.importorskip("wavetune.torch_ops")
        y = self.torch.ops.wavetune.grouped_gemm(*self.meta())
        assert (y.shape, y.dtype, y.is_contiguous()) == ((6, 32), self.torch.bfloat16, True)
        results = self.torch.library.opcheck(self.torch.ops.wavetune.grouped_gemm.default, self.meta())
        assert set(results.values()) == {"SUCCESS"}, results

    def test_fake_and_cpu_refusals(self):
        pytest.importorskip("wavetune.torch_ops")
        x, w, offsets = self.meta()
        with pytest.raises(ValueError, match="differ in K"):
            self.torch.ops.wavetune.grouped_gemm(x[:, :32], w, offsets)
        with pytest.raises(TypeError, match="offsets must be int32"):
            self.torch.ops.wavetune.grouped_gemm(x, w, offsets.long())
        cpu = [self.torch.zeros(t.shape, dtype=t.dtype) for t in self.meta()]
        with pytest.raises(ValueError, match="one CUDA device, got cpu"):
            self.torch.ops.wavetune.grouped_gemm(*cpu)

    def test_compile_fullgraph_traces_the_op(self):
        pytest.importorskip("wavetune.torch_ops")
        graphs = []

        def recording_backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        def moe_mlp(x, w_up, w_down, offsets):
            return self.torch.ops.wavetune.grouped_gemm(
                self.torch.relu(self.torch.ops.wavetune.grouped_gemm(x, w_up, offsets)), w_down, offsets)

        x, w_up, offsets = self.meta(n=128)
        w_down = self.torch.empty(3, 64, 128, device="meta", dtype=self.torch.bfloat16)
        y = self.torch.compile(moe_mlp, fullgraph=True, backend=recording_backend)(x, w_up, w_down, offsets)
        assert y.shape == (6, 64)
        targets = [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]
        assert [t for t in targets if t.startswith("wavetune.")] == ["wavetune.grouped_gemm"] * 2


def test_tables_are_bound_to_their_scales_modes_variants(tmp_path):
    """A grouped table carries the hash of its scales mode's variants: another mode's groups added to the space
    leave it valid, its own mode's do not; the build's hashes are the config space's."""
    from wavetune.runtime import tables
    from wavetune.tuning import tablefile

    space = cs.load(GROUPED_SPACE)
    modes = {layout["name"] for layout in _C.GROUPED_SCALES}
    assert _C.config_space("grouped_gemm")["scales_hashes"] == {m: space.scales_hash(m) for m in modes}
    grown = tmp_path / "grown.toml"
    grown.write_text(GROUPED_SPACE.read_text() + GROUP.replace('"64x32x128"', '"64x48x128"').replace(
        "[[group]]", '[[group]]\nscales = "row"'))
    grown = cs.load(grown)
    assert grown.hash != space.hash and grown.scales_hash("row") != space.scales_hash("row")
    assert all(grown.scales_hash(m) == space.scales_hash(m) for m in modes - {"row"})
    read = tablefile.read_table(tables.TABLE_DIR / "nvidia-h200.grouped_gemm.row.wtt")
    assert read["meta"]["config_space_hash"] == space.scales_hash("row")
    tablefile.write_table(tmp_path / "t.wtt", **{**read, "meta": {**read["meta"], "config_space_hash": space.hash}})
    with pytest.raises(ValueError, match=f"compiled from config space {space.scales_hash('row')} \\(its 'row' scales"):
        tables.open_table(tmp_path / "t.wtt", "grouped_gemm")

"""Batch-invariant mode (docs/torch.md, "Batch-invariant mode"; csrc/include/wavetune/batch_invariance.h): its API
(the process-wide setting, the context manager, ``patch(model, batch_invariant=...)``, the operators' argument) and
the choices of the shipped tables in it, whose reduction order may not depend on M (tokens per expert). CPU tier:
the tables are bound to every variant of the config space, as a full install runs them; no GPU or kernels needed.
The GPU checks of the results are tests/test_batch_invariance_gpu.py."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

import wavetune
from conftest import REPO, cpp_program
from wavetune.__main__ import explain_selector
from wavetune.runtime import invariance

TABLES = REPO / "tables"
# The M of a (N, K) that the checks run over: decode to long prefill, powers of two and others.
M_GRID = (1, 2, 3, 5, 8, 13, 16, 31, 32, 33, 64, 100, 128, 129, 256, 500, 512, 1024, 2047, 4096, 8192, 16384)


@pytest.fixture(autouse=True)
def process_level_off():
    """Each test starts and ends with the process-wide level off."""
    invariance.set_batch_invariant(False)
    yield
    invariance.set_batch_invariant(False)


# --- The mode's API ----------------------------------------------------------------------------------------------

def test_the_process_wide_setting_takes_true_false_and_level_names():
    assert wavetune.batch_invariant_level() == "off"
    wavetune.set_batch_invariant(True)
    assert wavetune.batch_invariant_level() == "reduction_order"
    wavetune.set_batch_invariant("config")
    assert wavetune.batch_invariant_level() == "config"
    wavetune.set_batch_invariant(False)
    assert wavetune.batch_invariant_level() == "off"


@pytest.mark.parametrize("bad, error", [(1, TypeError), (None, TypeError), ("fast", ValueError), ("", ValueError)])
def test_bad_settings_are_refused_and_change_nothing(bad, error):
    wavetune.set_batch_invariant("config")
    with pytest.raises(error, match="batch invariance"):
        wavetune.set_batch_invariant(bad)
    with pytest.raises(error, match="batch invariance"):
        with wavetune.batch_invariant(bad):
            pass
    assert wavetune.batch_invariant_level() == "config"


def test_the_context_manager_nests_and_restores_on_exceptions():
    with wavetune.batch_invariant():
        assert wavetune.batch_invariant_level() == "reduction_order"
        with wavetune.batch_invariant("config"):
            assert wavetune.batch_invariant_level() == "config"
            with wavetune.batch_invariant(False):
                assert wavetune.batch_invariant_level() == "off"
            assert wavetune.batch_invariant_level() == "config"
        with pytest.raises(RuntimeError):
            with wavetune.batch_invariant("config"):
                raise RuntimeError("inside")
        assert wavetune.batch_invariant_level() == "reduction_order"
    assert wavetune.batch_invariant_level() == "off"


def two_layer_model() -> torch.nn.Module:
    with torch.device("meta"):
        return torch.nn.Sequential(torch.nn.Linear(64, 128, dtype=torch.bfloat16),
                                   torch.nn.Linear(128, 64, dtype=torch.bfloat16))


def test_a_patched_model_runs_at_its_own_level_whatever_the_process_wide_one():
    model = two_layer_model()
    wavetune.patch(model, batch_invariant=True)
    assert all(isinstance(layer, wavetune.nn.Linear) for layer in model)
    assert [invariance.level_for(layer) for layer in model] == ["reduction_order"] * 2
    with wavetune.batch_invariant("config"):  # the model's own level wins where it is on
        assert invariance.level_for(model[0]) == "reduction_order"
    plain = two_layer_model()
    wavetune.patch(plain)
    assert invariance.level_for(plain[0]) == "off"
    with wavetune.batch_invariant("config"):  # a model patched without it follows the process-wide level
        assert invariance.level_for(plain[0]) == "config"
    wavetune.unpatch(model)
    assert invariance.level_for(model[0]) == "off" and type(model[0]) is torch.nn.Linear


def test_a_patched_transformers_model_runs_its_attention_and_experts_at_its_level():
    pytest.importorskip("transformers")
    from test_hf import build

    model = build("Qwen3MoeForCausalLM", dtype=torch.bfloat16)
    wavetune.patch(model, batch_invariant="config")
    layer = model.model.layers[0]
    assert invariance.level_for(layer.self_attn) == "config" and invariance.level_for(layer.mlp.experts) == "config"
    wavetune.unpatch(model)
    assert invariance.level_for(layer.self_attn) == "off"


def test_patch_refuses_a_bad_level_before_changing_the_model():
    model = two_layer_model()
    with pytest.raises(ValueError, match="unknown batch invariance level 'always'"):
        wavetune.patch(model, batch_invariant="always")
    assert all(type(layer) is torch.nn.Linear for layer in model)


def test_the_operators_take_the_level_as_an_argument():
    for op in ("gemm", "linear", "linear_silu_and_mul", "linear_residual", "grouped_gemm", "attention", "paged_attention"):
        schema = str(getattr(torch.ops.wavetune, op).default._schema)
        assert "str? batch_invariance=None" in schema, schema
    x = torch.empty(4, 64, dtype=torch.bfloat16, device="meta")
    w = torch.empty(32, 64, dtype=torch.bfloat16, device="meta")
    assert torch.ops.wavetune.linear(x, w, None, "config").shape == (4, 32)
    with pytest.raises(ValueError, match="unknown batch invariance level 'yes'"):
        torch.ops.wavetune.linear(x, w, None, "yes")


def test_torch_compile_passes_the_level_read_while_tracing():
    """The patched layer's forward reads its level as torch.compile traces it: the graph's operator carries it, and
    a changed process-wide level is a new trace."""
    layer = wavetune.nn.Linear.from_linear(two_layer_model()[0])
    graphs = []

    def backend(gm, example_inputs):
        graphs.append([node.args for node in gm.graph.nodes if str(node.target) == "wavetune.linear.default"])
        return gm.forward

    compiled = torch.compile(layer, backend=backend, fullgraph=True)
    x = torch.empty(4, 64, dtype=torch.bfloat16, device="meta")
    with torch.inference_mode():
        compiled(x)
        with wavetune.batch_invariant("config"):
            compiled(x)
    torch._dynamo.reset()
    assert [args[-1][-1] for args in graphs] == ["off", "config"]


def test_an_fp8_layer_refuses_batch_invariant_mode():
    fp8 = wavetune.nn.FP8Linear.from_linear(torch.nn.Linear(64, 32, dtype=torch.bfloat16))
    with wavetune.batch_invariant(), pytest.raises(ValueError, match="no batch-invariant GEMM"):
        fp8(torch.randn(2, 64, dtype=torch.bfloat16))


# --- The shipped tables' choices -----------------------------------------------------------------------------------

def shipped(family_suffix: str) -> list[Path]:
    return sorted(p for p in TABLES.glob(f"*{family_suffix}") if (family_suffix != ".wtt" or p.name.count(".") == 1))


def full_selector(table: Path, family: str):
    return explain_selector(table, family)[0]


def layers(seed: int, count: int) -> list[tuple[int, int]]:
    """(N, K) of LLM projections and random multiples of 8."""
    rng = random.Random(seed)
    named = [(4096, 4096), (14336, 4096), (4096, 14336), (1024, 4096), (6144, 4096), (128256, 4096), (2560, 8192)]
    return named + [(8 * rng.randint(1, 3000), 8 * rng.randint(1, 3000)) for _ in range(count)]


def explain_row(selector, choice: dict, *problem, **kw) -> dict:
    return next(r for r in selector.explain(*problem, **kw) if r["config"] == choice["config"])


@pytest.mark.parametrize("table", shipped(".wtt"), ids=lambda p: p.name)
def test_dense_invariant_choices_keep_one_reduction_order_per_layer(table):
    selector = full_selector(table, "gemm")
    varying = 0  # layers whose normal-mode choices change their reduction order with M: what the mode is for
    for dtype, layout in (("bf16", "col"), ("fp16", "row")):
        if not selector.explain(dtype, layout, 1, 4096, 4096):
            continue  # the table has no config of that data
        for n, k in layers(seed=5, count=25):
            classes, configs, normal = set(), set(), set()
            for m in M_GRID:
                choice = selector.select(dtype, layout, m, n, k, batch_invariance="reduction_order")
                row = explain_row(selector, choice, dtype, layout, m, n, k)
                assert row["batch_invariant"] and choice["decomposition"] != "stream_k", (m, n, k, row)
                classes.add(row["order_class"])
                configs.add(selector.select(dtype, layout, m, n, k, batch_invariance="config")["config"])
                plain = selector.select(dtype, layout, m, n, k)
                plain_row = explain_row(selector, plain, dtype, layout, m, n, k)
                normal.add((plain_row["order_class"], plain["splits"]) if plain_row["batch_invariant"] else None)
            assert len(classes) == 1, (dtype, layout, n, k, classes)
            assert len(configs) == 1, (dtype, layout, n, k, configs)
            varying += len(normal) > 1 or None in normal  # None: an order that depends on M (stream-K, cuBLAS)
    assert varying > 0, "no layer's normal-mode choice changes its reduction order: the check above checks nothing"


@pytest.mark.parametrize("table", shipped(".wtt"), ids=lambda p: p.name)
def test_dense_invariant_choices_are_the_normal_ones_where_those_share_the_order(table):
    """reduction_order gives up nothing where the normal choice already has the layer's order: same config."""
    selector = full_selector(table, "gemm")
    same = 0
    for n, k in layers(seed=9, count=10):
        for m in M_GRID:
            plain = selector.select("bf16", "col", m, n, k)
            invariant = selector.select("bf16", "col", m, n, k, batch_invariance="reduction_order")
            order = explain_row(selector, invariant, "bf16", "col", m, n, k)["order_class"]
            plain_row = explain_row(selector, plain, "bf16", "col", m, n, k)
            if plain_row["batch_invariant"] and plain_row["order_class"] == order and plain["source"] == "model":
                assert invariant["predicted_us"] <= plain["predicted_us"] * (1 + 1e-9), (m, n, k, plain, invariant)
                same += 1
    assert same > 0


@pytest.mark.parametrize("table", shipped(".grouped_gemm*.wtt"), ids=lambda p: p.name)
def test_grouped_invariant_choices_keep_one_reduction_order_per_layer(table):
    selector = full_selector(table, "grouped_gemm")
    for experts in (8, 64, 128):
        for n, k in layers(seed=3, count=8):
            classes = set()
            for m in M_GRID:
                choice = selector.select("bf16", "col", m * 8, n, k, groups=experts, batch_invariance="reduction_order")
                row = explain_row(selector, choice, "bf16", "col", m * 8, n, k, groups=experts)
                assert row["batch_invariant"], row
                classes.add(row["order_class"])
            assert len(classes) == 1, (experts, n, k, classes)


def test_reduction_orders_are_derived_from_the_variants():
    selector = full_selector(TABLES / "nvidia-h100-80gb-hbm3.wtt", "gemm")
    rows = {r["name"]: r for r in selector.explain("bf16", "col", 64, 4096, 4096)}
    for name, row in rows.items():
        variant, decomposition, splits = name.split("/")
        if decomposition == "stream_k" or variant.startswith(("cublas", "decode")):
            assert not row["batch_invariant"] and row["order_class"] == 0, row
        else:
            assert row["batch_invariant"] and row["reduction_order"].startswith("wgmma, "), row
            assert ("K unsplit" in row["reduction_order"]) == (decomposition != "split_k" or splits == "1"), row


def test_an_attention_table_has_no_invariant_choice_of_its_own():
    selector = full_selector(TABLES / "nvidia-h100-80gb-hbm3.attention.wtt", "attention")
    with pytest.raises(ValueError, match="keeps the choice from depending on the batch"):
        selector.select("bf16", "col", 1, 4096, 128, groups=4, heads_q=32, heads_kv=8,
                        batch_invariance="reduction_order")


def test_the_lookup_refuses_a_bad_level_and_exact_false_with_a_level():
    selector = full_selector(TABLES / "nvidia-h200.wtt", "gemm")
    with pytest.raises(ValueError, match="unknown batch invariance level 'on'"):
        selector.select("bf16", "col", 8, 4096, 4096, batch_invariance="on")
    with pytest.raises(ValueError, match="exact=False goes with batch_invariance='off'"):
        selector.select("bf16", "col", 8, 4096, 4096, exact=False, batch_invariance="config")


# --- The C++ API -----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def choices(tmp_path_factory):
    import subprocess

    program = cpp_program(REPO / "tests" / "cpp", "choices", tmp_path_factory.mktemp("choices"))

    def run(lines: list[str], *args: str) -> list[str]:
        done = subprocess.run([str(program), *args], input="\n".join(lines) + "\n", capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    return run


def test_cpp_choose_carries_the_level_for_the_dense_gemm(choices):
    """Through the public C++ API (each family's choose with ChoiceOptions), on this build's variants: without a
    table the heuristic's variants of one reduction order, launched data-parallel; with one, one order per layer."""
    lines = [f"gemm bf16 col {m} {n} {k}" for n, k in layers(seed=1, count=5) for m in M_GRID]
    table = f"gemm={TABLES / 'nvidia-h200.wtt'}"
    refused = 0
    for args in ((), (table,)):
        got = choices(lines, "--batch-invariance=config", *args)
        if all(line.startswith("error:") for line in got):  # a build of the decode GEMM alone (kernel set builtin)
            assert "batch-invariant" in got[0] and "python -m wavetune build" in got[0], got[0]
            refused += 1
            continue
        # variant, decomposition, splits: raster and swizzle reorder whole tiles, never a row's reduction
        launches = [" ".join(line.split()[:3]) for line in got]
        per_layer = [set(launches[i:i + len(M_GRID)]) for i in range(0, len(got), len(M_GRID))]
        assert all(len(s) == 1 for s in per_layer), per_layer
        assert all(" stream_k " not in line for line in got)
    if refused == 2:
        pytest.skip(f"no compiled dense variant runs batch-invariantly in kernel set "
                    f"{wavetune.build_info()['kernel_set']!r}: both choices refused, as they should")
    assert choices(["gemm bf16 col 8 4096 4096"], "--batch-invariance=off") == choices(["gemm bf16 col 8 4096 4096"])


def test_cpp_choose_refuses_the_scaled_gemm_in_batch_invariant_mode(choices):
    got = choices(["scaled_gemm bf16 8 4096 4096 row"], "--batch-invariance=reduction_order")
    assert got[0].startswith("error: wavetune: the scaled (FP8) GEMM has no batch-invariant choice")


def test_explain_shows_each_configs_k_order_and_the_batch_invariant_choice():
    import subprocess
    import sys

    table = TABLES / "nvidia-h100-80gb-hbm3.wtt"
    done = subprocess.run([sys.executable, "-m", "wavetune", "explain", "64", "14336", "4096", "--table", str(table),
                           "--top", "60"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    (orders,) = [line for line in lines if line.startswith("K orders (batch-invariant mode chooses one per layer): ")]
    selector = full_selector(table, "gemm")
    rows = selector.explain("bf16", "col", 64, 14336, 4096)
    varying = sum(not r["batch_invariant"] for r in rows)  # stream-K launches, and cuBLAS where libcublas loads
    assert any("/stream_k/" in line for line in lines) and varying >= sum("/stream_k/" in r["name"] for r in rows) > 0
    assert "wgmma, K unsplit: " in orders and orders.endswith(f"; depends on M: {varying}"), orders
    expected = selector.select("bf16", "col", 64, 14336, 4096, batch_invariance="reduction_order")
    (invariant,) = [line for line in lines if line.startswith("batch-invariant choice: ")]
    assert invariant.startswith(f"batch-invariant choice: {expected['name']} (") and "wgmma, K unsplit" in invariant
    attention = subprocess.run([sys.executable, "-m", "wavetune", "explain", "1", "4096", "128", "--groups", "4",
                                "--heads", "32,8", "--table", str(TABLES / "nvidia-h100-80gb-hbm3.attention.wtt")],
                               capture_output=True, text=True, timeout=120)
    assert attention.returncode == 0 and "choice: " in attention.stdout, attention.stderr
    assert not any(line.startswith(("K orders", "batch-invariant choice")) for line in attention.stdout.splitlines())

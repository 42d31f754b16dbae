"""The attention family's paged kernels (csrc/families/attention/paged_launch.cu, wavetune.paged_attention): input
checks, their place in the family and their wave model (paged_model.h) through its bindings and replay (CPU tier);
every kernel against fp32 attention over the same keys (random data, pages not in order, page sizes 16-256 and odd,
odd sequence lengths and empty sequences, grouped-query heads of 1-24 per KV head, poisoned outputs, the wave
model's split count and forced ones, with and without programmatic dependent launch), dense caches through
wavetune.attention's decode path, CUDA graphs and torch.compile (GPU tier)."""

from __future__ import annotations

import math

import pytest

import wavetune
from wavetune import _C, families
from wavetune.families.attention import paged_replay as replay

torch = pytest.importorskip("torch")


def test_the_entry_points_are_the_attention_familys():
    family = families.get("attention")
    assert {"paged_attention", "varlen_attention"} <= set(family.entry_points)
    assert wavetune.paged_attention is family.function("api", "paged_attention")
    assert "paged_attention" not in families.names()  # a kind of kernel of the attention family, not a family
    configs = wavetune.paged_attention_configs()
    if wavetune.build_info()["kernels_compiled"]:
        assert {(c.dtype, c.tile[2]) for c in configs} == {(d, h) for d in ("bf16", "fp16") for h in (64, 128, 256)}
    else:
        assert configs == []


def test_workspace_holds_the_splits_it_runs_and_the_sequences_order():
    sizes = (3, 32, 8, 128, 16, 1000)  # batch, heads_q, heads_kv, head_dim, page_size, max_seq_len
    order = 3 * 4  # an int32 per sequence
    for config in wavetune.paged_attention_configs():
        steps = -(-1000 // config.tile[1])  # CTA steps of the kernel's keys
        assert _C.paged_attention_workspace_bytes(sizes, config.id, 1) == order
        assert _C.paged_attention_workspace_bytes((1, *sizes[1:]), config.id, 1) == 0  # one sequence: no order
        runs = -(-steps // -(-steps // 5))  # 5 requested splits take ceil(steps / 5) steps each: fewer may run
        assert _C.paged_attention_workspace_bytes(sizes, config.id, 5) == 3 * 32 * runs * (128 + 1) * 4 + order
        assert _C.paged_attention_workspace_bytes(sizes, config.id, 200) == 3 * 32 * steps * (128 + 1) * 4 + order
    assert _C.paged_attention_workspace_bytes(sizes, 10**6, 4) == 0  # no such kernel: the launch refuses it


MODEL_VALUES = "paged_attention_model_values.json"


def test_the_bound_model_gives_the_reference_values_exactly():
    """The paged kernels' built-in wave model the choice runs (paged_model.h with the [model] table's paged_
    constants), through its bindings, against reference values of the same functions on a seeded grid of
    problems, kernels and GPUs (tests/data/paged_attention_model_values.json says where they come from): the
    paged kernels' choices stay what they were. Every constant but the ordering threshold (the launch's, not the
    choice's) changes some of them through the bindings' overrides."""
    import json

    from conftest import REPO

    reference = json.loads((REPO / "tests" / "data" / MODEL_VALUES).read_text())
    model = _C.attention_model()
    assert {name: value for name, value in model.items() if name.startswith("paged_")} == reference["model"]
    calls = {
        "predicted": lambda problem, kernel, splits, sms, bandwidth, overrides:
            _C.paged_attention_predicted_us(tuple(problem), tuple(kernel), splits, sms, bandwidth, overrides),
        "best_splits": lambda problem, kernel, sms, bandwidth, overrides:
            list(_C.paged_attention_best_splits(tuple(problem), tuple(kernel), sms, bandwidth, overrides)),
        "candidate": lambda problem, kernel, overrides:
            int(_C.paged_attention_weighs_kernel(tuple(problem), tuple(kernel))),
        "beats": lambda us, resident, best_us, best_resident, overrides:
            int(_C.paged_attention_beats(us, resident, best_us, best_resident, overrides)),
    }
    assert set(calls) == set(reference) - {"about", "model"}

    def changed(overrides):
        return sum(call(*args, overrides) != expected for kind, call in calls.items()
                   for *args, expected in reference[kind]["rows"])

    for kind in calls:
        rows = reference[kind]["rows"]
        assert len(rows) >= 100 and len({str(r[-1]) for r in rows}) > 1, kind  # a grid the model tells apart
    assert changed({}) == 0
    for name in reference["model"].keys() - {"paged_order_min_us"}:
        assert changed({name: 2 * model[name]}) > 0, name


def test_a_paged_model_override_changes_only_what_it_names():
    """The fits sweep a constant through the bound functions' `model` overrides: an override moves the
    prediction by what the model says and leaves the shipped model as it was; bad sizes and wrong names are a
    ValueError naming them."""
    problem, kernel = (2, 8, 1, 128, 1, 8192, 2, 0, True), (64, 64, True, 2, [])  # 2 CTAs a split
    model = _C.attention_model()
    base = _C.paged_attention_predicted_us(problem, kernel, 4, 132, 4.8e6)
    assert _C.paged_attention_predicted_us(problem, kernel, 4, 132, 4.8e6, {"paged_merge_us": 0.0}) == \
        pytest.approx(base - model["paged_merge_us"], rel=1e-12)
    assert _C.attention_model() == model
    clustered = (*kernel[:4], [0, 0] + [256] * 7)
    assert _C.paged_attention_predicted_us(problem, clustered, 4, 132, 4.8e6, {"paged_cluster_split_us": 1.0}) == \
        pytest.approx(_C.paged_attention_predicted_us(problem, clustered, 4, 132, 4.8e6)
                      + 4 * (1.0 - model["paged_cluster_split_us"]), rel=1e-12)
    with pytest.raises(ValueError, match="unknown model field 'wave_us'"):
        _C.paged_attention_predicted_us(problem, kernel, 4, 132, 4.8e6, {"wave_us": 1.0})
    with pytest.raises(ValueError, match="heads_q a multiple of heads_kv"):
        _C.paged_attention_predicted_us((2, 8, 3, 128, 1, 8192, 2, 0, True), kernel, 4, 132, 4.8e6)
    with pytest.raises(ValueError, match="step keys a positive multiple of 16"):
        _C.paged_attention_best_splits(problem, (64, 8, True, 2, []), 132, 4.8e6)
    with pytest.raises(ValueError, match="splits must be >= 1"):
        _C.paged_attention_predicted_us(problem, kernel, 0, 132, 4.8e6)
    with pytest.raises(ValueError, match="sm_count must be >= 1"):
        _C.paged_attention_best_splits(problem, kernel, 132, 0.0)


def test_the_fitting_replay_prices_waves_and_merges():
    """The replay of the choice's wave model (benchmarks/paged_attention.py --fit fits its constants): with the
    shipped ones a long single sequence wants many splits, a batch that fills the GPU wants none, and the replay
    picks the (kernel, splits) it predicts fastest."""
    header = {"sm_count": 132, "memory_bytes_per_s": 3.35e12}
    kernels = {"w8": {"step_keys": 128, "resident": 1}, "w4": {"step_keys": 64, "resident": 2}}

    def predicted(case, kernel, splits):
        return replay.predicted_us(case, splits, kernels[kernel], header)

    long_one = dict(batch=1, heads_q=32, heads_kv=8, head_dim=128, seqlen_k=131072)
    full = dict(batch=256, heads_q=32, heads_kv=8, head_dim=128, seqlen_k=2048)
    assert predicted(long_one, "w8", 16) < predicted(long_one, "w8", 1) / 8
    assert predicted(full, "w8", 1) < predicted(full, "w8", 4)
    times = {f"{k}/s{n}": predicted(long_one, k, n) * (1.5 if n == 16 else 1.0) for k in kernels for n in (1, 4, 16)}
    row = {**long_one, "kernels": kernels, "times": times}
    pick = min(((k, n) for k in kernels for n in (1, 4, 16)), key=lambda kn: predicted(long_one, *kn))
    quality = replay.replay([row], {}, header)[0]
    assert quality == pytest.approx(min(times.values()) / times[f"{pick[0]}/s{pick[1]}"])
    costly_merge = {"paged_merge_us": 1e6}  # a swept constant: splits no longer pay
    assert replay.choice(long_one, kernels, header, costly_merge)[1] == 1
    assert replay.replay([row], costly_merge, header)[0] < quality


def test_the_fitting_replay_counts_the_row_blocks_of_real_queries():
    """Past causal prompts, a batch of chunks whose lengths differ fills only the row blocks its queries need:
    one long chunk beside short ones costs less split than every sequence at the longest, and wants more splits."""
    header = {"sm_count": 132, "memory_bytes_per_s": 3.35e12}
    ws = {"step_keys": 128, "rows": 128, "resident": 1, "wgmma": True}

    def predicted(case, splits):
        return replay.predicted_us(case, splits, ws, header)

    chunks = dict(batch=3, heads_q=12, heads_kv=2, head_dim=128, seqlen_q=663, seqlen_k=5000, causal=True,
                  total_keys=9000, new=[663, 103, 101])
    uniform = {**chunks, "new": [663] * 3}
    assert predicted(chunks, 2) < predicted(uniform, 2)
    best = {name: min(range(1, 33), key=lambda n: predicted(case, n)) for name, case in
            (("chunks", chunks), ("uniform", uniform))}
    assert best["chunks"] > best["uniform"]
    prompts = dict(batch=3, heads_q=12, heads_kv=2, head_dim=128, seqlen_q=663, seqlen_k=663, causal=True,
                   total_keys=867)
    assert predicted({**prompts, "new": [663, 103, 101]}, 1) == predicted(prompts, 1)  # a prompt's keys are its rows


def test_the_fitting_replay_leaves_rows_split_kernels_out_of_decode():
    """As the choice does: where a KV head's query rows fit one 16-row tile, the replay never picks a rows_split
    kernel, however fast the model thinks it, but does pick the warp-specialized one of 64 rows."""
    header = {"sm_count": 132, "memory_bytes_per_s": 3.35e12}
    kernels = {"keys": {"step_keys": 128, "rows": 16, "resident": 1},
               "rows": {"step_keys": 64, "rows": 64, "resident": 2},
               "ws128": {"step_keys": 64, "rows": 128, "resident": 1, "wgmma": True},
               "ws64": {"step_keys": 64, "rows": 64, "resident": 2, "wgmma": True}}
    case = dict(batch=64, heads_q=32, heads_kv=8, head_dim=128, seqlen_k=4096)
    predicted = {k: replay.predicted_us(case, 1, kernels[k], header) for k in kernels}
    assert predicted["rows"] < predicted["keys"]  # the model alone would take the rows_split kernel
    times = {"keys/s1": 20.0, "rows/s1": 10.0, "ws128/s1": 10.0}
    row = {**case, "kernels": kernels, "times": times}
    assert replay.replay([row], {}, header) == [0.5]  # it ran keys/s1, twice the best time
    several = {**row, "seqlen_q": 8}  # 32 rows per KV head: two tiles, every kind is a candidate
    assert replay.replay([several], {}, header) == [1.0]
    assert predicted["ws64"] < predicted["keys"]
    assert replay.replay([{**row, "times": {**times, "ws64/s1": 12.5}}], {}, header) == [0.8]


def test_the_fitting_replay_gives_a_tie_to_the_kernel_of_more_resident_ctas():
    """A step of 56 rows per KV head fills one row block of either warp-specialized kernel: the model prices
    them alike, and (as the choice) the replay takes the one of two CTAs an SM, whichever comes first."""
    header = {"sm_count": 132, "memory_bytes_per_s": 4.8e12}
    kernels = {"rows128": {"step_keys": 64, "rows": 128, "resident": 1, "wgmma": True},
               "rows64": {"step_keys": 64, "rows": 64, "resident": 2, "wgmma": True}}
    case = dict(batch=5, heads_q=8, heads_kv=1, head_dim=128, seqlen_q=7, seqlen_k=2111, causal=True,
                total_keys=5800)
    predicted = {k: replay.predicted_us(case, 16, kernels[k], header) for k in kernels}
    assert predicted["rows128"] == pytest.approx(predicted["rows64"], rel=1e-12)
    for order in (("rows128", "rows64"), ("rows64", "rows128")):
        row = {**case, "kernels": {k: kernels[k] for k in order}, "times": {"rows128/s16": 14.0, "rows64/s16": 12.6}}
        assert replay.replay([row], {}, header) == [1.0]
        assert replay.choice(case, row["kernels"], header)[0] == "rows64"


def test_the_fitting_replay_prices_a_merge_in_clusters_where_the_grid_fits_them():
    """As the choice's model: 2 to 8 splits whose grid the kernel's clusters of that size hold at once pay the
    cluster merge instead of the merge kernel; a larger grid, more splits, or a log without the kernel's cluster
    facts (it ran every merge as a kernel) pay the merge kernel."""
    header = {"sm_count": 132, "memory_bytes_per_s": 4.8e12}
    model = _C.attention_model()
    hbm = model["paged_hbm_fraction"] * 4.8e12 / 1e6
    plain = {"step_keys": 64, "rows": 64, "resident": 2, "wgmma": True}
    clustered = {**plain, "cluster_ctas": [0, 0] + [256] * 7}  # clusters of 2-8

    def predicted(case, kernel, splits):
        return replay.predicted_us(case, splits, kernel, header)

    small = dict(batch=2, heads_q=8, heads_kv=1, head_dim=128, seqlen_k=8192)  # 2 CTAs a split
    merge = model["paged_merge_us"] + 2.0 * 2 * 8 * 4 * 128 * 4 / hbm  # the merge kernel's price at 4 splits
    cluster_merge = model["paged_cluster_merge_us"] + 4 * model["paged_cluster_split_us"]
    assert predicted(small, clustered, 4) == pytest.approx(predicted(small, plain, 4) - merge + cluster_merge,
                                                           rel=1e-12)
    large = {**small, "batch": 80}  # 320 CTAs at 4 splits: more than the clusters hold
    assert predicted(large, clustered, 4) == predicted(large, plain, 4)
    assert predicted(small, clustered, 16) == predicted(small, plain, 16)  # more splits than a cluster's CTAs
    assert predicted(small, clustered, 1) == predicted(small, plain, 1)  # nothing to merge


CLUSTER_FIT_LOGS = [f"{log}.jsonl.gz" for log in (
    "varlen_attention_design_h200_cluster16_run2", "varlen_attention_design_h200_cluster16_run3",
    "paged_decode_heldout_h200_cluster16_run2", "paged_decode_heldout_h200_cluster16_run3",
    "varlen_attention_flashinfer_h200_cluster16_run2", "varlen_attention_flashinfer_h200_cluster16_run3",
    "varlen_attention_flashinfer_h200_cluster16_seed41", "varlen_attention_flashinfer_h200_cluster16_seed43",
    "varlen_attention_heldout_h200_cluster16")]


def test_the_cluster_merge_constants_are_the_replay_optimum_of_their_logs(raw_result):
    """paged_model.h's cluster merge constants, as its NOTES say: on the nine H200 logs they were fitted to, the
    shipped model's choices replay at 0.948 of the best (geomean of the logs' geomeans), and moving either
    constant a step of benchmarks/paged_attention.py --fit's grid replays lower."""
    from wavetune.tuning.report import geomean, read_jsonl

    logs = [read_jsonl(raw_result(name)) for name in CLUSTER_FIT_LOGS]

    def score(model):
        return geomean(geomean(replay.replay(rows, model, header)) for header, rows in logs)

    shipped = score({})
    assert round(shipped, 3) == 0.948
    model = _C.attention_model()
    merge, split = model["paged_cluster_merge_us"], model["paged_cluster_split_us"]
    for neighbour in ((merge - 1, split), (merge + 1, split), (merge, split - 0.1), (merge, split + 0.1)):
        assert score(dict(paged_cluster_merge_us=neighbour[0], paged_cluster_split_us=neighbour[1])) < shipped


@pytest.mark.gpu
def test_the_fitting_replay_makes_the_launchs_choice():
    """The replay's choice (the bound wave model over the compiled kernels' facts on this GPU) is the kernel and
    split count the library picks, on decode cases."""
    import random

    props = wavetune.device_properties()
    rng = random.Random(5)
    for _ in range(40):
        heads_q, heads_kv = rng.choice([(32, 8), (64, 8), (8, 1), (16, 16), (28, 4)])
        case = dict(batch=rng.choice([1, 3, 17, 64, 256]), heads_q=heads_q, heads_kv=heads_kv,
                    head_dim=rng.choice([64, 128, 256]), seqlen_k=rng.randint(300, 131072), causal=True)
        kernels = {c.id: replay.kernel_facts(c) for c in wavetune.paged_attention_configs()
                   if c.dtype == "bf16" and c.tile[2] == case["head_dim"]}
        chosen = _C.paged_attention_chosen_launch(*replay.paged_problem(case), _C.DTYPES.index("bf16"))
        assert chosen == replay.choice(case, kernels, props), case


@pytest.mark.gpu
def test_the_fitting_replay_makes_the_launchs_choice_for_several_queries():
    """The same on prompts and chunks after a prefix (equal lengths in a batch): the kernel and split count
    varlen_attention's kernels run, rows-split ones among them, are the replay's choice."""
    import random

    from wavetune.families.attention.paged import varlen_kernel_choice

    props = wavetune.device_properties()
    rng = random.Random(7)
    for _ in range(30):
        heads_q, heads_kv = rng.choice([(32, 8), (64, 8), (8, 1), (16, 16), (28, 4)])
        batch, head_dim, new = rng.choice([1, 2, 5]), rng.choice([64, 128, 256]), rng.randint(2, 1500)
        keys = new + rng.choice([0, rng.randint(1, 8000)])
        q = torch.empty(batch * new, heads_q, head_dim, device="cuda", dtype=torch.bfloat16)
        k = torch.empty(batch * keys, heads_kv, head_dim, device="cuda", dtype=torch.bfloat16)
        starts = torch.arange(batch + 1, device="cuda", dtype=torch.int32)
        chosen = varlen_kernel_choice(q, k, k, starts * new, starts * keys, new, keys, causal=True)
        case = dict(batch=batch, heads_q=heads_q, heads_kv=heads_kv, head_dim=head_dim, seqlen_q=new, seqlen_k=keys,
                    causal=True, total_keys=batch * keys)
        kernels = {c.id: replay.kernel_facts(c) for c in wavetune.paged_attention_configs()
                   if c.dtype == "bf16" and c.tile[2] == head_dim}
        assert tuple(chosen) == replay.choice(case, kernels, props), case


def cpu_inputs(batch=2, heads_q=8, heads_kv=2, head_dim=64, pages=6, page_size=16):
    q = torch.randn(batch, heads_q, head_dim, dtype=torch.bfloat16)
    k = torch.randn(pages, page_size, heads_kv, head_dim, dtype=torch.bfloat16)
    table = torch.zeros(batch, 3, dtype=torch.int32)
    return q, k, k.clone(), table, torch.full((batch,), 40, dtype=torch.int32)


@pytest.mark.parametrize("change, error, match", [
    (lambda q, k, v, t, s: (q.float(), k, v, t, s), TypeError, "must all be bfloat16 or all float16"),
    (lambda q, k, v, t, s: (q[:, :5], k, v, t, s), ValueError, "multiple of k's"),
    (lambda q, k, v, t, s: (q, k, v[:, :8], t, s), ValueError, "one shape and one set of strides"),
    (lambda q, k, v, t, s: (q, k, v.transpose(0, 1).contiguous().transpose(0, 1), t, s), ValueError,
     "one set of strides"),
    (lambda q, k, v, t, s: (q.unsqueeze(1), k, v, t, s), ValueError, r"q must be \[batch, heads_q, head_dim\]"),
    (lambda q, k, v, t, s: (q, k, v, t.long(), s), ValueError, "block_table must be an int32"),
    (lambda q, k, v, t, s: (q, k, v, t[:1], s), ValueError, "block_table must be an int32 \\[batch=2"),
    (lambda q, k, v, t, s: (q, k, v, t, s[:1]), ValueError, "seq_lens must be a contiguous int32 \\[batch=2\\]"),
    (lambda q, k, v, t, s: (q, k, v, None, s), ValueError, "first dim 6 must be the batch 2"),
    (lambda q, k, v, t, s: (q, k, v, t, s), ValueError, "on one CUDA device"),
])
def test_bad_inputs_name_the_problem(change, error, match):
    q, k, v, table, lens = change(*cpu_inputs())
    with pytest.raises(error, match=match):
        wavetune.paged_attention(q, k, v, table, lens)


def test_max_seq_len_must_fit_the_table():
    q, k, v, table, lens = cpu_inputs()
    with pytest.raises(ValueError, match=r"max_seq_len must be an int in \[0, 48\]"):
        wavetune.paged_attention(q, k, v, table, lens, max_seq_len=49)


def test_the_fake_kernel_checks_and_shapes():
    import wavetune.torch_ops  # noqa: F401
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q, k, v, table, lens = cpu_inputs()
        out = torch.ops.wavetune.paged_attention(q, k, v, table, lens)
        assert out.shape == q.shape and out.dtype == q.dtype
        with pytest.raises(ValueError, match="block_table must be an int32"):
            torch.ops.wavetune.paged_attention(q, k, v, table.float(), lens)


# ---- GPU tier -----------------------------------------------------------------------------------------

def paged_case(batch, heads_q, heads_kv, head_dim, page_size, lengths, dtype=torch.bfloat16, seed=0):
    """Random q and a page pool holding each sequence's keys in shuffled pages (with spare pages), its block
    table, and the dense keys and values per sequence for the reference."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    opts = dict(device="cuda", dtype=dtype)
    per_seq = max(1, max(-(-n // page_size) for n in lengths))
    pool = batch * per_seq + 3
    k_cache = torch.randn(pool, page_size, heads_kv, head_dim, generator=g, **opts)
    v_cache = torch.randn(pool, page_size, heads_kv, head_dim, generator=g, **opts)
    table = torch.randperm(pool, generator=g, device="cuda")[:batch * per_seq].view(batch, per_seq).int()
    q = torch.randn(batch, heads_q, head_dim, generator=g, **opts)
    return q, k_cache, v_cache, table, torch.tensor(lengths, dtype=torch.int32, device="cuda")


def reference(q, k_cache, v_cache, table, lengths, scale=None):
    """fp32 attention of each sequence's query heads over its keys, gathered through the table."""
    batch, heads_q, head_dim = q.shape
    heads_kv = k_cache.shape[2]
    scale = 1 / math.sqrt(head_dim) if scale is None else scale
    out = torch.zeros(batch, heads_q, head_dim, device=q.device)
    for b, n in enumerate(lengths):
        if n == 0:
            continue
        keys = k_cache[table[b].long()].flatten(0, 1)[:n].float()  # [n, heads_kv, head_dim]
        values = v_cache[table[b].long()].flatten(0, 1)[:n].float()
        qs = q[b].float().view(heads_kv, heads_q // heads_kv, head_dim)
        scores = torch.einsum("hgd,nhd->hgn", qs, keys) * scale
        out[b] = torch.einsum("hgn,nhd->hgd", scores.softmax(-1), values).reshape(heads_q, head_dim)
    return out


def assert_close(got, want):
    assert not got.isnan().any(), "part of the output was left unwritten"
    error = ((got.float() - want).norm() / want.norm().clamp_min(1e-6)).item()
    assert error < 1e-2, error


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("heads_q, heads_kv", [(32, 8), (28, 4), (8, 8), (24, 1)])
def test_every_kernel_against_fp32(head_dim, heads_q, heads_kv):
    lengths = [1, 700, 33, 1500]
    q, k, v, table, lens = paged_case(4, heads_q, heads_kv, head_dim, 16, lengths, seed=head_dim + heads_q)
    want = reference(q, k, v, table, lengths)
    kernels = [c.id for c in wavetune.paged_attention_configs() if c.dtype == "bf16" and c.tile[2] == head_dim]
    for config, splits in [(None, None), *((c, s) for c in kernels for s in (1, 3, 64))]:
        out = torch.full_like(q, float("nan"))
        got = wavetune.paged_attention(q, k, v, table, lens, out=out, config=config, splits=splits)
        assert got is out
        assert_close(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [16, 32, 100, 256])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_page_sizes_lengths_and_dtypes(page_size, dtype):
    lengths = [0, 257, 5000, 64, 1]
    q, k, v, table, lens = paged_case(5, 16, 2, 128, page_size, lengths, dtype=dtype, seed=page_size)
    got = wavetune.paged_attention(q, k, v, table, lens, scale=0.05)
    assert got.dtype == dtype
    assert_close(got, reference(q, k, v, table, lengths, scale=0.05))
    assert torch.equal(got[0], torch.zeros_like(got[0]))  # a sequence with no keys


@pytest.mark.gpu
@pytest.mark.parametrize("splits", [None, 8, 16])
def test_a_long_batch_of_mixed_lengths_runs_longest_first(splits):
    """Enough keys and CTAs that the launch orders its sequences longest first (paged_model.h, orders_sequences);
    from 1,024 output rows a split launch also merges with a warp per row."""
    lengths = torch.randint(16, 12000, (48,), generator=torch.Generator().manual_seed(6)).tolist()
    q, k, v, table, lens = paged_case(48, 32, 2, 128, 64, lengths, seed=6)  # 1,536 output rows
    got = wavetune.paged_attention(q, k, v, table, lens, splits=splits)
    assert_close(got, reference(q, k, v, table, lengths))


@pytest.mark.gpu
def test_splits_merge_in_clusters_where_the_grid_fits_them_and_by_a_kernel_beyond():
    """A launch of 4 splits over a few sequences fits the kernel's clusters of 4 (paged_model.h,
    merges_in_clusters): its splits merge there, those past a short sequence's keys with no keys; one over more
    sequences than they hold merges by the merge kernel. Both match fp32."""
    config = next(c for c in wavetune.paged_attention_configs() if c.dtype == "bf16" and c.tile[2] == 128
                  and c.tile[0] == 16)
    most = _C.paged_attention_max_cluster_splits()
    assert [_C.paged_attention_cluster_ctas(config.id, n) for n in (1, most + 1)] == [0, 0]  # no such clusters
    held = _C.paged_attention_cluster_ctas(config.id, 4)
    assert 0 < held <= _C.paged_attention_resident_ctas(config.id) * wavetune.device_properties()["sm_count"]
    assert 3 * 8 * 4 <= held
    for batch in (3, held // 32 + 1):  # 8 KV heads x 4 splits: 32 CTAs a sequence, within the clusters, then beyond
        lengths = torch.randint(1, 3000, (batch,), generator=torch.Generator().manual_seed(batch)).tolist()
        lengths[:2] = [5, 2999]  # the first one's splits past 5 keys have none
        q, k, v, table, lens = paged_case(batch, 32, 8, 128, 16, lengths, seed=batch)
        out = torch.full_like(q, float("nan"))
        got = wavetune.paged_attention(q, k, v, table, lens, out=out, config=config.id, splits=4)
        assert_close(got, reference(q, k, v, table, lengths))


@pytest.mark.gpu
def test_a_short_max_seq_len_bounds_the_keys_read():
    lengths = [300, 120]
    q, k, v, table, lens = paged_case(2, 8, 2, 128, 16, lengths, seed=3)
    got = wavetune.paged_attention(q, k, v, table, lens, max_seq_len=200)  # lengths above it are cut to it
    assert_close(got, reference(q, k, v, table, [200, 120]))


@pytest.mark.gpu
def test_one_kv_tensor_holding_both_halves():
    """vLLM-style [pages, 2, page_size, heads, dim] storage: K and V are views with the same strides."""
    lengths = [90, 400]
    q, k, v, table, lens = paged_case(2, 16, 4, 128, 32, lengths, seed=4)
    both = torch.stack([k, v], dim=1)
    got = wavetune.paged_attention(q, both[:, 0], both[:, 1], table, lens)
    assert_close(got, reference(q, k, v, table, lengths))


@pytest.mark.gpu
def test_pdl_on_and_off_give_the_same_bits():
    q, k, v, table, lens = paged_case(3, 32, 8, 128, 16, [2000, 17, 900], seed=5)
    _C.set_programmatic_launch(False)
    try:
        off = wavetune.paged_attention(q, k, v, table, lens, splits=8)
    finally:
        _C.set_programmatic_launch(True)
    on = wavetune.paged_attention(q, k, v, table, lens, splits=8)
    assert torch.equal(on, off)
    assert torch.equal(on, wavetune.paged_attention(q, k, v, table, lens, splits=8))  # deterministic


@pytest.mark.gpu
@pytest.mark.parametrize("seqlen_k", [1, 77, 4096])
def test_attention_decode_runs_it_on_dense_caches(seqlen_k):
    g = torch.Generator(device="cuda").manual_seed(seqlen_k)
    opts = dict(device="cuda", dtype=torch.bfloat16)
    q = torch.randn(3, 1, 32, 128, generator=g, **opts)
    cache = torch.randn(3, 8, seqlen_k + 5, 128, generator=g, **opts)  # [batch, heads, capacity, dim], as HF's
    k = cache.transpose(1, 2)[:, :seqlen_k]
    v = torch.randn_like(cache).transpose(1, 2)[:, :seqlen_k]
    out = torch.full_like(q, float("nan"))
    wavetune.attention(q, k, v, out=out)
    table = torch.arange(3, device="cuda", dtype=torch.int32).view(3, 1)
    want = reference(q[:, 0], k, v, table, [seqlen_k] * 3)
    assert_close(out[:, 0], want)
    fmha = [c for c in wavetune.attention_configs() if c.dtype == "bf16" and c.tile[2] == 128 and not c.from_library]
    if fmha:  # a forced variant takes the FMHA path
        assert_close(wavetune.attention(q, k, v, config=fmha[0].id, splits=1)[:, 0], want)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_attention_decode_of_large_groups_at_head_dim_64(causal):
    """16 query heads of 64 dims per KV head: wavetune.attention decodes through cuDNN first (one query sees
    every key, with or without the bottom-right mask), into out= or not, eager and in a CUDA graph."""
    g = torch.Generator(device="cuda").manual_seed(64)
    opts = dict(device="cuda", dtype=torch.bfloat16)
    q = torch.randn(5, 1, 32, 64, generator=g, **opts)
    cache = torch.randn(5, 2, 777 + 9, 64, generator=g, **opts)
    k, v = cache.transpose(1, 2)[:, :777], torch.randn_like(cache).transpose(1, 2)[:, :777]
    want = reference(q[:, 0], k, v, torch.arange(5, device="cuda", dtype=torch.int32).view(5, 1), [777] * 5)
    assert_close(wavetune.attention(q, k, v, causal=causal)[:, 0], want)
    out = torch.full_like(q, float("nan"))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            wavetune.attention(q, k, v, causal=causal, out=out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        wavetune.attention(q, k, v, causal=causal, out=out)
    out.fill_(float("nan"))
    graph.replay()
    assert_close(out[:, 0], want)


@pytest.mark.gpu
def test_cuda_graph_capture_as_pytorch_documents_it():
    import wavetune.torch_ops  # noqa: F401

    q, k, v, table, lens = paged_case(4, 32, 8, 128, 16, [100, 4096, 5, 700], seed=6)

    def step():
        return torch.ops.wavetune.paged_attention(q, k, v, table, lens, 4096)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = step()
    lens.copy_(torch.tensor([1500, 3, 4096, 64], dtype=torch.int32))  # the next step's lengths, same graph
    q.normal_()
    y.fill_(float("nan"))
    graph.replay()
    assert_close(y, reference(q, k, v, table, [1500, 3, 4096, 64]))
    assert torch.equal(y, step())


@pytest.mark.gpu
def test_torch_compile_fullgraph():
    import wavetune.torch_ops  # noqa: F401

    q, k, v, table, lens = paged_case(2, 16, 4, 64, 16, [300, 31], seed=7)

    def decode(q):
        return torch.ops.wavetune.paged_attention(q * 2, k, v, table, lens)

    compiled = torch.compile(decode, fullgraph=True)
    assert torch.equal(compiled(q), decode(q))


@pytest.mark.gpu
def test_launch_errors_name_the_problem():
    q, k, v, table, lens = paged_case(2, 8, 2, 128, 16, [10, 20], seed=8)
    with pytest.raises(ValueError, match="splits must be an int in"):
        wavetune.paged_attention(q, k, v, table, lens, splits=0)
    other = next(c for c in wavetune.paged_attention_configs() if c.tile[2] != 128)
    with pytest.raises(ValueError, match=f"kernel {other.name} takes"):
        wavetune.paged_attention(q, k, v, table, lens, config=other.name)
    shifted = torch.empty(q.numel() + 8, device="cuda", dtype=q.dtype)[1:1 + q.numel()].view(q.shape)
    with pytest.raises(ValueError, match="16-byte aligned"):
        wavetune.paged_attention(shifted, k, v, table, lens)

"""Batch-invariant mode on the GPU (docs/torch.md, "Batch-invariant mode"): a row's result is bit-identical whatever
the batch it runs in, for every family: dense GEMM rows over M, grouped GEMM rows over the tokens per expert,
attention and paged decode over the batch size and the other sequences' lengths; eagerly, replayed from CUDA
graphs, and in another process; and a patched transformers model generates a prompt alone as it does in a batch.

Both levels run: ``config`` (one config per layer) makes no assumption; ``reduction_order`` assumes that configs of
one reduction order class (csrc/include/wavetune/batch_invariance.h) give the same bits, and a failure of it alone
names the configs that disagree."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import wavetune  # noqa: E402
from wavetune import _C  # noqa: E402
from wavetune.runtime import tables  # noqa: E402

from conftest import REPO  # noqa: E402

pytestmark = pytest.mark.gpu

LEVELS = ("reduction_order", "config")
BATCHES = (1, 2, 3, 4, 5, 7, 8, 13, 16, 31, 32, 33, 48, 64, 100, 128, 129, 255, 256, 511, 512, 1000, 1024, 2048,
           3000, 4096)
LAYERS = ((4096, 4096), (14336, 4096), (4096, 14336), (1024, 4096), (6144, 4096), (2560, 8192))


def replayed(call):
    """``call()``'s outputs captured in a CUDA graph and replayed once (the caller ran it eagerly first: its
    choice and table are settled before capture)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    graph.replay()
    torch.cuda.synchronize()
    return out


def random_rows(rows: int, cols: int, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(rows, cols, generator=g, device="cuda", dtype=torch.bfloat16)


def dense_variant(m: int, n: int, k: int, level: str) -> str:
    tables.ensure_table(torch.cuda.current_device())
    prepared = _C.PreparedGemm(m, n, k, k, k, n, _C.DTYPES.index("bf16"), _C.B_LAYOUTS.index("col"),
                               torch.cuda.current_device(), batch_invariance=level)
    return next(c.name for c in wavetune.configs() if c.id == prepared.variant)


@pytest.fixture
def invariant_gemm():
    """A skip where the build has no dense variant of a fixed reduction order (kernel set builtin: the decode GEMM
    alone; the suite compiles nothing in the background)."""
    try:
        dense_variant(1, 4096, 4096, "config")
    except ValueError as exc:
        pytest.skip(f"{exc} (or install with -Ccmake.define.WAVETUNE_KERNEL_SET=tables)")


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("n, k", LAYERS)
def test_dense_rows_do_not_depend_on_m(n, k, level, invariant_gemm):
    x, w = random_rows(max(BATCHES), k, 1), random_rows(n, k, 2)
    full = wavetune.gemm(x, w.t(), batch_invariant=level)
    reference_variant = dense_variant(max(BATCHES), n, k, level)
    for m in BATCHES:
        y = wavetune.gemm(x[:m], w.t(), batch_invariant=level)
        differ = (y != full[:m]).any(dim=1).nonzero()
        assert len(differ) == 0, (f"M={m}: rows {differ[:5].flatten().tolist()} differ from M={max(BATCHES)}'s "
                                  f"({dense_variant(m, n, k, level)} against {reference_variant})")


@pytest.mark.parametrize("n, k", LAYERS[:3])
def test_dense_rows_replayed_from_cuda_graphs(n, k, invariant_gemm):
    x, w = random_rows(max(BATCHES), k, 3), random_rows(n, k, 4)
    eager = wavetune.gemm(x, w.t(), batch_invariant=True)
    for m in (1, 8, 64, 512, 4096):
        rows = x[:m].clone()
        wavetune.gemm(rows, w.t(), batch_invariant=True)  # the choice and table before capture
        out = replayed(lambda: wavetune.gemm(rows, w.t(), batch_invariant=True))
        assert torch.equal(out, eager[:m]), f"M={m}"


def rows_digest() -> str:
    """The sha256 of row 0 of a dense GEMM at three M and of sequence 0's paged decode at three batch sizes."""
    x, w = random_rows(64, 4096, 5), random_rows(4096, 4096, 6)
    rows = [wavetune.gemm(x[:m], w.t(), batch_invariant=True)[0] for m in (1, 7, 64)]
    for batch in (1, 5, 64):
        q, k, v = decode_batch(batch, 2048, 32, 8, 128)
        rows.append(wavetune.paged_attention(q[:, 0], k, v, batch_invariant=True)[0].flatten())
    return hashlib.sha256(torch.cat(rows).view(torch.int16).cpu().numpy().tobytes()).hexdigest()


def test_rows_are_the_same_in_another_process(invariant_gemm):
    other = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, 'tests'); "
                            "from test_batch_invariance_gpu import rows_digest; print(rows_digest())"],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert other.returncode == 0, other.stderr
    assert other.stdout.split()[-1] == rows_digest()


def expert_rows(tokens_per_expert: int, experts: int, k: int, seed: int):
    """x with `tokens_per_expert` rows per expert, its first row the same whatever the count, and the offsets."""
    x = random_rows(tokens_per_expert * experts, k, seed)
    x[0] = random_rows(1, k, 99)[0]
    offsets = torch.arange(1, experts + 1, device="cuda", dtype=torch.int32) * tokens_per_expert
    return x, offsets


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("experts, n, k", [(8, 4096, 2048), (64, 1536, 2048), (128, 768, 2048)])
def test_grouped_rows_do_not_depend_on_the_tokens_per_expert(experts, n, k, level):
    device = torch.cuda.current_device()
    tables.ensure_table(device, "grouped_gemm")
    try:
        _C.grouped_chosen_variant(0, experts, experts, n, k, device, 0, level)
    except ValueError as exc:
        pytest.skip(f"{exc} (or install with -Ccmake.define.WAVETUNE_KERNEL_SET=tables)")
    w = (random_rows(experts * n, k, 7) / 32).view(experts, n, k)
    reference = None
    for tokens in (t for t in (1, 2, 3, 8, 16, 33, 64, 128, 512, 1024, 4096) if t * experts <= 2**16):
        x, offsets = expert_rows(tokens, experts, k, 8)
        row = wavetune.grouped_gemm(x, w, offsets, batch_invariant=level)[0]
        reference = row if reference is None else reference
        assert torch.equal(row, reference), f"{tokens} tokens per expert"
        if tokens == 16:  # replayed from a CUDA graph too
            out = replayed(lambda: wavetune.grouped_gemm(x, w, offsets, batch_invariant=level))
            assert torch.equal(out[0], reference), "replayed"


def decode_batch(batch: int, seq: int, heads_q: int, heads_kv: int, head_dim: int):
    """q [batch, 1, heads_q, d] and a dense cache [batch, seq, heads_kv, d] (K and V halves of one tensor, so that
    they share their strides), sequence 0 the same whatever the batch."""
    g = torch.Generator(device="cuda").manual_seed(batch)
    q = torch.randn(batch, 1, heads_q, head_dim, generator=g, device="cuda", dtype=torch.bfloat16)
    kv = torch.randn(batch, seq, 2, heads_kv, head_dim, generator=g, device="cuda", dtype=torch.bfloat16)
    g0 = torch.Generator(device="cuda").manual_seed(0)
    q[0] = torch.randn(1, heads_q, head_dim, generator=g0, device="cuda", dtype=torch.bfloat16)
    kv[0] = torch.randn(seq, 2, heads_kv, head_dim, generator=g0, device="cuda", dtype=torch.bfloat16)
    return q, kv[:, :, 0], kv[:, :, 1]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("seq, heads_q, heads_kv, head_dim", [(4096, 32, 8, 128), (1000, 16, 16, 64),
                                                               (8192, 8, 1, 128), (512, 32, 8, 128)])
def test_decode_attention_does_not_depend_on_the_batch(seq, heads_q, heads_kv, head_dim, level):
    reference = None
    for batch in (b for b in (1, 2, 3, 4, 8, 16, 33, 64, 128, 256, 1024, 4096) if b * seq <= 2**21):
        q, k, v = decode_batch(batch, seq, heads_q, heads_kv, head_dim)
        out = wavetune.attention(q, k, v, batch_invariant=level)[0]
        reference = out if reference is None else reference
        assert torch.equal(out, reference), f"batch {batch}"
        if batch == 33:
            out = replayed(lambda: wavetune.attention(q, k, v, batch_invariant=level))
            assert torch.equal(out[0], reference), "replayed"


@pytest.mark.parametrize("level", LEVELS)
def test_prefill_attention_does_not_depend_on_the_batch(level):
    if not any(c.tile[2] == 128 and c.dtype == "bf16" and not c.from_library for c in wavetune.attention_configs()):
        pytest.skip("no FMHA variant of head dim 128 is compiled in this build (python -m wavetune build --family "
                    "attention)")
    g = torch.Generator(device="cuda").manual_seed(1)
    q0, k0, v0 = (torch.randn(1, 512, heads, 128, generator=g, device="cuda", dtype=torch.bfloat16)
                  for heads in (16, 4, 4))
    reference = wavetune.attention(q0, k0, v0, causal=True, batch_invariant=level)
    for batch in (2, 4, 16):
        q, k, v = (torch.cat([t, torch.randn(batch - 1, *t.shape[1:], generator=g, device="cuda",
                                             dtype=t.dtype)]) for t in (q0, k0, v0))
        assert torch.equal(wavetune.attention(q, k, v, causal=True, batch_invariant=level)[:1], reference), batch


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("heads_q, heads_kv, head_dim", [(32, 8, 128), (8, 8, 64), (64, 8, 128)])
def test_paged_decode_does_not_depend_on_the_batch_or_the_other_lengths(heads_q, heads_kv, head_dim, level):
    cache_len, own_len = 8192, 3000
    reference = None
    for batch, seed in ((1, 0), (2, 1), (4, 2), (8, 3), (33, 4), (128, 5), (256, 6), (8, 7)):
        g = torch.Generator(device="cuda").manual_seed(seed)
        lengths = torch.randint(1, cache_len + 1, (batch,), generator=g, device="cuda", dtype=torch.int32)
        lengths[0] = own_len
        q, k, v = decode_batch(batch, cache_len, heads_q, heads_kv, head_dim)
        max_len = int(lengths.max())
        out = wavetune.paged_attention(q[:, 0], k, v, None, lengths, max_seq_len=max_len, batch_invariant=level)
        reference = out[0] if reference is None else reference
        assert torch.equal(out[0], reference), f"batch {batch}, the longest {max_len} keys"
        if batch == 33:
            out = replayed(lambda: wavetune.paged_attention(q[:, 0], k, v, None, lengths, max_seq_len=max_len,
                                                            batch_invariant=level))
            assert torch.equal(out[0], reference), "replayed"


def test_the_attention_choices_do_not_depend_on_the_batch():
    """The choices alone, over many shapes: every batch size gets the launch of batch 1, never cuDNN's."""
    device = torch.cuda.current_device()
    tables.ensure_table(device, "attention")
    for seq, heads_q, heads_kv, head_dim in [(s, hq, hkv, d) for s in (128, 1000, 4096, 32768)
                                             for hq, hkv in ((32, 8), (16, 16), (64, 8)) for d in (64, 128)]:
        launches = set()
        for batch in (1, 2, 4, 16, 64, 256):
            sizes = (batch, 1, seq, heads_q, heads_kv, head_dim)
            q = (0, heads_q * head_dim, heads_q * head_dim, head_dim)
            kv = (0, seq * heads_kv * head_dim, heads_kv * head_dim, head_dim)
            launches.add(_C.attention_chosen_launch(sizes, q, kv, kv, q, 1.0, False, 0, device, (True, True, False),
                                                    "reduction_order"))
        assert len(launches) == 1, (seq, heads_q, heads_kv, head_dim, launches)
        (variant, splits), = launches
        assert splits == 1 and all(c.schedule != "cudnn" for c in wavetune.attention_configs() if c.id == variant)


@pytest.mark.parametrize("name", ["LlamaForCausalLM", "Qwen3MoeForCausalLM"])
def test_a_patched_model_generates_a_prompt_alone_as_in_a_batch(name, invariant_gemm):
    transformers = pytest.importorskip("transformers")
    from test_hf import build

    from wavetune import hf

    if (pending := hf.grouped_variants_pending(0, torch.bfloat16)) and name != "LlamaForCausalLM":
        pytest.skip(f"{pending} grouped variants the GPU's table chooses from are not compiled in this build: the "
                    "experts would run transformers' own (install with -Ccmake.define.WAVETUNE_KERNEL_SET=tables)")
    model = build(name, device="cuda", dtype=torch.bfloat16, num_attention_heads=2, num_key_value_heads=1,
                  head_dim=128)
    wavetune.patch(model, batch_invariant=True)
    g = torch.Generator(device="cuda").manual_seed(3)
    prompts = torch.randint(0, model.config.vocab_size, (9, 16), generator=g, device="cuda")
    options = dict(max_new_tokens=24, min_new_tokens=24, do_sample=False)
    assert transformers is not None
    with torch.inference_mode():
        alone = model.generate(prompts[:1], attention_mask=torch.ones_like(prompts[:1]), **options)
        batched = model.generate(prompts, attention_mask=torch.ones_like(prompts), **options)
    assert torch.equal(alone[0], batched[0])


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_a_compiled_patched_model_keeps_its_rows(mode, invariant_gemm):
    """torch.compile (and its CUDA graphs with reduce-overhead) of a model patched batch-invariant: row 0 the same at
    every M (against the compiled model's own: Inductor's SiLU need not round as eager's does)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4096, 14336), torch.nn.SiLU(), torch.nn.Linear(14336, 4096))
    model = model.to("cuda", torch.bfloat16).eval()
    wavetune.patch(model, batch_invariant=True)
    x = random_rows(512, 4096, 9)
    reference = None
    with torch.inference_mode():
        compiled = torch.compile(model, mode=mode, dynamic=False)
        for m in (1, 7, 64, 512):
            for _ in range(3):  # reduce-overhead records, then replays its graph
                out = compiled(x[:m])[0].clone()
            reference = out if reference is None else reference
            assert torch.equal(out, reference), f"M={m}"
    torch._dynamo.reset()

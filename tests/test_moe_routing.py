"""The mixture-of-experts routing ops (wavetune.moe_align, moe_gather, moe_combine) and the experts forward
that runs on them (wavetune.hf.fused_routed_experts). CPU tier: input checks, fakes, and the forward with the
kernels replaced by their contracts against PyTorch's routing. GPU tier: each kernel against its contract
(random routings with dropped ids, odd sizes, poisoned outputs), and the forward against PyTorch's routing."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import wavetune  # noqa: E402
from wavetune.families.layer_ops import api  # noqa: E402

OPS = torch.ops.wavetune


def reference_align(top_k_index, experts):
    """moe_align's contract, with a stable order within each expert (the kernel's may differ)."""
    ids = top_k_index.reshape(-1)
    key = torch.where((ids >= 0) & (ids < experts), ids, torch.full_like(ids, experts))
    order = torch.sort(key, stable=True).indices
    positions = torch.empty(ids.numel(), dtype=torch.int32, device=ids.device)
    positions[order] = torch.arange(ids.numel(), dtype=torch.int32, device=ids.device)
    counts = torch.bincount(key, minlength=experts + 1)[:experts]
    return counts.cumsum(0).to(torch.int32), positions


def reference_gather(x, positions, top_k):
    rows = torch.empty(positions.numel(), x.shape[1], dtype=x.dtype, device=x.device)
    rows[positions.long()] = x.repeat_interleave(top_k, dim=0)
    return rows


def reference_combine(rows, positions, top_k_index, experts, weights):
    kept = ((top_k_index >= 0) & (top_k_index < experts)).unsqueeze(-1)
    picked = rows[positions.long()].view(*top_k_index.shape, -1).float()
    return torch.where(kept, picked * weights.unsqueeze(-1), 0.0).sum(dim=1).to(rows.dtype)


def routing(tokens, top_k, experts, dropped=0, device="cpu", seed=0):
    """top_k_index of distinct experts per token (as torch.topk gives), ``dropped`` of its ids past the experts."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    index = torch.rand(tokens, experts, generator=g).topk(top_k, dim=-1).indices
    if dropped:
        flat = index.view(-1)
        flat[torch.randperm(flat.numel(), generator=g)[:dropped]] = experts  # expert parallelism's sentinel
    return index.to(device)


# ---- CPU tier -------------------------------------------------------------------------------------------------

def test_bad_routings_name_the_problem():
    ids = routing(3, 2, 8)
    with pytest.raises(ValueError, match="int64"):
        api.check_routing(torch, ids.int(), 8)
    with pytest.raises(ValueError, match="experts 1 to 1024"):
        api.check_routing(torch, ids, 2000)
    with pytest.raises(ValueError, match="CUDA"):
        wavetune.moe_align(ids, 8)
    with pytest.raises(ValueError, match="positions must be a contiguous int32"):
        wavetune.moe_gather(torch.zeros(3, 64, dtype=torch.bfloat16), torch.zeros(5, dtype=torch.int32), 2)
    with pytest.raises(ValueError, match="weights must be float32"):
        wavetune.moe_combine(torch.zeros(6, 64, dtype=torch.bfloat16), torch.zeros(6, dtype=torch.int32), ids, 8,
                             torch.zeros(3, 2, dtype=torch.bfloat16))


def test_fakes_give_the_output_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        ids = torch.zeros(5, 3, dtype=torch.int64)
        offsets, positions = OPS.moe_align(ids, 60)
        rows = OPS.moe_gather(torch.zeros(5, 128, dtype=torch.bfloat16), positions, 3)
        out = OPS.moe_combine(rows, positions, ids, 60, torch.zeros(5, 3))
    assert (offsets.shape, offsets.dtype, positions.shape, positions.dtype) == ((60,), torch.int32, (15,), torch.int32)
    assert rows.shape == (15, 128) and out.shape == (5, 128) and out.dtype == torch.bfloat16


def test_the_contracts_sort_and_sum_what_pytorchs_routing_does():
    """The references above are what the kernels must compute: checked here against the plain definition."""
    ids, experts = routing(9, 3, 8, dropped=4), 8
    offsets, positions = reference_align(ids, experts)
    assert sorted(positions.tolist()) == list(range(27))
    ends = offsets.tolist()
    for p, e in enumerate(ids.view(-1).tolist()):
        if e < experts:
            assert (ends[e - 1] if e else 0) <= positions[p] < ends[e]
        else:
            assert positions[p] >= ends[-1]
    x, weights = torch.randn(9, 16), torch.rand(9, 3)
    rows = reference_gather(x, positions, 3)
    out = reference_combine(rows * 2, positions, ids, experts, weights)
    kept = (ids < experts).float()
    torch.testing.assert_close(out, 2 * (weights * kept).sum(1, keepdim=True) * x)


def _default_apply_gate(self, up):
    """Stands for transformers' default gate (found by its name): SiLU of the first half times the second."""
    return torch.nn.functional.silu(up[:, :up.shape[1] // 2]) * up[:, up.shape[1] // 2:]


class Experts:
    """What the experts forward reads of a transformers experts module."""

    _apply_gate = _default_apply_gate

    def __init__(self, num_experts: int, has_gate: bool):
        self.num_experts, self.has_gate, self.act_fn = num_experts, has_gate, torch.nn.SiLU()


@pytest.mark.parametrize("gated", [True, False])
def test_the_fused_forward_computes_pytorchs_routing(gated, monkeypatch):
    """fused_routed_experts with the routing kernels replaced by their contracts gives the output of PyTorch's
    routing (torch_routed_experts), dropped ids included; the default SiLU gate goes to silu_and_mul."""
    from wavetune import hf

    monkeypatch.setattr(hf, "run_moe_align", reference_align)
    monkeypatch.setattr(hf, "run_moe_gather", reference_gather)
    monkeypatch.setattr(hf, "run_moe_combine", reference_combine)
    gates = []
    monkeypatch.setattr(hf, "run_silu_and_mul", lambda up: gates.append(up.shape) or _default_apply_gate(None, up))
    weights = {name: torch.randn(8, out, 16) for name, out in (("gate_up" if gated else "up", 64 if gated else 32),)}
    weights["down"] = torch.randn(8, 16, 32)

    def project(rows, name, offsets):  # each expert's rows times its weight
        out, start = torch.zeros(rows.shape[0], weights[name].shape[1]), 0
        for e, end in enumerate(offsets.tolist()):
            out[start:end] = rows[start:end] @ weights[name][e].t()
            start = end
        return out

    experts = Experts(8, gated)
    ids, x, gate_weights = routing(11, 2, 8, dropped=3), torch.randn(11, 16), torch.rand(11, 2)
    fused = hf.fused_routed_experts(experts, x, ids, gate_weights, project)
    plain = hf.torch_routed_experts(experts, x, ids, gate_weights, project)
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5)
    assert gates == ([(22, 64)] if gated else [])


# ---- GPU tier -------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("tokens, top_k, experts, dropped",
                         [(1, 2, 8, 0), (1, 8, 128, 0), (7, 4, 60, 3), (300, 8, 128, 17), (0, 2, 8, 0),
                          (2049, 2, 8, 0), (33, 6, 1024, 5), (5, 1, 1, 0)])
def test_align_places_every_pair_in_its_experts_rows(tokens, top_k, experts, dropped):
    ids = routing(tokens, top_k, experts, dropped, device="cuda", seed=tokens)
    offsets, positions = wavetune.moe_align(ids, experts)
    expected_offsets, _ = reference_align(ids, experts)
    assert torch.equal(offsets, expected_offsets)
    pairs = tokens * top_k
    assert torch.equal(positions.sort().values.cpu(), torch.arange(pairs, dtype=torch.int32))
    ends = torch.cat([torch.zeros(1, dtype=torch.int32, device="cuda"), offsets, offsets[-1:] + pairs])
    key = torch.where(ids.view(-1) < experts, ids.view(-1), torch.full_like(ids.view(-1), experts))
    assert bool(((ends[key] <= positions) & (positions < ends[key + 1])).all())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens, top_k, experts, width, dropped",
                         [(1, 2, 8, 4096, 0), (3, 8, 128, 2048, 2), (300, 4, 60, 2056, 11), (1, 1, 4, 8, 0)])
def test_gather_and_combine_match_their_contracts(tokens, top_k, experts, width, dropped, dtype):
    ids = routing(tokens, top_k, experts, dropped, device="cuda", seed=width)
    offsets, positions = wavetune.moe_align(ids, experts)
    x = torch.randn(tokens, width, device="cuda", dtype=dtype)
    rows = wavetune.moe_gather(x, positions, top_k)
    assert torch.equal(rows, reference_gather(x, positions, top_k))
    expert_rows = torch.randn_like(rows)
    expert_rows[offsets[-1]:] = float("nan")  # rows of dropped pairs are never computed
    weights = torch.rand(tokens, top_k, device="cuda")
    out = wavetune.moe_combine(expert_rows, positions, ids, experts, weights)
    expected = reference_combine(expert_rows, positions, ids, experts, weights)
    assert not out.isnan().any()
    torch.testing.assert_close(out, expected, rtol=1e-2, atol=1e-2)  # one rounding; fp32 sums in another order


@pytest.mark.gpu
def test_the_fused_forward_matches_pytorchs_routing_in_a_cuda_graph():
    """A Mixtral-shaped experts module: the fused routing against PyTorch's, both on the grouped GEMM, eager and
    replayed from a CUDA graph on new routings."""
    from wavetune import hf

    torch.manual_seed(0)
    weights = {"gate_up": torch.randn(8, 512, 256, device="cuda", dtype=torch.bfloat16) * 0.05,
               "down": torch.randn(8, 256, 256, device="cuda", dtype=torch.bfloat16) * 0.05}

    def project(rows, name, offsets):
        return OPS.grouped_gemm(rows, weights[name], offsets)

    experts = Experts(8, True)
    ids = routing(5, 2, 8, device="cuda")
    x, gate_weights = torch.randn(5, 256, device="cuda", dtype=torch.bfloat16), torch.rand(5, 2, device="cuda")
    fused = hf.fused_routed_experts(experts, x, ids, gate_weights, project)
    plain = hf.torch_routed_experts(experts, x, ids, gate_weights, project)
    torch.testing.assert_close(fused, plain, rtol=2e-2, atol=2e-2)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        hf.fused_routed_experts(experts, x, ids, gate_weights, project)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = hf.fused_routed_experts(experts, x, ids, gate_weights, project)
    ids.copy_(routing(5, 2, 8, device="cuda", seed=1))
    captured.fill_(float("nan"))
    graph.replay()
    expected = hf.torch_routed_experts(experts, x, ids, gate_weights, project)
    torch.testing.assert_close(captured, expected, rtol=2e-2, atol=2e-2)

"""Runs the portable kernels from their compute_80 PTX on the GPU at hand (docs/kernels.md, "Compile checks"):

    python benchmarks/portable_ptx_check.py

It sets CUDA_FORCE_PTX_JIT=1 before CUDA starts, so the driver JIT-compiles each kernel from its PTX and no cubin
runs: the portable kernels run as they would on an Ampere or Ada GPU. The CUTLASS kernels have no PTX, nor have
most of PyTorch's, so inputs are made and references computed on the CPU and tensors reach the GPU by copies
only. Checks, against fp32 references: RMSNorm and SiLU-and-mul in bf16 and fp16; every paged attention kernel
but the warp-specialized ones (sm_90a only) at 1, 3 and 4 splits with PDL on (the default); and that the paged
kernels report no CTAs in clusters (that code has no cluster merge, so split launches merge in their own kernel);
and every compiled Ampere-style (sm80) grouped GEMM variant, with its argument kernel, on uneven routings with
empty experts. Prints a line per check; exits 1 if any failed.
"""

from __future__ import annotations

import os

os.environ["CUDA_FORCE_PTX_JIT"] = "1"  # before CUDA is initialized

import math  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

import wavetune  # noqa: E402
from wavetune import _C  # noqa: E402

DTYPES = (torch.bfloat16, torch.float16)
failures = []


def check(what: str, got: torch.Tensor, want: torch.Tensor, bound: float = 1e-2) -> None:
    got = got.cpu().float()
    error = ((got - want).norm() / want.norm().clamp_min(1e-6)).item()
    ok = bool(error < bound) and not got.isnan().any()
    print(f"{'ok  ' if ok else 'FAIL'} {what}: relative error {error:.2e}")
    if not ok:
        failures.append(what)


def layer_ops(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, 4096, generator=g).to(dtype)
    weight = torch.randn(4096, generator=g).to(dtype)
    want = weight.float() * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(dtype).float()
    check(f"rms_norm {dtype}", wavetune.rms_norm(x.cuda(), weight.cuda(), 1e-6), want)
    gate_up = torch.randn(37, 2 * 2816, generator=g).to(dtype)
    gate, up = gate_up.float().chunk(2, -1)
    check(f"silu_and_mul {dtype}", wavetune.silu_and_mul(gate_up.cuda()), torch.nn.functional.silu(gate) * up)


def paged_case(dtype, head_dim, lengths, heads_q=8, heads_kv=2, page_size=16):
    g = torch.Generator().manual_seed(head_dim)
    per_seq = max(-(-n // page_size) for n in lengths)
    pool = len(lengths) * per_seq + 3
    k = torch.randn(pool, page_size, heads_kv, head_dim, generator=g).to(dtype)
    v = torch.randn(pool, page_size, heads_kv, head_dim, generator=g).to(dtype)
    table = torch.randperm(pool, generator=g)[:len(lengths) * per_seq].view(len(lengths), per_seq).int()
    q = torch.randn(len(lengths), heads_q, head_dim, generator=g).to(dtype)
    want = torch.zeros(q.shape)
    for b, n in enumerate(lengths):
        keys = k[table[b].long()].flatten(0, 1)[:n].float()
        values = v[table[b].long()].flatten(0, 1)[:n].float()
        qs = q[b].float().view(heads_kv, heads_q // heads_kv, head_dim)
        scores = torch.einsum("hgd,nhd->hgn", qs, keys) / math.sqrt(head_dim)
        want[b] = torch.einsum("hgn,nhd->hgd", scores.softmax(-1), values).reshape(heads_q, head_dim)
    return (q, k, v, table, torch.tensor(lengths, dtype=torch.int32)), want


def paged_attention() -> None:
    portable = [c for c in wavetune.paged_attention_configs() if c.schedule != "cooperative"]
    clustered = [c.name for c in portable if _C.paged_attention_cluster_ctas(c.id, 4) != 0]
    print(f"{'ok  ' if not clustered else 'FAIL'} no CTAs in clusters for {len(portable)} paged kernels"
          + (f" (but for {clustered})" if clustered else ""))
    if clustered:
        failures.append("cluster residency")
    lengths = [1, 300, 777]
    for config in portable:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[config.dtype]
        inputs, want = paged_case(dtype, config.tile[2], lengths)
        q, k, v, table, lens = (t.cuda() for t in inputs)
        for splits in (1, 3, 4):
            got = wavetune.paged_attention(q, k, v, table, lens, max_seq_len=max(lengths), config=config.id,
                                           splits=splits)
            check(f"paged_attention {config.name} splits={splits}", got, want)


def grouped_case(dtype, counts, n, k):
    """(x, w, offsets, a NaN-poisoned out) of a grouped problem on the CPU, and the fp32 reference of its rows."""
    g = torch.Generator().manual_seed(sum(counts) + n)
    x = torch.randn(sum(counts), k, generator=g).to(dtype)
    w = (torch.randn(len(counts), n, k, generator=g) / math.sqrt(k)).to(dtype)
    offsets = torch.tensor(counts).cumsum(0).to(torch.int32)
    starts = [0, *offsets.tolist()[:-1]]
    want = torch.cat([x[s:s + c].float() @ w[e].float().t() for e, (s, c) in enumerate(zip(starts, counts))])
    return (x, w, offsets, torch.full((x.shape[0], n), float("nan")).to(dtype)), want


def grouped_gemm() -> None:
    for config in [c for c in wavetune.grouped_configs() if c.schedule == "multistage"]:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[config.dtype]
        for counts, n, k in (([0, 5, 0, 130, 1, 64, 0, 17], 264, 200), ([3 * (e % 4) for e in range(40)], 136, 520)):
            inputs, want = grouped_case(dtype, counts, n, k)
            x, w, offsets, out = (t.cuda() for t in inputs)
            got = wavetune.grouped_gemm(x, w, offsets, out=out, config=config.id)
            check(f"grouped_gemm {config.name} {len(counts)} experts", got, want)


def main() -> int:
    print(f"{torch.cuda.get_device_name()}, CUDA_FORCE_PTX_JIT={os.environ['CUDA_FORCE_PTX_JIT']}, "
          f"PDL {'on' if _C.programmatic_launch() else 'off'}")
    for dtype in DTYPES:
        layer_ops(dtype)
    paged_attention()
    grouped_gemm()
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

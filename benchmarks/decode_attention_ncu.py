"""A decode step's attention for Nsight Compute: the paged kernel forced to given launches and SDPA's cuDNN
backend on one dense cache ([batch, keys, heads_kv, head_dim], the layout benchmarks/paged_attention.py
times), each run three times (profile the last with --launch-skip).

    ncu --clock-control none --section SpeedOfLight --section Occupancy \\
        -k regex:'paged_attention_kernel|cudnn' --launch-skip 4 \\
        python benchmarks/decode_attention_ncu.py 11 10 10 128 4230 paged_bf16_d128_w8:1 paged_bf16_d128_w4:2

Arguments: batch, query heads, KV heads, head dim, keys, then kernel:splits launches
(``wavetune.paged_attention_configs()`` names)."""

import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import wavetune


def main() -> None:
    batch, heads_q, heads_kv, head_dim, keys = map(int, sys.argv[1:6])
    launches = [(name, int(splits)) for name, splits in (a.split(":") for a in sys.argv[6:])]
    opts = dict(device="cuda", dtype=torch.bfloat16)
    q = torch.randn(batch, 1, heads_q, head_dim, **opts)
    k, v = (torch.randn(batch, keys, heads_kv, head_dim, **opts) for _ in range(2))
    out = torch.empty_like(q)
    ids = {c.name: c.id for c in wavetune.paged_attention_configs()}
    for _ in range(3):
        for name, splits in launches:
            wavetune.paged_attention(q[:, 0], k, v, out=out[:, 0], config=ids[name], splits=splits)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                             enable_gqa=heads_q != heads_kv)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()

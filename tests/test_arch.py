"""The architecture axis (docs/kernels.md, "Architectures"): each variant says what its code is built for, runs_on
says where it runs, the device check takes compute capability 8.0 and up, and WAVETUNE_ARCH serves a GPU as an
older architecture, so that only what runs there is listed, chosen and launched. CPU tier: the rule, the
built-in variants' architectures, WAVETUNE_ARCH's parsing and refusals (in processes of their own: it is read once
per process), choices under sm80 from the shipped tables, the device check's message and patch on an older GPU.
GPU tier: every family and a patched transformers model served as sm80 on the H100."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
import sys
import textwrap
import warnings

import pytest

import wavetune
from conftest import REPO
from wavetune.runtime.native import _C


def run_python(code: str, arch: str | None, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(wavetune.__file__).parent.parent)}  # the wavetune under test
    env.pop("WAVETUNE_ARCH", None)
    if arch is not None:
        env["WAVETUNE_ARCH"] = arch
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("arch, cc, runs", [
    ("sm90a", 90, True), ("sm90a", 80, False), ("sm90a", 89, False), ("sm90a", 100, False), ("sm90a", 120, False),
    ("sm80", 80, True), ("sm80", 86, True), ("sm80", 90, True), ("sm80", 120, True), ("sm80", 75, False),
    ("sm89", 86, False), ("sm89", 89, True), ("sm89", 90, True), ("sm89", 100, True),
    ("any", 80, True), ("any", 120, True),
])
def test_runs_on_rule(arch, cc, runs):
    assert _C.runs_on(arch, cc) is runs


def test_runs_on_refuses_an_unknown_architecture():
    with pytest.raises(ValueError, match="'hopper' is not an architecture name"):
        _C.runs_on("hopper", 90)


def by_kind(variants: list[dict]) -> dict[str, set[str]]:
    """{schedule: the architectures of its variants}."""
    out: dict[str, set[str]] = {}
    for v in variants:
        out.setdefault(v["schedule"], set()).add(v["arch"])
    return out


def test_config_spaces_are_sm90a_and_the_gemm_families_have_portable_variants():
    for family in ("attention", "scaled_gemm"):
        space = _C.config_space(family)
        if space is not None:
            assert {v["arch"] for v in space["variants"]} == {"sm90a"}, family
    for family in ("gemm", "grouped_gemm"):
        kinds = by_kind(_C.config_space(family)["variants"])
        assert kinds == {"cooperative": {"sm90a"}, "pingpong": {"sm90a"}, "multistage": {"sm80"}}, family


def test_built_in_variants_say_their_architecture():
    if not wavetune.build_info()["kernels_compiled"]:
        pytest.skip("a build without kernels registers no built-in variants")
    dense = by_kind(_C.variants())
    assert dense["decode"] == {"sm90a"}  # thread-block clusters
    assert dense.get("cublas", {"any"}) == {"any"}
    paged = {v["name"]: v["arch"] for v in _C.paged_attention_variants()}
    assert paged and all(arch == ("sm90a" if "_ws" in name else "sm80") for name, arch in paged.items())
    attention = by_kind(_C.attention_variants())
    assert attention["cudnn"] == {"any"} and attention["paged"] == {"sm80"}
    scaled = by_kind(_C.scaled_gemm_variants())
    assert scaled["decode"] == {"sm90a"} and scaled.get("cublas", {"sm89"}) == {"sm89"}


@pytest.mark.parametrize("name, cc", [("sm80", 80), ("sm86", 86), ("sm89", 89), ("sm90", 90), ("sm90a", 90),
                                      ("sm100", 100), ("sm120", 120)])
def test_parse_compute_capability(name, cc):
    assert _C.parse_compute_capability(name) == cc


@pytest.mark.parametrize("name", ["", "80", "sm8", "sm_80", "SM80", "sm80x", "sm1000", "smab", "sm8a", "a"])
def test_parse_compute_capability_refuses_malformed_names(name):
    with pytest.raises(ValueError, match="is not an architecture name: use sm followed by"):
        _C.parse_compute_capability(name)


def test_wavetune_arch_is_read_once_per_process():
    done = run_python("""
        import os
        from wavetune.runtime.native import _C
        first = _C.arch_override()
        os.environ["WAVETUNE_ARCH"] = "sm86"
        print(first, _C.arch_override())
    """, "sm89")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["89", "89"]


def test_without_wavetune_arch_there_is_no_override():
    done = run_python("from wavetune.runtime.native import _C; print(_C.arch_override())", None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"]


def test_a_malformed_wavetune_arch_is_refused_by_name():
    done = run_python("""
        from wavetune.runtime.native import _C
        try:
            _C.arch_override()
        except ValueError as e:
            print(e)
    """, "ampere")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("wavetune: WAVETUNE_ARCH: 'ampere' is not an architecture name")


def test_no_gpu_serves_the_wavetune_arch_architecture():
    if wavetune.build_info()["kernels_compiled"] and not _C.no_device_reason():
        pytest.skip("a GPU is visible: the device check decides (GPU tier)")
    done = run_python("""
        from wavetune.runtime.native import _C
        print(_C.served_compute_capability(), _C.programmatic_launch())
    """, "sm80")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["80", "False"]  # programmatic dependent launch needs 9.0


CHOICES_UNDER_SM80 = """
    import json, random
    import wavetune
    from wavetune.runtime.native import _C
    from wavetune.runtime.configs import runnable
    out = {"listed": [c.arch for f in ("configs", "attention_configs", "paged_attention_configs",
                                        "scaled_gemm_configs", "grouped_configs") for c in getattr(wavetune, f)()]}
    chosen = {}
    for family, table in (("gemm", "nvidia-h100-80gb-hbm3.wtt"), ("grouped_gemm", "nvidia-h100-80gb-hbm3.grouped_gemm.wtt"),
                          ("attention", "nvidia-h100-80gb-hbm3.attention.wtt")):
        variants = list(_C.config_space(family)["variants"])
        if family == "gemm":
            variants += [dict(id=(1 << 20) + i, name=name, dtype=name.split("_")[1], b_layout=name[-3:],
                              swap_ab=False, schedule="cublas", tile=tile, cluster=(1, 1), scheduler="persistent",
                              arch="any") for i, (name, tile) in enumerate(_C.cublas_candidates())]
        selector = _C.Selector(TABLES + "/" + table, family, variants)
        arch = {v["id"]: v["arch"] for v in variants}
        count = selector.config_count() - selector.skipped_configs()  # the configs bound to a variant
        rng = random.Random(0)
        picks = set()
        for _ in range(500 if count and family != "attention" else 0):
            m, n, k = rng.randint(1, 8192), 8 * rng.randint(1, 2048), 8 * rng.randint(1, 2048)
            groups = 8 if family == "grouped_gemm" else 1
            picks.add(arch[selector.select("bf16", "col", m * groups, n, k, groups=groups)["variant"]])
        chosen[family] = [count, sorted(picks)]
    out["chosen"] = chosen
    print(json.dumps(out))
"""


def test_choices_under_sm80_never_name_an_sm90a_variant():
    done = run_python(f"TABLES = {str(REPO / 'tables')!r}\n" + textwrap.dedent(CHOICES_UNDER_SM80), "sm80")
    assert done.returncode == 0, done.stderr
    import json

    result = json.loads(done.stdout)
    assert all(_C.runs_on(arch, 80) for arch in result["listed"])
    # The dense table keeps its cuBLAS configs, the only ones of it that run on sm80; the grouped and attention
    # tables' configs are all sm90a, so no config of theirs is a candidate (the callers run the vendor's op).
    assert result["chosen"]["gemm"][0] > 0 and result["chosen"]["gemm"][1] == ["any"]
    assert result["chosen"]["grouped_gemm"] == [0, []]
    assert result["chosen"]["attention"] == [0, []]


def test_the_same_choices_on_hopper_keep_the_sm90a_configs():
    done = run_python(f"TABLES = {str(REPO / 'tables')!r}\n" + textwrap.dedent(CHOICES_UNDER_SM80), "sm90")
    assert done.returncode == 0, done.stderr
    import json

    chosen = json.loads(done.stdout)["chosen"]
    assert "sm90a" in chosen["gemm"][1] and "sm90a" in chosen["grouped_gemm"][1]


def test_the_device_check_names_an_older_gpu_and_what_wavetune_needs():
    message = _C.unsupported_device_error(1, "Tesla V100-SXM2-16GB", 7, 0)
    assert message.startswith("CUDA device 1 (Tesla V100-SXM2-16GB) has compute capability 7.0; wavetune needs "
                              "compute capability 8.0 or later")
    assert _C.unsupported_device_error(0, "NVIDIA A100-SXM4-80GB", 8, 0) == ""
    assert _C.unsupported_device_error(0, "NVIDIA GeForce RTX 5090", 12, 0) == ""
    assert _C.MIN_COMPUTE_CAPABILITY == 80


def test_patch_leaves_a_model_on_an_older_gpu_unchanged_and_says_why(monkeypatch):
    torch = pytest.importorskip("torch")
    import wavetune.nn as wnn

    reason = _C.unsupported_device_error(0, "Tesla T4", 7, 5)
    monkeypatch.setattr(wnn, "unsupported_gpu_reason", lambda model: reason)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64).to(torch.bfloat16))
    with pytest.warns(UserWarning, match=r"left the model unchanged: CUDA device 0 \(Tesla T4\) has compute "
                                         r"capability 7\.5; wavetune needs compute capability 8\.0"):
        report = wavetune.patch(model)
    assert not report.patched and not report.skipped and not report.layers
    assert type(model[0]) is torch.nn.Linear


def test_a_model_on_the_cpu_has_no_gpu_to_refuse():
    torch = pytest.importorskip("torch")
    from wavetune.runtime.device import unsupported_gpu_reason

    assert unsupported_gpu_reason(torch.nn.Linear(8, 8)) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wavetune.patch(torch.nn.Sequential(torch.nn.Linear(8, 8)))  # no warning: nothing is on an older GPU


PORTABLE_ON_THE_GPU = """
    import math, torch, transformers, wavetune
    from wavetune.runtime.native import _C
    from wavetune.runtime.configs import KernelConfig
    assert _C.served_compute_capability() == 80 and not _C.programmatic_launch()
    by_id = {v["id"]: v for v in _C.variants()}
    torch.manual_seed(0)
    dev = "cuda"
    # Dense GEMM: the choice runs on sm80 (cuBLAS or a portable variant).
    a, w = torch.randn(96, 512, device=dev, dtype=torch.bfloat16), torch.randn(768, 512, device=dev, dtype=torch.bfloat16)
    torch.testing.assert_close(wavetune.gemm(a, w.t()), a @ w.t(), rtol=2e-2, atol=2e-1)
    chosen = _C.PreparedGemm(96, 768, 512, 512, 512, 768, 0, 0, 0).variant
    assert _C.runs_on(by_id[chosen]["arch"], 80), by_id[chosen]
    # An sm90a variant forced by name is refused, naming both architectures.
    sm90a = [v for v in _C.variants() if v["arch"] == "sm90a" and v["dtype"] == "bf16" and v["b_layout"] == "col"]
    if sm90a:
        try:
            wavetune.gemm(a, w.t(), config=sm90a[0]["name"])
            raise AssertionError("an sm90a variant ran on sm80")
        except ValueError as e:
            assert "sm90a" in str(e) and "sm80" in str(e), e
    # Grouped GEMM (bf16): torch._grouped_mm where no grouped variant runs.
    x, we = torch.randn(256, 512, device=dev, dtype=torch.bfloat16), torch.randn(4, 384, 512, device=dev, dtype=torch.bfloat16)
    offsets = torch.tensor([64, 128, 200, 256], device=dev, dtype=torch.int32)
    want = torch._grouped_mm(x, we.transpose(-2, -1), offs=offsets)
    torch.testing.assert_close(wavetune.grouped_gemm(x, we, offsets), want, rtol=2e-2, atol=2e-1)
    assert not [c for c in wavetune.grouped_configs() if c.arch == "sm90a"]
    # Attention (prefill and decode): SDPA or cuDNN or the portable paged kernels.
    q, k, v = (torch.randn(2, 300, 8, 128, device=dev, dtype=torch.bfloat16) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                           is_causal=True).transpose(1, 2)
    torch.testing.assert_close(wavetune.attention(q, k, v, causal=True), ref, rtol=2e-2, atol=2e-2)
    q1 = q[:, :1].contiguous()
    ref1 = torch.nn.functional.scaled_dot_product_attention(q1.transpose(1, 2), k.transpose(1, 2),
                                                            v.transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(wavetune.attention(q1, k, v), ref1, rtol=2e-2, atol=2e-2)
    # Paged attention: one page per sequence, the portable kernels only.
    assert wavetune.paged_attention_configs() and all(c.arch == "sm80" for c in wavetune.paged_attention_configs())
    kc, vc = (torch.randn(40, 16, 8, 128, device=dev, dtype=torch.bfloat16) for _ in range(2))
    table = torch.randperm(40, device=dev)[:38].view(2, 19).int()
    lengths = (300, 177)
    got = wavetune.paged_attention(q1[:, 0], kc, vc, table, torch.tensor(lengths, device=dev, dtype=torch.int32))
    for b, n in enumerate(lengths):
        keys, values = (c[table[b].long()].flatten(0, 1)[:n].float() for c in (kc, vc))
        s = torch.einsum("hd,nhd->hn", q1[b, 0].float(), keys) / math.sqrt(128)
        torch.testing.assert_close(got[b].float(), torch.einsum("hn,nhd->hd", s.softmax(-1), values),
                                   rtol=2e-2, atol=2e-2)
    # A layer op.
    xs, weight = torch.randn(64, 1024, device=dev, dtype=torch.bfloat16), torch.randn(1024, device=dev, dtype=torch.bfloat16)
    ref = weight * (xs.float() * torch.rsqrt(xs.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(xs.dtype)
    torch.testing.assert_close(wavetune.rms_norm(xs, weight, 1e-6), ref, rtol=2e-2, atol=2e-2)
    # Patched transformers models, dense and mixture-of-experts (their experts on torch._grouped_mm): logits as before.
    common = dict(vocab_size=256, hidden_size=1024, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=8,
                  num_key_value_heads=2, head_dim=128, max_position_embeddings=512)
    moe = dict(num_local_experts=8, num_experts_per_tok=2)
    for name, config in (("LlamaForCausalLM", transformers.LlamaConfig(**common)),
                         ("MixtralForCausalLM", transformers.MixtralConfig(**common, **moe))):
        with torch.device(dev):
            model = getattr(transformers, name)(config).to(torch.bfloat16).eval()
        if name == "MixtralForCausalLM":
            model.set_experts_implementation("grouped_mm")
        tokens = torch.randint(0, 256, (2, 37), device=dev)
        with torch.no_grad():
            before = model(tokens).logits.float()
            report = wavetune.patch(model)
            assert report.patched and report.switched, (name, report)
            after = model(tokens).logits.float()
        assert ((after - before).norm() / before.norm()).item() < 2e-2, name
    print("ok")
"""


@pytest.mark.gpu
def test_every_family_and_a_patched_model_run_served_as_sm80():
    done = run_python(PORTABLE_ON_THE_GPU, "sm80", timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.split()[-1] == "ok"


@pytest.mark.gpu
def test_wavetune_arch_above_the_gpu_is_refused():
    done = run_python("""
        import torch, wavetune
        a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
        try:
            wavetune.gemm(a, a)
        except ValueError as e:
            print(e)
    """, "sm100")
    assert done.returncode == 0, done.stderr
    assert "WAVETUNE_ARCH=sm100 names compute capability 10.0, above CUDA device 0's" in done.stdout

"""benchmarks/logits_error.py without a GPU: its harness (the fp32 run's greedy tokens teacher-force the others,
errors against the fp32 run, the report and its bound) on a tiny model on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import load_benchmark

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

logits_error = load_benchmark(Path(__file__).resolve().parents[1] / "benchmarks" / "logits_error.py")
TINY = dict(family="Llama", qkv_bias=False, sizes=dict(
    hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
    rms_norm_eps=1e-6, rope_theta=10000.0, max_position_embeddings=512))


def test_the_logits_error_harness_teacher_forces_and_reports(tmp_path, monkeypatch):
    """benchmarks/logits_error.py on the CPU (wavetune leaves a CPU model as it is): both runs see the fp32 run's
    tokens, the errors are measured against it, and the report flags a ratio over the bound."""
    monkeypatch.setitem(logits_error.MODELS, "tiny", TINY)
    model = logits_error.build("tiny", 2, "cpu")
    prompt = torch.randint(0, 256, (2, 5))
    logits, tokens = logits_error.logits_run(model, prompt, None, 3, 8)
    assert len(logits) == 4 and [t.shape for t in tokens] == [(2, 1)] * 3
    again, fed = logits_error.logits_run(model, prompt, tokens, 3, 8)
    assert fed == tokens and logits_error.relative_error(again, logits) == 0.0
    result = logits_error.measure("tiny", 2, 2, 5, 3, device="cpu")
    assert 0 < result["eager_error"] < 0.05 and result["wavetune_error"] == result["eager_error"]  # CPU: unpatched
    logits_error.main(["--models", "tiny", "--layers", "1", "--prompt", "4", "--steps", "2", "--device", "cpu",
                       "--out", str(tmp_path)])
    assert json.loads((tmp_path / "logits_error.json").read_text())["results"][0]["model"] == "tiny"
    over = logits_error.markdown([{**result, "ratio": 1.2}], "test GPU", "2026-12-08")
    assert "| tiny | 2 | 2 | 5 | 3 |" in over and "1.200 (over)" in over

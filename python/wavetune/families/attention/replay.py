"""wavetune.attention's choice replayed in Python on logs that time every candidate (benchmarks/attention_replay.py
reports it; docs/results.md#attention_candidates_replay_h200.md): the built-in rule alone, an attention table over it,
and the table with every CUTLASS config a candidate too. The choice follows the attention family's choose
(csrc/families/attention/choice.cpp; the Python reference, as ``wavetune.families.gemm.replay`` is the GEMM
tables'): the table's per-wave models (model.predict over tuning.attention_coordinates) override the built-in
rule where they predict a candidate faster by more than the choice's margin. The built-in decode rule and the
margin are the choice's own (choice_rules.h, bound as ``_C.attention_builtin_prefers_cudnn`` and
``_C.attention_table_overrides``). Needs no GPU and no compiled kernels.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from ...codegen import config_space
from ...runtime.jit import CONFIG_SPACES
from ...runtime.native import _C
from ...tuning import model, tablefile
from . import FAMILY, tuning
from .api import attention_configs

LIBRARY = ("attn_cudnn_", "attn_paged_")


def table_predictor(path: Path, sm_count: int):
    """(config keys "<variant>/<splits>", predict(key, case) -> us) of an attention table file."""
    table = tablefile.read_table(path)
    tiles = {v.name: (v.tile_m, v.tile_n, v.tile_k)
             for v in config_space.load(CONFIG_SPACES / FAMILY.config_space).variants}
    tiles.update({c.name: c.tile for c in attention_configs() if c.from_library})  # nominal tiles (attention.h)
    keys = [f"{c['variant']}/{c['splits']}" for c in table["configs"]]
    waves = {keys[i]: w for i, w in table["waves"].items()}

    def tile(name: str) -> tuple[int, int, int]:
        return tiles[name]

    def predict(key: str, case: dict) -> float:
        name, splits = key.rsplit("/", 1)
        G, L, W, launches = tuning.attention_coordinates(SimpleNamespace(tile=tile(name)), int(splits), case, sm_count)
        return launches * model.predict(waves[key], G, L, W, sm_count)

    return keys, tile, predict


def builtin(case: dict) -> str:
    """The built-in rule's candidate for a call without out= that may run cuDNN and the paged kernel (a log's
    cases: prefill with as many queries as keys, decode)."""
    sizes = tuple(case[key] for key in ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim"))
    cudnn = _C.attention_builtin_prefers_cudnn(sizes, case.get("causal", True), (True, True, False))
    return f"attn_{'cudnn' if cudnn else 'paged'}_bf16_hd{case['head_dim']}/1"


def choose(case: dict, keys, tile, predict, every_config: bool) -> str:
    """The table's candidate over the built-in rule's; the CUTLASS configs only with ``every_config``."""
    decode = case["phase"] == "decode"
    fits = [key for key in keys if tile(key.rsplit("/", 1)[0])[2] == case["head_dim"]
            and (decode or not key.startswith("attn_paged_"))
            and (every_config or key.startswith(LIBRARY))
            and (int(key.rsplit("/", 1)[1]) == 1 or (decode and case["seqlen_k"] // int(key.rsplit("/", 1)[1])
                                                      >= tile(key.rsplit("/", 1)[0])[1]))]
    predicted = {key: predict(key, case) for key in fits}
    best, prior = min(predicted, key=predicted.get), builtin(case)
    return best if _C.attention_table_overrides(predicted.get(prior, 0.0), predicted[best]) else prior


def replay(cases: list[dict], keys, tile, predict) -> dict[str, list[float]]:
    """SDPA's fastest backend over each policy's measured time, per case (perfect: decode cases only); in a
    tuning log, which times no SDPA backend, cuDNN's candidate instead."""
    out = {"rule": [], "table": [], "every config": [], "decode rule": [], "decode table": [], "perfect": []}
    for c in cases:
        times = c["variants_us"]
        sdpa = c.get("sdpa_best_us") or times[f"attn_cudnn_bf16_hd{c['head_dim']}/1"]
        picks = {"rule": builtin(c), "table": choose(c, keys, tile, predict, False),
                 "every config": choose(c, keys, tile, predict, True)}
        for policy, key in picks.items():
            out[policy].append(sdpa / times[key])
        if c["phase"] == "decode":
            out["decode rule"].append(sdpa / times[picks["rule"]])
            out["decode table"].append(sdpa / times[picks["table"]])
            out["perfect"].append(sdpa / min(us for key, us in times.items() if key.startswith(LIBRARY)))
    return out

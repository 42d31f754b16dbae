"""Real LLM architectures at their published sizes (their config.json values), as transformers configs: the
models benchmarks/e2e.py builds (random weights, fewer layers) and the tests patch at real sizes. Each entry:
the transformers family (``<family>Config``, ``<family>ForCausalLM``), whether its attention projections
have biases or it is a mixture of experts, and the config's sizes. The dense shapes match
shared/benchmarks/llm_shapes.json. And what a decode step of such a model must read (``decode_step_bytes``), for
the benchmarks' effective bandwidths. Standard library only.
"""

MODELS = {
    "llama3-8b": dict(family="Llama", qkv_bias=False, sizes=dict(
        hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
        vocab_size=128256, rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=8192)),
    "qwen2.5-7b": dict(family="Qwen2", qkv_bias=True, sizes=dict(
        hidden_size=3584, intermediate_size=18944, num_attention_heads=28, num_key_value_heads=4,
        vocab_size=152064, rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=32768)),
    "mistral-7b": dict(family="Mistral", qkv_bias=False, sizes=dict(
        hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
        vocab_size=32768, rms_norm_eps=1e-5, rope_theta=1000000.0, max_position_embeddings=32768,
        sliding_window=None)),
    "mixtral-8x7b": dict(family="Mixtral", moe=True, sizes=dict(
        hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
        vocab_size=32000, rms_norm_eps=1e-5, rope_theta=1000000.0, max_position_embeddings=32768,
        num_local_experts=8, num_experts_per_tok=2, sliding_window=None)),
    "qwen3-30b-a3b": dict(family="Qwen3Moe", moe=True, sizes=dict(
        hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768, num_attention_heads=32,
        num_key_value_heads=4, head_dim=128, vocab_size=151936, rms_norm_eps=1e-6, rope_theta=1000000.0,
        max_position_embeddings=40960, num_experts=128, num_experts_per_tok=8, norm_topk_prob=True,
        decoder_sparse_step=1, mlp_only_layers=[])),
    "qwen1.5-moe-a2.7b": dict(family="Qwen2Moe", moe=True, sizes=dict(
        hidden_size=2048, intermediate_size=5632, moe_intermediate_size=1408, shared_expert_intermediate_size=5632,
        num_attention_heads=16, num_key_value_heads=16, vocab_size=151936, rms_norm_eps=1e-6,
        rope_theta=1000000.0, max_position_embeddings=8192, num_experts=60, num_experts_per_tok=4,
        decoder_sparse_step=1, mlp_only_layers=[])),
}


def decode_step_bytes(model, cached: float, batch: int, lm_head: bool = True) -> float:
    """The bytes one decode step of a transformers causal LM must read from memory: every weight once (the input
    embedding's rows aside: one per sequence; a mixture of experts' experts at the share ``batch`` random routings
    reach on average; the LM head only with ``lm_head``), and each layer's keys and values of ``cached`` tokens per
    sequence. Count it on the unpatched model (patching merges weights into new tensors)."""
    config = model.config
    embedding, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    experts = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None)
    reached = 1 - (1 - 1 / experts) ** (batch * getattr(config, "num_experts_per_tok", 1)) if experts else 1.0
    total, seen = 0.0, set()
    for name, parameter in model.named_parameters():
        if parameter.data_ptr() in seen or (parameter is head and not lm_head and head is not embedding):
            continue
        seen.add(parameter.data_ptr())
        size = parameter.numel() * parameter.element_size()
        if parameter is embedding and not (lm_head and head is embedding):
            size = batch * embedding.shape[1] * embedding.element_size()
        total += size * (reached if ".experts." in name else 1.0)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    cache = 2 * config.num_hidden_layers * batch * config.num_key_value_heads * head_dim * cached
    return total + cache * embedding.element_size()

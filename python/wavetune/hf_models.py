"""Real LLM architectures at their published sizes (their config.json values), as transformers configs: the
models benchmarks/e2e.py builds (random weights, fewer layers) and the tests patch at real sizes. Each entry:
the transformers family (``<family>Config``, ``<family>ForCausalLM``), whether its attention projections
have biases or it is a mixture of experts, and the config's sizes. The dense shapes match
shared/benchmarks/llm_shapes.json. Standard library only.
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

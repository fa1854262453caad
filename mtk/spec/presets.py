"""Model size presets: GPT-3 style sizes (the AWS Megatron-LM test case's table), Llama-2/3, the 8B GPT of
``examples/seed-multinode.yaml``, and a ``tiny`` model that trains on a CPU.

A preset is a plain dict of ``ModelSpec`` fields; explicit fields in the job spec override it.
"""

from __future__ import annotations

_GPT_COMMON = {
    "arch": "gpt",
    "seq_length": 2048,
    "max_position_embeddings": 2048,
    "vocab_size": 50257,
    "position_embedding": "learned_absolute",
    "normalization": "LayerNorm",
    "activation": "gelu",
}

_LLAMA_COMMON = {
    "arch": "llama",
    "position_embedding": "rope",
    "normalization": "RMSNorm",
    "activation": "swiglu",
    "untie_embeddings": True,
    "add_bias_linear": False,
    "hidden_dropout": 0.0,
    "attention_dropout": 0.0,
}


def _gpt(heads: int, hidden: int, layers: int) -> dict:
    return {**_GPT_COMMON, "num_attention_heads": heads, "hidden_size": hidden, "num_layers": layers,
            "ffn_hidden_size": 4 * hidden}


def _llama(layers, hidden, ffn, heads, groups, seq, vocab, rope_base=10000.0) -> dict:
    return {**_LLAMA_COMMON, "num_layers": layers, "hidden_size": hidden, "ffn_hidden_size": ffn,
            "num_attention_heads": heads, "num_query_groups": groups, "seq_length": seq,
            "max_position_embeddings": seq, "vocab_size": vocab, "rotary_base": rope_base}


PRESETS: dict[str, dict] = {
    # GPT-3 style sizes from the AWS Megatron-LM test case (heads / hidden / layers).
    "gpt-1.7b": _gpt(24, 2304, 24),
    "gpt-3.6b": _gpt(32, 3072, 30),
    "gpt-7.5b": _gpt(32, 4096, 36),
    "gpt-18.4b": _gpt(48, 6144, 40),
    "gpt-39.1b": _gpt(64, 8192, 48),
    "gpt-76.1b": _gpt(80, 10240, 60),
    "gpt-145.6b": _gpt(96, 12288, 80),
    "gpt-310.1b": _gpt(128, 16384, 96),
    # The GPT of examples/seed-multinode.yaml: 32 layers, hidden 4096, FFN 14336, 32 heads, seq 2048.
    "seed-8b": {**_GPT_COMMON, "num_layers": 32, "hidden_size": 4096, "ffn_hidden_size": 14336,
                "num_attention_heads": 32},
    "llama2-7b": _llama(32, 4096, 11008, 32, 32, 4096, 32000),
    "llama2-13b": _llama(40, 5120, 13824, 40, 40, 4096, 32000),
    "llama2-70b": _llama(80, 8192, 28672, 64, 8, 4096, 32000),
    "llama3-8b": _llama(32, 4096, 14336, 32, 8, 8192, 128256, 500000.0),
    "llama3-70b": _llama(80, 8192, 28672, 64, 8, 8192, 128256, 500000.0),
    # Small enough for two CPU processes with gloo; loss falls visibly within 20 iterations.
    "tiny": {**_GPT_COMMON, "num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 256,
             "num_attention_heads": 4, "seq_length": 64, "max_position_embeddings": 64,
             "vocab_size": 1024, "hidden_dropout": 0.0, "attention_dropout": 0.0},
}

"""A random Llama-family folder of a real model's shape for the loading benchmark, saved by
transformers' save_pretrained in BF16 (as the models people download are): TinyLlama-1.1B's shape
by default (22 layers, 32 query heads on 4 key/value heads, hidden 2048, ff 5632, vocabulary
32,000; 1.1 B parameters, 2.2 GB), or --small (4 layers, hidden 512: 0.1 GB) for a quick run; a
small byte-level BPE tokenizer (the benchmark feeds random ids; attnlab's loader wants one); or
--llama32: Llama 3.2 1B's shape (16 layers, 32 query heads on 8 key/value heads, hidden 2048, ff
8192, vocabulary 128,256, tied embeddings, rope_theta 5e5 with rope_type llama3; 1.24 B parameters,
2.5 GB), written as the installed transformers writes it (5.x: rope_parameters); or --qwen25:
Qwen2.5-0.5B's shape (Qwen2ForCausalLM: 24 layers, 14 query heads on 2 key/value heads, hidden
896, ff 4864, q/k/v biases, vocabulary 151,936, tied embeddings, rope_theta 1e6; 0.49 B
parameters, 1.0 GB).
Skips the work when DIR already holds it.
usage: make_llama.py DIR [--small | --llama32 | --qwen25]   (run with a Python that has transformers)
"""
import os
import sys

import torch
from toy_tokenizer import save_toy_tokenizer
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

d = sys.argv[1]
small = "--small" in sys.argv[2:]
if not os.path.exists(os.path.join(d, "model.safetensors")):
    torch.manual_seed(0)
    shape = dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=4, num_attention_heads=8,
                 num_key_value_heads=2) if small else \
        dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
             num_key_value_heads=4)
    config = LlamaConfig(vocab_size=32000, max_position_embeddings=2048, rms_norm_eps=1e-5,
                         tie_word_embeddings=False, torch_dtype="bfloat16", **shape)
    if "--llama32" in sys.argv[2:]:
        rope = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}
        five = int(transformers.__version__.split(".")[0]) >= 5
        config = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                             num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                             max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=True,
                             torch_dtype="bfloat16",
                             **({"rope_parameters": dict(rope, rope_theta=500000.0)} if five
                                else {"rope_scaling": rope, "rope_theta": 500000.0}))
    model = LlamaForCausalLM
    if "--qwen25" in sys.argv[2:]:
        from transformers import Qwen2Config, Qwen2ForCausalLM
        five = int(transformers.__version__.split(".")[0]) >= 5
        config = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                             num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                             rms_norm_eps=1e-6, tie_word_embeddings=True, torch_dtype="bfloat16",
                             **({"rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}} if five
                                else {"rope_theta": 1000000.0}))
        model = Qwen2ForCausalLM
    model(config).to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    save_toy_tokenizer(d)
print(d)

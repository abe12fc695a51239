"""A random Llama-family folder of a real model's shape for the loading benchmark, saved by
transformers' save_pretrained in BF16 (as the models people download are): TinyLlama-1.1B's shape
by default (22 layers, 32 query heads on 4 key/value heads, hidden 2048, ff 5632, vocabulary
32,000; 1.1 B parameters, 2.2 GB), or --small (4 layers, hidden 512: 0.1 GB) for a quick run; a
small byte-level BPE tokenizer (the benchmark feeds random ids; attnlab's loader wants one).
Skips the work when DIR already holds it.
usage: make_llama.py DIR [--small]   (run with a Python that has transformers)
"""
import os
import sys

import torch
from toy_tokenizer import save_toy_tokenizer
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
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    save_toy_tokenizer(d)
print(d)

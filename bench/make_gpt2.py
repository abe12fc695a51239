"""A GPT-2-small-sized random model folder for the decoder benchmark: GPT2Model with GPT2Config's
defaults (12 layers, 12 heads, hidden 768, vocabulary 50,257; 124 M parameters), random weights,
saved by save_pretrained (safetensors) with a small byte-level BPE tokenizer (the benchmark feeds
random ids; attnlab's loader wants a tokenizer). Skips the work when DIR already holds it.
With --lm, GPT2LMHeadModel (the LM head tied to the embedding), for the patching benchmark.
usage: make_gpt2.py DIR [--lm]   (run with a Python that has transformers)
"""
import os
import sys

import torch
from toy_tokenizer import save_toy_tokenizer
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model

d = sys.argv[1]
if not os.path.exists(os.path.join(d, "model.safetensors")):
    torch.manual_seed(0)
    cls = GPT2LMHeadModel if "--lm" in sys.argv[2:] else GPT2Model
    cls(GPT2Config(attn_implementation="eager")).save_pretrained(d, safe_serialization=True)
    save_toy_tokenizer(d)
print(d)

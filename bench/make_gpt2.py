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
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model

d = sys.argv[1]
if not os.path.exists(os.path.join(d, "model.safetensors")):
    torch.manual_seed(0)
    cls = GPT2LMHeadModel if "--lm" in sys.argv[2:] else GPT2Model
    cls(GPT2Config(attn_implementation="eager")).save_pretrained(d, safe_serialization=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(["attention is all you need"] * 10,
                            trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                show_progress=False))
    tok.save(os.path.join(d, "tokenizer.json"))
print(d)

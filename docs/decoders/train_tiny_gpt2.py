"""The small GPT-2 behind docs/decoders/*.png: GPT2LMHeadModel (4 layers, 4 heads, d=128) trained
for 600 steps on the repository's own text with the byte-level BPE tests/crosscheck/hf_decoders.py trains
(~4 min on 2 cores with PyTorch 2.x, ~8 with Debian's 1.13). No pretrained decoder can be
downloaded here; this one has learnt enough of the text for the logit lens to show something.
usage: PYTHON train_tiny_gpt2.py OUT_DIR   (a Python with transformers: ~/.cache/attnlab/hf-venv)
"""
import os
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.normpath(os.path.join(here, "..", ".."))
out_dir = sys.argv[1]
sys.argv = [sys.argv[0], "unused-cli", repo]  # hf_decoders reads its CLI and repository from argv
sys.path.insert(0, os.path.join(repo, "tests"))
import hf_decoders  # noqa: E402  (the tokenizer trainer and the corpus)

torch.manual_seed(0)
torch.set_num_threads(2)
tok = hf_decoders.train_byte_level("gpt2")
data = torch.tensor(tok.encode("\n".join(hf_decoders.corpus())).ids)
model = GPT2LMHeadModel(GPT2Config(vocab_size=tok.get_vocab_size(), n_embd=128, n_layer=4, n_head=4, n_positions=256,
                                   attn_implementation="eager"))
opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
T, B, t0 = 128, 16, time.time()
for step in range(600):
    starts = torch.randint(0, len(data) - T - 1, (B,))
    x = torch.stack([data[int(i):int(i) + T] for i in starts])
    loss = model(input_ids=x, labels=x).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 100 == 0:
        print(f"step {step}: loss {loss.item():.2f} ({time.time() - t0:.0f} s)", flush=True)
model.save_pretrained(out_dir, safe_serialization=True)
tok.save(os.path.join(out_dir, "tokenizer.json"))
print(out_dir)

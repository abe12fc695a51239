#!/usr/bin/python3
"""PyTorch side of the forward benchmark: the articles' post-LN layer built from
nn.MultiheadAttention (need_weights=True, average_attn_weights=False, every layer's per-head
probabilities kept), embedding + sinusoidal positions, same sizes and thread count as
`attnlab-cli bench`. Prints one JSON line: {"median_ms": ..., ...}.
usage: torch_forward.py --layers 6 --dim 512 --heads 8 --ff 2048 --seq 128 --repeat 10 --threads 2
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
for name, default in [("layers", 6), ("dim", 512), ("heads", 8), ("ff", 2048), ("seq", 128), ("repeat", 10), ("threads", 2)]:
    p.add_argument(f"--{name}", type=int, default=default)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)


class Layer(nn.Module):
    def __init__(self, E, H, F):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(E, H, batch_first=True)
        self.linear1, self.linear2 = nn.Linear(E, F), nn.Linear(F, E)
        self.norm1, self.norm2 = nn.LayerNorm(E), nn.LayerNorm(E)

    def forward(self, x):
        att, w = self.self_attn(x, x, x, need_weights=True, average_attn_weights=False)
        x = self.norm1(x + att)
        return self.norm2(x + self.linear2(torch.relu(self.linear1(x)))), w


emb = nn.Embedding(1000, a.dim)
layers = nn.ModuleList([Layer(a.dim, a.heads, a.ff) for _ in range(a.layers)]).eval()
pe = torch.zeros(a.seq, a.dim)
pos = torch.arange(a.seq, dtype=torch.float32)[:, None]
div = torch.pow(10000.0, torch.arange(0, a.dim, 2, dtype=torch.float32) / a.dim)
pe[:, 0::2], pe[:, 1::2] = torch.sin(pos / div), torch.cos(pos / div)
ids = torch.randint(0, 1000, (a.seq,))


def forward():
    with torch.no_grad():
        x = (emb(ids) + pe)[None]
        probs = []
        for layer in layers:
            x, w = layer(x)
            probs.append(w)
        return x, probs


forward()
times = []
for _ in range(a.repeat):
    t0 = time.perf_counter()
    forward()
    times.append((time.perf_counter() - t0) * 1e3)
print(json.dumps({"impl": "pytorch " + torch.__version__, "threads": torch.get_num_threads(), "seq": a.seq,
                  "median_ms": statistics.median(times), "min_ms": min(times)}))

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
p.add_argument("--model", help="attnlab model folder (articles' layout) to load the same weights from")
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
if a.model:
    # Same weights as attnlab: read its safetensors (articles' layout) into these modules.
    import json as _json, os, struct
    with open(os.path.join(a.model, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = _json.loads(f.read(n))
        blob = f.read()
    def t(name):
        info = header[name]
        b, e = info["data_offsets"]
        return torch.frombuffer(bytearray(blob[b:e]), dtype=torch.float32).reshape(info["shape"])
    with torch.no_grad():
        emb.weight.copy_(t("embedding.weight"))
        for i, layer in enumerate(layers):
            p_ = f"layers.{i}."
            layer.self_attn.in_proj_weight.copy_(torch.cat([t(p_ + f"attention.{k}.weight") for k in ("query", "key", "value")]))
            layer.self_attn.in_proj_bias.copy_(torch.cat([t(p_ + f"attention.{k}.bias") for k in ("query", "key", "value")]))
            layer.self_attn.out_proj.weight.copy_(t(p_ + "attention.fc_out.weight"))
            layer.self_attn.out_proj.bias.copy_(t(p_ + "attention.fc_out.bias"))
            layer.norm1.weight.copy_(t(p_ + "attention.layer_norm.weight"))
            layer.norm1.bias.copy_(t(p_ + "attention.layer_norm.bias"))
            layer.linear1.weight.copy_(t(p_ + "ffn.fc1.weight"))
            layer.linear1.bias.copy_(t(p_ + "ffn.fc1.bias"))
            layer.linear2.weight.copy_(t(p_ + "ffn.fc2.weight"))
            layer.linear2.bias.copy_(t(p_ + "ffn.fc2.bias"))
            layer.norm2.weight.copy_(t(p_ + "ffn.layer_norm.weight"))
            layer.norm2.bias.copy_(t(p_ + "ffn.layer_norm.bias"))


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

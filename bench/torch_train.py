#!/usr/bin/python3
"""PyTorch side of the training-step benchmark: the same classifier as `attnlab-cli bench --train`
(embedding + learned positions, post-LN layers of nn.MultiheadAttention + ReLU feed-forward,
dropout on attention and both residual branches, masked-mean pooling, linear classifier,
cross-entropy, Adam), one step = zero_grad + forward + backward + step. Prints one JSON line.
usage: torch_train.py --layers 2 --dim 128 --heads 8 --ff 512 --seq 64 --batch 32 --repeat 10 --threads 2
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
for name, default in [("layers", 2), ("dim", 128), ("heads", 8), ("ff", 512), ("seq", 64), ("batch", 32), ("repeat", 10),
                      ("threads", 2)]:
    p.add_argument(f"--{name}", type=int, default=default)
p.add_argument("--dropout", type=float, default=0.1)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)


class Layer(nn.Module):
    def __init__(self, E, H, F, p):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(E, H, dropout=p, batch_first=True)
        self.linear1, self.linear2 = nn.Linear(E, F), nn.Linear(F, E)
        self.norm1, self.norm2 = nn.LayerNorm(E), nn.LayerNorm(E)
        self.drop1, self.drop2 = nn.Dropout(p), nn.Dropout(p)

    def forward(self, x, kpm):
        att, _ = self.self_attn(x, x, x, key_padding_mask=kpm, need_weights=False)
        x = self.norm1(x + self.drop1(att))
        return self.norm2(x + self.drop2(self.linear2(torch.relu(self.linear1(x)))))


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(1000, a.dim)
        self.pos_embedding = nn.Embedding(512, a.dim)
        self.layers = nn.ModuleList([Layer(a.dim, a.heads, a.ff, a.dropout) for _ in range(a.layers)])
        self.fc = nn.Linear(a.dim, 2)

    def forward(self, ids, kpm):
        x = self.embedding(ids) + self.pos_embedding(torch.arange(ids.shape[1]))[None]
        for layer in self.layers:
            x = layer(x, kpm)
        keep = (~kpm).float()[..., None]
        return self.fc((x * keep).sum(1) / keep.sum(1))


model = Classifier().train()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
ids = torch.randint(3, 1000, (a.batch, a.seq))
labels = torch.randint(0, 2, (a.batch,))
kpm = torch.zeros(a.batch, a.seq, dtype=torch.bool)
loss_fn = nn.CrossEntropyLoss()


def step():
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = loss_fn(model(ids, kpm), labels)
    loss.backward()
    opt.step()
    return (time.perf_counter() - t0) * 1e3


step()
times = [step() for _ in range(a.repeat)]
med = statistics.median(times)
print(json.dumps({"impl": "pytorch " + torch.__version__, "threads": torch.get_num_threads(), "median_ms": med,
                  "samples_per_s": a.batch / (med / 1e3)}))

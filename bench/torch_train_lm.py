#!/usr/bin/python3
"""PyTorch side of the language-model training-step benchmark: the decoders `attnlab-cli bench
--train --objective lm` trains (engine/train/trainer.cpp, new_language_model), written as a
nanoGPT-style PyTorch model, one step = zero_grad + forward + next-token cross-entropy at every
position + backward + gradient clipping at norm 1 + Adam (lr 1e-3), as attnlab's step.
  gpt2:  token + learned positions, pre-LN blocks (LayerNorm, attention with biases, tanh-GELU
         feed-forward), final LayerNorm, head tied to the embedding;
  llama: RMSNorm (eps 1e-6), rotary positions (theta 10,000, halves rotated as transformers'
         rotate_half), no biases, SwiGLU feed-forward, grouped-query heads (--kv-heads), untied head.
--ff 0 leaves out the feed-forward (and its norm): an attention-only model.
--attn sdpa (default) uses F.scaled_dot_product_attention(is_causal=True), PyTorch's fused kernel
(what nanoGPT uses); --attn eager writes the softmax out, as transformers' eager attention does.
Prints one JSON line.
usage: torch_train_lm.py --arch gpt2 --layers 4 --dim 256 --heads 4 --ff 1024 --seq 256 --batch 16
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2")
for name, default in [("layers", 4), ("dim", 256), ("heads", 4), ("kv-heads", 0), ("ff", -1), ("vocab", 1000),
                      ("seq", 256), ("batch", 16), ("repeat", 10), ("threads", 2)]:
    p.add_argument(f"--{name}", type=int, default=default)
p.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa")
a = p.parse_args()
if a.ff < 0:
    a.ff = 4 * a.dim
torch.set_num_threads(a.threads)
torch.manual_seed(0)
gpt2 = a.arch == "gpt2"
H = a.heads
KV = a.kv_heads if (a.kv_heads > 0 and not gpt2) else H
D = a.dim // H


class RMSNorm(nn.Module):
    def __init__(self, E, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(E)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def norm(E):
    return nn.LayerNorm(E) if gpt2 else RMSNorm(E)


def rope_tables(T):
    inv = 1.0 / (10000 ** (torch.arange(0, D, 2).float() / D))
    f = torch.outer(torch.arange(T).float(), inv)
    emb = torch.cat([f, f], -1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return torch.cat([-x2, x1], -1)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(a.dim, H * D, bias=gpt2)
        self.k = nn.Linear(a.dim, KV * D, bias=gpt2)
        self.v = nn.Linear(a.dim, KV * D, bias=gpt2)
        self.o = nn.Linear(H * D, a.dim, bias=gpt2)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q(x).view(B, T, H, D).transpose(1, 2)
        k = self.k(x).view(B, T, KV, D).transpose(1, 2)
        v = self.v(x).view(B, T, KV, D).transpose(1, 2)
        if not gpt2:
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if KV != H:  # transformers' repeat_kv
            k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
        if a.attn == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            y = s.softmax(-1) @ v
        return self.o(y.transpose(1, 2).reshape(B, T, H * D))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.attn = norm(a.dim), Attention()
        if a.ff > 0:
            self.ln2 = norm(a.dim)
            if gpt2:
                self.up, self.down = nn.Linear(a.dim, a.ff), nn.Linear(a.ff, a.dim)
            else:
                self.gate = nn.Linear(a.dim, a.ff, bias=False)
                self.up, self.down = nn.Linear(a.dim, a.ff, bias=False), nn.Linear(a.ff, a.dim, bias=False)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.ln1(x), cos, sin)
        if a.ff > 0:
            h = self.ln2(x)
            h = F.gelu(self.up(h), approximate="tanh") if gpt2 else F.silu(self.gate(h)) * self.up(h)
            x = x + self.down(h)
        return x


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(a.vocab, a.dim)
        self.wpe = nn.Embedding(a.seq, a.dim) if gpt2 else None
        self.blocks = nn.ModuleList([Block() for _ in range(a.layers)])
        self.ln_f = norm(a.dim)
        self.head = nn.Linear(a.dim, a.vocab, bias=False)
        if gpt2:
            self.head.weight = self.wte.weight  # tied
        cos, sin = rope_tables(a.seq)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, ids):
        x = self.wte(ids)
        if gpt2:
            x = x + self.wpe(torch.arange(ids.shape[1]))[None]
        for b in self.blocks:
            x = b(x, self.cos, self.sin)
        return self.head(self.ln_f(x))


model = Decoder().train()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
ids = torch.randint(3, a.vocab, (a.batch, a.seq))


def step():
    t0 = time.perf_counter()
    opt.zero_grad()
    logits = model(ids)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, a.vocab), ids[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return (time.perf_counter() - t0) * 1e3


step()
times = [step() for _ in range(a.repeat)]
med = statistics.median(times)
print(json.dumps({"impl": "pytorch " + torch.__version__, "attn": a.attn, "threads": torch.get_num_threads(),
                  "params": sum(p.numel() for p in model.parameters()), "median_ms": med,
                  "samples_per_s": a.batch / (med / 1e3)}))

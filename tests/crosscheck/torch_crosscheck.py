#!/usr/bin/python3
"""Cross-check attnlab-cli forward against PyTorch on the same weights.

Builds models in PyTorch (nn.MultiheadAttention post-LN layers as in article 003, the article-000
modules, nn.TransformerEncoderLayer with norm_first/GELU, a BERT-shaped stack with token types,
embedding LayerNorm, tanh GELU and a pooler, and nn.TransformerEncoder with its final LayerNorm),
writes them as attnlab model
folders, runs `attnlab-cli forward --attn-out --out`, and compares every layer's per-head
probabilities and the final hidden states with need_weights=True, average_attn_weights=False.
PyTorch runs every case in float64 (the oracle) and in float32; the bound is pyutil.oracle_bound
(8x float32 PyTorch's own distance from the oracle, never below a first-principles floor).
Masks: none, causal, padding, bool/float/per-head custom, sliding window, their combination, a
fully blocked row (PyTorch: NaN, attnlab: zeros), and cross-attention. Usage: torch_crosscheck.py PATH/TO/attnlab-cli
"""
import atexit
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn

from pyutil import oracle_bound, save_safetensors, stack_floor

torch.set_num_threads(2)
CLI = sys.argv[1]
failures = []
DTYPES = (torch.float32, torch.float64)


def copies(*modules):
    """{dtype: the modules in that dtype} for float32 (the modules themselves) and float64."""
    return {torch.float32: modules, torch.float64: tuple(copy.deepcopy(m).double() for m in modules)}


def floors(L, K, hidden):
    """First-principles floors (pyutil.stack_floor) for L layers whose longest reduction has K
    terms: probabilities (rows of magnitude 1) and hidden states (of magnitude max|hidden|)."""
    return stack_floor(L, K), stack_floor(L, K, float(np.abs(hidden).max()))


def write_model(folder, config, tensors, vocab_size):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(folder, "vocab.txt"), "w") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]"] + [f"w{i}" for i in range(vocab_size - 3)]) + "\n")
    save_safetensors(os.path.join(folder, "model.safetensors"), tensors)


def run_cli(folder, ids, masks=(), cross_ids=None):
    with tempfile.TemporaryDirectory() as d:
        a, h = os.path.join(d, "a.npy"), os.path.join(d, "h.npy")
        cmd = [CLI, "forward", "--model", folder, "--ids", ",".join(map(str, ids)), "--attn-out", a, "--out", h]
        if cross_ids is not None:
            cmd += ["--cross-ids", ",".join(map(str, cross_ids))]
        for m in masks:
            cmd += ["--mask", m]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr}")
        return np.load(a), np.load(h), r.stderr


def sinusoidal(T, E):
    pe = torch.zeros(T, E, dtype=torch.float64)
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    k = torch.arange(0, E, 2, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos / torch.pow(10000.0, k / E))
    pe[:, 1::2] = torch.cos(pos / torch.pow(10000.0, k / E))
    return pe


def compare(case, ours, theirs, theirs32, floor):
    """attnlab against the float64 oracle `theirs`, within oracle_bound(theirs32, theirs, floor)."""
    theirs, theirs32 = np.asarray(theirs, dtype=np.float64), np.asarray(theirs32, dtype=np.float64)
    ours = np.asarray(ours, dtype=np.float64)
    if ours.shape != theirs.shape:
        failures.append(f"{case}: shape {ours.shape} != {theirs.shape}")
        return
    nan_rows = np.isnan(theirs)
    if nan_rows.any():  # PyTorch's fully blocked rows: attnlab must give exact zeros there
        if not np.all(ours[nan_rows] == 0):
            failures.append(f"{case}: rows PyTorch leaves NaN are not all zero")
        ours, theirs, theirs32 = ours[~nan_rows], theirs[~nan_rows], theirs32[~nan_rows]
    if not np.all(np.isfinite(ours)):
        failures.append(f"{case}: attnlab produced NaN/inf")
        return
    tol = oracle_bound(theirs32, theirs, floor)
    err = float(np.max(np.abs(ours - theirs))) if ours.size else 0.0
    status = "ok" if err <= tol else "FAIL"
    print(f"{status:4} {case}: max abs diff {err:.2e} (bound {tol:.2e})")
    if err > tol:
        failures.append(f"{case}: max abs diff {err:.2e} > {tol:.2e}")


class MhaPostLN(nn.Module):
    """Article 003's TransformerLayer (dropout 0): nn.MultiheadAttention, post-LN, ReLU FFN."""

    def __init__(self, E, H, F):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(E, H, batch_first=True)
        self.linear1, self.linear2 = nn.Linear(E, F), nn.Linear(F, E)
        self.norm1, self.norm2 = nn.LayerNorm(E), nn.LayerNorm(E)

    def forward(self, x, attn_mask=None, key_padding_mask=None):
        a, w = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                              need_weights=True, average_attn_weights=False)
        x = self.norm1(x + a)
        x = self.norm2(x + self.linear2(torch.relu(self.linear1(x))))
        return x, w


def torch_encoder_case():
    torch.manual_seed(0)
    V, E, H, F, L, T = 50, 64, 8, 96, 3, 12
    emb = nn.Embedding(V, E)
    layers = nn.ModuleList([MhaPostLN(E, H, F) for _ in range(L)])
    tensors = {"embedding.weight": emb.weight}
    for i, layer in enumerate(layers):
        for name, p in layer.named_parameters():
            tensors[f"layers.{i}.{name}"] = p
    cfg = {"vocab_size": V, "embed_size": E, "num_heads": H, "num_layers": L, "ff_dim": F, "max_len": 64,
           "positional": "sinusoidal"}
    folder = tempfile.mkdtemp(prefix="attnlab_torch_")
    atexit.register(shutil.rmtree, folder, True)
    write_model(folder, cfg, tensors, V)

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, V, (T,), generator=g)
    ids[-3:] = 0  # three [PAD] tokens

    mods = copies(emb, layers)

    def torch_forward(ids, attn_mask=None, kpm=None, dtype=torch.float32):
        emb_, layers_ = mods[dtype]
        if attn_mask is not None and attn_mask.is_floating_point():
            attn_mask = attn_mask.to(dtype)
        x = (emb_(ids) + sinusoidal(len(ids), E).to(dtype))[None]
        probs, inputs = [], []
        with torch.no_grad():
            for layer in layers_:
                inputs.append(x)
                x, w = layer(x, attn_mask, kpm)
                probs.append(w[0])
        return torch.stack(probs).numpy(), x[0].numpy(), inputs

    causal = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)  # article 003, section 2.2
    kpm = (ids == 0)[None]  # article 003, section 2.1
    gen = torch.Generator().manual_seed(2)
    bool_mask = torch.rand(T, T, generator=gen) < 0.3
    bool_mask[:, 0] = False  # keep every row alive
    float_mask = torch.randn(T, T, generator=gen)
    float_mask[torch.rand(T, T, generator=gen) < 0.2] = float("-inf")
    float_mask[:, 1] = 0.0
    head_mask = torch.rand(H, T, T, generator=gen) < 0.3
    head_mask[:, :, 2] = False
    W = 5
    window = torch.ones(T, T, dtype=torch.bool)  # article 000's SparseAttention rule
    for i in range(T):
        window[i, max(0, i - W // 2):min(T, i + W // 2 + 1)] = False
    dead = torch.zeros(T, T, dtype=torch.bool)
    dead[4, :] = True  # query 4 sees nothing

    d = tempfile.mkdtemp(prefix="attnlab_masks_")
    atexit.register(shutil.rmtree, d, True)

    def npy(name, t):
        p = os.path.join(d, name)
        np.save(p, t.numpy())
        return p

    cases = [
        ("no mask", [], {}),
        ("causal", ["causal"], {"attn_mask": causal}),
        ("padding", ["padding"], {"kpm": kpm}),
        ("causal + padding", ["causal", "padding"], {"attn_mask": causal, "kpm": kpm}),
        ("custom bool", [f"custom:{npy('b.npy', bool_mask)}"], {"attn_mask": bool_mask}),
        ("custom float", [f"custom:{npy('f.npy', float_mask)}"], {"attn_mask": float_mask}),
        ("custom float + padding", [f"custom:{npy('f2.npy', float_mask)}", "padding"], {"attn_mask": float_mask, "kpm": kpm}),
        ("custom per-head bool", [f"custom:{npy('h.npy', head_mask)}"], {"attn_mask": head_mask}),
        ("window:5", [f"window:{W}"], {"attn_mask": window}),
        ("window:5 + causal", [f"window:{W}", "causal"], {"attn_mask": window | (causal == float('-inf'))}),
        ("fully blocked row", [f"custom:{npy('d.npy', dead)}"], {"attn_mask": dead}),
    ]
    for name, flags, kw in cases:
        ours_p, ours_h, _ = run_cli(folder, ids.tolist(), flags)
        (p32, h32, _), (theirs_p, theirs_h, _) = (torch_forward(ids, kw.get("attn_mask"), kw.get("kpm"), dt)
                                                  for dt in DTYPES)
        p_floor, h_floor = floors(L, max(E, F, T), theirs_h)
        if name == "fully blocked row":
            # PyTorch's NaN row propagates into every later layer; layer 0 is where the blocked
            # row itself shows: NaN there, exact zeros in attnlab, every other row equal.
            compare(f"TransformerEncoder layout, {name}: layer 0 probabilities", ours_p[0], theirs_p[0], p32[0],
                    p_floor)
            if not np.isnan(theirs_p[0][:, 4]).all() or not (ours_p[0][:, 4] == 0).all():
                failures.append("fully blocked row: expected NaN in PyTorch and zeros in attnlab for query 4")
            continue
        compare(f"TransformerEncoder layout, {name}: probabilities", ours_p, theirs_p, p32, p_floor)
        compare(f"TransformerEncoder layout, {name}: hidden states", ours_h, theirs_h, h32, h_floor)

    # Named activations (hooks) of article 003's layer, written out step by step in PyTorch with the
    # post-norm names attnlab gives them (TransformerLens's BertBlock / BertEmbed): every name of
    # `forward --cache '*'`, the same set, each within its own float32 bound.
    def torch_hooks(dtype):
        emb_, layers_ = mods[dtype]
        D = E // H
        acts = {}
        with torch.no_grad():
            acts["embed.hook_embed"] = emb_(ids)
            acts["embed.hook_pos_embed"] = sinusoidal(T, E).to(dtype)
            x = acts["embed.hook_embed"] + acts["embed.hook_pos_embed"]
            for l, layer in enumerate(layers_):
                b = f"blocks.{l}."
                at = layer.self_attn
                acts[b + "hook_resid_pre"] = x
                q, k, v = (x @ w.T + bias for w, bias in zip(at.in_proj_weight.chunk(3), at.in_proj_bias.chunk(3)))
                for n, t in (("q", q), ("k", k), ("v", v)):
                    acts[b + "attn.hook_" + n] = t.reshape(T, H, D)
                scores = torch.einsum("thd,shd->hts", q.reshape(T, H, D), k.reshape(T, H, D)) / math.sqrt(D)
                acts[b + "attn.hook_attn_scores"] = scores
                a, w = at(x[None], x[None], x[None], need_weights=True, average_attn_weights=False)
                acts[b + "attn.hook_pattern"] = w[0]
                acts[b + "attn.hook_z"] = torch.einsum("hts,shd->thd", w[0], v.reshape(T, H, D))
                acts[b + "hook_attn_out"] = a[0]
                acts[b + "hook_resid_mid"] = x + a[0]
                x = layer.norm1(x + a[0])
                acts[b + "ln1.hook_normalized"] = x
                acts[b + "mlp.hook_pre"] = layer.linear1(x)
                acts[b + "mlp.hook_post"] = torch.relu(acts[b + "mlp.hook_pre"])
                acts[b + "hook_mlp_out"] = layer.linear2(acts[b + "mlp.hook_post"])
                acts[b + "hook_resid_post"] = x + acts[b + "hook_mlp_out"]
                x = layer.norm2(acts[b + "hook_resid_post"])
                acts[b + "hook_normalized_resid_post"] = x
        return {k: t.numpy() for k, t in acts.items()}

    with tempfile.TemporaryDirectory() as hd:
        out = os.path.join(hd, "cache.npz")
        r = subprocess.run([CLI, "forward", "--model", folder, "--ids", ",".join(map(str, ids.tolist())), "--cache",
                            "*", "--cache-out", out], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"forward --cache failed: {r.stderr}")
        z = np.load(out)
        got = {k: z[k] for k in z.files}
    h32, h64 = torch_hooks(torch.float32), torch_hooks(torch.float64)
    if set(got) != set(h64):
        failures.append(f"named activations differ: attnlab only {sorted(set(got) - set(h64))}, "
                        f"PyTorch only {sorted(set(h64) - set(got))}")
    else:
        for k in sorted(h64, key=lambda n: (len(n.split(".")), n)):
            compare(f"TransformerEncoder layout, hooks: {k}", got[k], h64[k], h32[k],
                    stack_floor(L, max(E, F, T), float(np.abs(h64[k]).max())))

    # Cross-attention (article 003, section 5.2: 5 queries x 7 keys): at each layer, A's input to
    # the layer attends to B's input to the layer.
    a_ids = torch.randint(3, V, (5,), generator=g)
    b_ids = torch.randint(3, V, (7,), generator=g)
    ours_p, _, _ = run_cli(folder, a_ids.tolist(), [], cross_ids=b_ids.tolist())
    theirs = {}
    for dt in DTYPES:
        _, _, in_a = torch_forward(a_ids, dtype=dt)
        _, _, in_b = torch_forward(b_ids, dtype=dt)
        with torch.no_grad():
            theirs[dt] = torch.stack([layer.self_attn(xa, xb, xb, need_weights=True, average_attn_weights=False)[1][0]
                                      for layer, xa, xb in zip(mods[dt][1], in_a, in_b)]).numpy()
    compare("cross-attention 5 x 7: probabilities", ours_p, theirs[torch.float64], theirs[torch.float32],
            stack_floor(L, max(E, F, 7)))


class ArticleMHA(nn.Module):
    """Article 000's MultiHeadAttention (query/key/value/fc_out, post-LN residual)."""

    def __init__(self, E, H):
        super().__init__()
        self.E, self.H, self.D = E, H, E // H
        self.query, self.key, self.value, self.fc_out = (nn.Linear(E, E) for _ in range(4))
        self.layer_norm = nn.LayerNorm(E)

    def split(self, x):
        return x.view(x.size(0), -1, self.H, self.D).transpose(1, 2)

    def forward(self, x, blocked=None):
        B, T, _ = x.size()
        Q, K, V = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(self.D)
        if blocked is not None:
            scores = scores.masked_fill(blocked, float("-inf"))
        att = torch.softmax(scores, dim=-1)
        out = torch.matmul(att, V).transpose(1, 2).contiguous().view(B, T, self.E)
        return self.layer_norm(self.fc_out(out) + x), att[0]


class ArticleFFN(nn.Module):
    def __init__(self, E, F, act):
        super().__init__()
        self.fc1, self.fc2, self.layer_norm, self.act = nn.Linear(E, F), nn.Linear(F, E), nn.LayerNorm(E), act

    def forward(self, x):
        return self.layer_norm(self.fc2(self.act(self.fc1(x))) + x)


def article_case():
    torch.manual_seed(3)
    V, E, H, F, L, T, C, MAXLEN = 40, 32, 8, 48, 2, 9, 3, 16
    emb = nn.Embedding(V, E)
    pos = nn.Embedding(MAXLEN, E)  # learned positions: pos_embedding.weight
    attn = nn.ModuleList([ArticleMHA(E, H) for _ in range(L)])
    ffn = nn.ModuleList([ArticleFFN(E, F, nn.GELU()) for _ in range(L)])
    fc = nn.Linear(E, C)
    tensors = {"embedding.weight": emb.weight, "pos_embedding.weight": pos.weight, "fc.weight": fc.weight, "fc.bias": fc.bias}
    for i in range(L):
        for n, p in attn[i].named_parameters():
            tensors[f"layers.{i}.attention.{n}"] = p
        for n, p in ffn[i].named_parameters():
            tensors[f"layers.{i}.ffn.{n}"] = p
    cfg = {"vocab_size": V, "embed_size": E, "num_heads": H, "num_layers": L, "ff_dim": F, "max_len": MAXLEN,
           "num_classes": C, "positional": "learned", "activation": "gelu", "pooling": "mean", "labels": ["x", "y", "z"]}
    folder = tempfile.mkdtemp(prefix="attnlab_article_")
    atexit.register(shutil.rmtree, folder, True)
    write_model(folder, cfg, tensors, V)
    ids = torch.randint(3, V, (T,))
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    mods = copies(emb, pos, attn, ffn, fc)

    def torch_forward(blocked, dtype):
        emb_, pos_, attn_, ffn_, fc_ = mods[dtype]
        with torch.no_grad():
            x = (emb_(ids) + pos_(torch.arange(T)))[None]
            probs = []
            for a, f in zip(attn_, ffn_):
                x, p = a(x, blocked)
                x = f(x)
                probs.append(p)
            logits = fc_(x.mean(dim=1))[0]  # article 000's TextClassifier pooling
        return torch.stack(probs).numpy(), x[0].numpy(), logits.numpy()

    for name, flags, blocked in [("no mask", [], None), ("causal", ["causal"], causal)]:
        (p32, h32, l32), (p64, h64, l64) = (torch_forward(blocked, dt) for dt in DTYPES)
        p_floor, h_floor = floors(L, max(E, F, T), h64)
        ours_p, ours_h, _ = run_cli(folder, ids.tolist(), flags)
        compare(f"article layout (learned positions, GELU), {name}: probabilities", ours_p, p64, p32, p_floor)
        compare(f"article layout (learned positions, GELU), {name}: hidden states", ours_h, h64, h32, h_floor)
        r = subprocess.run([CLI, "forward", "--model", folder, "--ids", ",".join(map(str, ids.tolist())), "--json"]
                           + sum((["--mask", m] for m in flags), []), capture_output=True, text=True, check=True)
        # the logits: one more reduction of E terms over the pooled hidden states
        compare(f"article layout, {name}: logits", np.array(json.loads(r.stdout)["logits"]), l64, l32,
                stack_floor(L + 1, max(E, F, T), float(np.abs(h64).max())))


def prenorm_case():
    torch.manual_seed(4)
    V, E, H, F, L, T = 30, 48, 4, 64, 2, 10
    emb = nn.Embedding(V, E)
    layers = nn.ModuleList([nn.TransformerEncoderLayer(E, H, F, dropout=0.0, activation="gelu", batch_first=True,
                                                        norm_first=True) for _ in range(L)])
    layers.eval()
    tensors = {"embedding.weight": emb.weight}
    for i, layer in enumerate(layers):
        for n, p in layer.named_parameters():
            tensors[f"layers.{i}.{n}"] = p
    cfg = {"vocab_size": V, "embed_size": E, "num_heads": H, "num_layers": L, "ff_dim": F, "max_len": 32,
           "norm": "pre", "activation": "gelu"}
    folder = tempfile.mkdtemp(prefix="attnlab_prenorm_")
    atexit.register(shutil.rmtree, folder, True)
    write_model(folder, cfg, tensors, V)
    ids = torch.randint(3, V, (T,))
    mods = copies(emb, layers)

    def torch_forward(dtype):
        emb_, layers_ = mods[dtype]
        with torch.no_grad():
            x = emb_(ids)[None]
            probs = []
            for layer in layers_:
                _, w = layer.self_attn(layer.norm1(x), layer.norm1(x), layer.norm1(x), need_weights=True,
                                       average_attn_weights=False)
                probs.append(w[0])
                x = layer(x)
        return torch.stack(probs).numpy(), x[0].numpy()

    (p32, h32), (p64, h64) = (torch_forward(dt) for dt in DTYPES)
    p_floor, h_floor = floors(L, max(E, F, T), h64)
    ours_p, ours_h, _ = run_cli(folder, ids.tolist())
    compare("nn.TransformerEncoderLayer(norm_first=True, gelu): probabilities", ours_p, p64, p32, p_floor)
    compare("nn.TransformerEncoderLayer(norm_first=True, gelu): hidden states", ours_h, h64, h32, h_floor)


def bert_like_case():
    """Every part around the layer stack: token-type embedding, embedding LayerNorm, post-LN layers
    with tanh GELU and eps 1e-12, the pooler (dense + tanh on position 0) and a classifier."""
    torch.manual_seed(5)
    V, E, H, F, L, T, C, MAXLEN = 40, 32, 4, 48, 2, 9, 3, 16
    emb, pos, typ = nn.Embedding(V, E), nn.Embedding(MAXLEN, E), nn.Embedding(2, E)
    eln = nn.LayerNorm(E, eps=1e-12)
    # The activation as a plain function: torch 1.13 takes a GELU *module* for "gelu" and then runs
    # the exact form in its fast path, whatever its approximate= says.
    gelu_tanh = lambda v: torch.nn.functional.gelu(v, approximate="tanh")  # noqa: E731
    layers = nn.ModuleList([nn.TransformerEncoderLayer(E, H, F, dropout=0.0, activation=gelu_tanh, batch_first=True,
                                                        layer_norm_eps=1e-12) for _ in range(L)])
    pooler, fc = nn.Linear(E, E), nn.Linear(E, C)
    with torch.no_grad():  # LayerNorm gains and biases away from 1 and 0, so they matter
        for ln in [eln] + [m for l in layers for m in (l.norm1, l.norm2)]:
            ln.weight.add_(0.3 * torch.randn(E))
            ln.bias.add_(0.3 * torch.randn(E))
    layers.eval()
    tensors = {"embedding.weight": emb.weight, "pos_embedding.weight": pos.weight,
               "token_type_embedding.weight": typ.weight, "embedding_norm.weight": eln.weight,
               "embedding_norm.bias": eln.bias, "pooler.dense.weight": pooler.weight,
               "pooler.dense.bias": pooler.bias, "fc.weight": fc.weight, "fc.bias": fc.bias}
    for i, layer in enumerate(layers):
        for n, p in layer.named_parameters():
            tensors[f"layers.{i}.{n}"] = p
    cfg = {"vocab_size": V, "embed_size": E, "num_heads": H, "num_layers": L, "ff_dim": F, "max_len": MAXLEN,
           "num_classes": C, "positional": "learned", "activation": "gelu_tanh", "layer_norm_eps": 1e-12,
           "type_vocab_size": 2, "embedding_norm": True, "pooler": True, "pooling": "cls", "add_cls": False}
    folder = tempfile.mkdtemp(prefix="attnlab_bertlike_")
    atexit.register(shutil.rmtree, folder, True)
    write_model(folder, cfg, tensors, V)
    ids = torch.randint(3, V, (T,))
    mods = copies(emb, pos, typ, eln, layers, pooler, fc)

    def torch_forward(dtype):
        emb_, pos_, typ_, eln_, layers_, pooler_, fc_ = mods[dtype]
        with torch.no_grad():
            x = eln_(emb_(ids) + pos_(torch.arange(T)) + typ_(torch.zeros(T, dtype=torch.long)))[None]
            probs = []
            for layer in layers_:
                _, w = layer.self_attn(x, x, x, need_weights=True, average_attn_weights=False)
                probs.append(w[0])
                x = layer(x)
            logits = fc_(torch.tanh(pooler_(x[0, 0])))
        return torch.stack(probs).numpy(), x[0].numpy(), logits.numpy()

    (p32, h32, l32), (p64, h64, l64) = (torch_forward(dt) for dt in DTYPES)
    p_floor, h_floor = floors(L, max(E, F, T), h64)
    name = "BERT-like (token types, embedding LayerNorm, gelu_tanh, eps 1e-12, pooler)"
    ours_p, ours_h, _ = run_cli(folder, ids.tolist())
    compare(f"{name}: probabilities", ours_p, p64, p32, p_floor)
    compare(f"{name}: hidden states", ours_h, h64, h32, h_floor)
    for backend in ["cpu", "reference", "opencl"]:
        r = subprocess.run([CLI, "forward", "--model", folder, "--ids", ",".join(map(str, ids.tolist())), "--json",
                            "--backend", backend], capture_output=True, text=True, check=True)
        # the pooler and the classifier: two more reductions of E terms
        compare(f"{name}: logits ({backend})", np.array(json.loads(r.stdout)["logits"]), l64, l32,
                stack_floor(L + 2, max(E, F, T), float(np.abs(h64).max())))


def final_norm_case():
    """A pre-norm nn.TransformerEncoder with its final LayerNorm (norm=...), in its own names."""
    torch.manual_seed(6)
    V, E, H, F, L, T = 30, 48, 4, 64, 3, 11
    emb = nn.Embedding(V, E)
    layer = nn.TransformerEncoderLayer(E, H, F, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
    enc = nn.TransformerEncoder(layer, L, norm=nn.LayerNorm(E), enable_nested_tensor=False)
    with torch.no_grad():
        enc.norm.weight.add_(0.3 * torch.randn(E))
        enc.norm.bias.add_(0.3 * torch.randn(E))
    enc.eval()
    tensors = {"embedding.weight": emb.weight}
    for n, p in enc.named_parameters():
        tensors[n] = p
    cfg = {"vocab_size": V, "embed_size": E, "num_heads": H, "num_layers": L, "ff_dim": F, "max_len": 32,
           "norm": "pre", "activation": "gelu", "final_norm": True}
    folder = tempfile.mkdtemp(prefix="attnlab_finalnorm_")
    atexit.register(shutil.rmtree, folder, True)
    write_model(folder, cfg, tensors, V)
    ids = torch.randint(3, V, (T,))
    mods = copies(emb, enc)

    def torch_forward(dtype):
        emb_, enc_ = mods[dtype]
        with torch.no_grad():
            x = emb_(ids)[None]
            probs = []
            for lyr in enc_.layers:
                n1 = lyr.norm1(x)
                probs.append(lyr.self_attn(n1, n1, n1, need_weights=True, average_attn_weights=False)[1][0])
                x = lyr(x)
            hidden = enc_(emb_(ids)[None])[0]
        return torch.stack(probs).numpy(), hidden.numpy()

    (p32, h32), (p64, h64) = (torch_forward(dt) for dt in DTYPES)
    p_floor, h_floor = floors(L, max(E, F, T), h64)
    ours_p, ours_h, _ = run_cli(folder, ids.tolist())
    compare("nn.TransformerEncoder(norm_first, norm=LayerNorm): probabilities", ours_p, p64, p32, p_floor)
    compare("nn.TransformerEncoder(norm_first, norm=LayerNorm): hidden states", ours_h, h64, h32, h_floor)


torch_encoder_case()
article_case()
prenorm_case()
bert_like_case()
final_norm_case()
if failures:
    print("\n".join(["FAILED:"] + failures))
    sys.exit(1)
print("all PyTorch cross-checks passed")

#!/usr/bin/python3
"""Cross-check `attnlab-cli analyze` and `forward --ablate` against PyTorch on the same weights.

Random classifiers in the seed articles' layout (query/key/value/fc_out, post-LN and pre-LN,
GELU feed-forward, mean pooling), written as attnlab model folders; the methods written out in
PyTorch from their papers' formulas:
- rollout (Abnar & Zuidema 2020): A~ = rownorm(0.5 mean_h A + 0.5 I), R = A~_L ... A~_1;
- value-norm (Kobayashi et al. 2020): a_ij || (x_j W_V^h + b_V^h) W_O^h ||;
- head importance (Michel et al. 2019): p_t(full) - p_t(head ablated), the head's probabilities
  times 0 before they weight the values; and forward --ablate's logits, every head of a layer
  ablated included (only the residual path and fc_out's bias are left);
with no mask, causal, and padding masks. Rollout rows must sum to 1.
Usage: analysis_crosscheck.py PATH/TO/attnlab-cli
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

from pyutil import save_safetensors

torch.set_num_threads(2)
CLI = sys.argv[1]
failures = []


def check(name, got, want, tol):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        failures.append(f"{name}: shape {got.shape} vs {want.shape}")
        print("FAIL", failures[-1])
        return
    d = float(np.abs(got - want).max()) if got.size else 0.0
    print(f"{name}: max |diff| {d:.2e}")
    if not d <= tol:
        failures.append(f"{name}: differs by {d:.3e} > {tol}")
        print("FAIL", failures[-1])


class Layer(nn.Module):
    """The articles' layer: MultiHeadAttention (query/key/value/fc_out) + FeedForward, post or pre LN."""

    def __init__(self, E, H, F, pre):
        super().__init__()
        self.E, self.H, self.D, self.pre = E, H, E // H, pre
        self.query, self.key, self.value, self.fc_out = (nn.Linear(E, E) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(E), nn.LayerNorm(E)
        self.fc1, self.fc2 = nn.Linear(E, F), nn.Linear(F, E)

    def forward(self, x, blocked, ablate=()):
        T = x.size(0)
        a_in = self.ln1(x) if self.pre else x
        split = lambda t: t.view(T, self.H, self.D).transpose(0, 1)  # (H, T, D)
        Q, K, V = split(self.query(a_in)), split(self.key(a_in)), split(self.value(a_in))
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.D)
        if blocked is not None:
            scores = scores.masked_fill(blocked, float("-inf"))
        att = torch.softmax(scores, dim=-1)
        mask = torch.ones(self.H, 1, 1)
        for h in ablate:
            mask[h] = 0.0  # Michel et al.'s head mask: the head's probabilities times 0
        ctx = ((att * mask) @ V).transpose(0, 1).reshape(T, self.E)
        o = self.fc_out(ctx)
        if self.pre:
            x = x + o
            x = x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))
        else:
            x = self.ln1(x + o)
            x = self.ln2(x + self.fc2(nn.functional.gelu(self.fc1(x))))
        return x, att, self.value(a_in)


def make_case(pre, seed):
    torch.manual_seed(seed)
    Vocab, E, H, F, L, C, MAXLEN = 30, 32, 4, 48, 3, 3, 32
    emb, pos = nn.Embedding(Vocab, E), nn.Embedding(MAXLEN, E)
    layers = nn.ModuleList([Layer(E, H, F, pre) for _ in range(L)])
    fc = nn.Linear(E, C)
    with torch.no_grad():  # larger weights: heads that matter (pre-LN's residual stream saturates sooner)
        for p in list(layers.parameters()) + list(fc.parameters()):
            p.mul_(1.2 if pre else 3.0)
    t = {"embedding.weight": emb.weight, "pos_embedding.weight": pos.weight, "fc.weight": fc.weight, "fc.bias": fc.bias}
    names = {"query": "attention.query", "key": "attention.key", "value": "attention.value",
             "fc_out": "attention.fc_out", "ln1": "attention.layer_norm", "ln2": "ffn.layer_norm",
             "fc1": "ffn.fc1", "fc2": "ffn.fc2"}
    for i, layer in enumerate(layers):
        for n, p in layer.named_parameters():
            mod, what = n.split(".")
            t[f"layers.{i}.{names[mod]}.{what}"] = p
    cfg = {"vocab_size": Vocab, "embed_size": E, "num_heads": H, "num_layers": L, "ff_dim": F, "max_len": MAXLEN,
           "num_classes": C, "positional": "learned", "activation": "gelu", "pooling": "mean",
           "norm": "pre" if pre else "post", "labels": ["a", "b", "c"]}
    folder = tempfile.mkdtemp(prefix="attnlab_analysis_")
    atexit.register(shutil.rmtree, folder, True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    with open(os.path.join(folder, "vocab.txt"), "w") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]"] + [f"w{i}" for i in range(Vocab - 3)]) + "\n")
    save_safetensors(os.path.join(folder, "model.safetensors"), t)

    def run_grad(ids, blocked, target, dtype=torch.float32):
        """Every layer's attention and d logit[target] / d attention, by autograd."""
        e, p, ls, head = (copy.deepcopy(m).to(dtype) for m in (emb, pos, layers, fc))
        x = e(ids) + p(torch.arange(len(ids)))
        atts = []
        for layer in ls:
            x, att, _ = layer(x, blocked)
            atts.append(att)
        logits = head(x.mean(dim=0))
        target = int(logits.argmax()) if target is None else target
        grads = torch.autograd.grad(logits[target], atts)
        return [a.detach() for a in atts], [g.detach() for g in grads], target

    def run(ids, blocked, ablate=None):
        with torch.no_grad():
            x = emb(ids) + pos(torch.arange(len(ids)))
            atts, values = [], []
            for l, layer in enumerate(layers):
                x, att, v = layer(x, blocked, [h for (ll, h) in (ablate or []) if ll == l])
                atts.append(att)
                values.append(v)
            logits = fc(x.mean(dim=0))
        return atts, values, logits

    return folder, layers, run, run_grad, H


def cli(*args):
    return subprocess.run([CLI, *args], capture_output=True, text=True, check=True)


def analyze(folder, ids, masks, method, extra=()):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.npy")
        cli("analyze", "--model", folder, "--ids", ",".join(map(str, ids)), "--method", method, "--out", out,
            *sum((["--mask", m] for m in masks), []), *extra)
        return np.load(out)


def main():
    T = 9
    for pre in (False, True):
        folder, layers, run, run_grad, H = make_case(pre, 5 + pre)
        ids = torch.randint(3, 30, (T,))
        ids_pad = ids.clone()
        ids_pad[-2:] = 0  # [PAD] tokens for the padding mask
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        cases = [("no mask", ids, [], None), ("causal", ids, ["causal"], causal),
                 ("padding", ids_pad, ["padding"], (ids_pad == 0)[None, :].expand(T, T))]
        for name, x_ids, masks, blocked in cases:
            tag = f"{'pre' if pre else 'post'}-LN, {name}"
            atts, values, logits = run(x_ids, blocked)
            probs = torch.softmax(logits.double(), -1).numpy()
            # rollout
            R = np.eye(T)
            for a in atts:
                A = 0.5 * a.mean(0).double().numpy() + 0.5 * np.eye(T)
                A /= A.sum(-1, keepdims=True)
                R = A @ R
            got = analyze(folder, x_ids.tolist(), masks, "rollout")
            check(f"{tag}: rollout", got, R, 1e-5)
            check(f"{tag}: rollout rows sum to 1", got.sum(-1), np.ones(T), 1e-5)
            # aggregates
            stacked = torch.stack(atts).double().numpy()  # [L, H, T, T]
            check(f"{tag}: mean-heads", analyze(folder, x_ids.tolist(), masks, "mean-heads"), stacked.mean(1), 1e-5)
            check(f"{tag}: mean-layers", analyze(folder, x_ids.tolist(), masks, "mean-layers"), stacked.mean((0, 1)), 1e-5)
            # grad-attention (Chefer et al. 2021), the predicted class and class 1, by autograd
            # float64 autograd is the oracle; float32 autograd's own distance from it sets the bound
            # (post-LN with large weights saturates: both float32 results drift by ~1e-4)
            def relevance(atts_, grads_):
                R = np.eye(T)
                for a, g in zip(atts_, grads_):
                    R = R + np.clip((g * a).double().numpy(), 0, None).mean(0) @ R
                return R
            for target in (None, 1):
                g_atts, g_grads, used = run_grad(x_ids, blocked, target, torch.float64)
                R = relevance(g_atts, g_grads)
                R32 = relevance(*run_grad(x_ids, blocked, used)[:2])
                torch_err = float(np.abs(R32 - R).max())
                extra = [] if target is None else ["--target", str(target)]
                got = analyze(folder, x_ids.tolist(), masks, "grad-attention", extra)
                print(f"{tag}: grad-attention: float32 PyTorch differs from float64 by {torch_err:.2e}")
                check(f"{tag}: grad-attention, class {used}", got, R,
                      max(1e-5 * max(1.0, float(np.abs(R).max())), 4 * torch_err))
                if float(np.abs(R - np.eye(T)).max()) < 1e-4:
                    failures.append(f"{tag}: grad-attention is the identity: the check would prove nothing")
            # value-norm
            vn = []
            for layer, a, v in zip(layers, atts, values):
                D = layer.D
                per_head = []
                for h in range(H):
                    f = v[:, h * D:(h + 1) * D] @ layer.fc_out.weight[:, h * D:(h + 1) * D].T  # (T, E)
                    per_head.append(a[h] * f.norm(dim=-1)[None, :])
                vn.append(torch.stack(per_head))
            vn = torch.stack(vn).detach().numpy()
            got = analyze(folder, x_ids.tolist(), masks, "value-norm")
            check(f"{tag}: value-norm", got, vn, 1e-4 * max(1.0, float(np.abs(vn).max())))
            # head importance, target = predicted, then class 2
            for target in (int(probs.argmax()), 2):
                imp = np.zeros((len(layers), H))
                for l in range(len(layers)):
                    for h in range(H):
                        _, _, lg = run(x_ids, blocked, [(l, h)])
                        imp[l, h] = probs[target] - torch.softmax(lg.double(), -1)[target].item()
                got = analyze(folder, x_ids.tolist(), masks, "head-importance", ["--target", str(target)])
                check(f"{tag}: head importance, class {target}", got, imp, 1e-5)
                if target == 2 and float(np.abs(imp).max()) < 1e-4:
                    failures.append(f"{tag}: every head unimportant: the check would prove nothing")
            # forward --ablate: two heads, then every head of layer 1 (only the residual path and fc_out's bias)
            for ablate in ([(0, 1), (2, 3)], [(1, h) for h in range(H)]):
                _, _, lg = run(x_ids, blocked, ablate)
                r = cli("forward", "--model", folder, "--ids", ",".join(map(str, x_ids.tolist())), "--json",
                        "--ablate", ",".join(f"{l}:{h}" for l, h in ablate), *sum((["--mask", m] for m in masks), []))
                check(f"{tag}: forward --ablate {ablate[:2]}{'...' if len(ablate) > 2 else ''} logits",
                      json.loads(r.stdout)["logits"], lg.numpy(), 1e-4)
        # head patterns: the means written out from the probabilities
        atts, _, _ = run(ids, None)
        r = json.loads(cli("analyze", "--model", folder, "--ids", ",".join(map(str, ids.tolist())), "--method",
                           "head-patterns", "--json").stdout)
        for l, a in enumerate(atts):
            a = a.numpy().astype(np.float64)
            for h in range(H):
                got = r["head_patterns"][l][h]
                want = {"prev": np.mean([a[h, i, i - 1] for i in range(1, T)]) * (T - 1) / T,
                        "next": np.mean([a[h, i, i + 1] for i in range(T - 1)]) * (T - 1) / T,
                        "self": np.mean([a[h, i, i] for i in range(T)]), "first": a[h, :, 0].mean(),
                        "entropy": float(np.mean([-(row[row > 0] * np.log(row[row > 0])).sum() for row in a[h]]))}
                for k, v in want.items():
                    if abs(got[k] - v) > 1e-5:
                        failures.append(f"head patterns layer {l} head {h} {k}: {got[k]} vs {v}")
                        print("FAIL", failures[-1])
        print(f"{'pre' if pre else 'post'}-LN: head patterns of {len(atts)} x {H} heads checked")
    bad = subprocess.run([CLI, "analyze", "--ids", "3,4", "--method", "nope"], capture_output=True, text=True)
    if bad.returncode != 2 or "expected one of" not in bad.stderr:
        failures.append(f"unknown method: exit {bad.returncode}, {bad.stderr!r}")
    bad = subprocess.run([CLI, "forward", "--ids", "3,4", "--ablate", "9:0"], capture_output=True, text=True)
    if bad.returncode != 2 or "no head 9:0" not in bad.stderr:
        failures.append(f"--ablate 9:0: exit {bad.returncode}, {bad.stderr!r}")


if __name__ == "__main__":
    main()
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("all analysis cross-checks passed")

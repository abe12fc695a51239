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
with no mask, causal, and padding masks. Rollout rows must sum to 1. PyTorch runs each in
float64 (the oracle) and in float32; the bound is pyutil.oracle_bound: 8x float32 PyTorch's own
distance from the oracle, never below a first-principles floor.
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

from pyutil import oracle_bound, save_safetensors, stack_floor

torch.set_num_threads(2)
CLI = sys.argv[1]
failures = []


def check(name, got, want, tol, want32=None):
    """|got - want| <= tol; with want32 (the same computation in float32 PyTorch, want being the
    float64 oracle) the bound is oracle_bound(want32, want, floor = tol)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if want32 is not None:
        tol = oracle_bound(want32, want, tol)
    if got.shape != want.shape:
        failures.append(f"{name}: shape {got.shape} vs {want.shape}")
        print("FAIL", failures[-1])
        return
    d = float(np.abs(got - want).max()) if got.size else 0.0
    print(f"{name}: max |diff| {d:.2e} (bound {tol:.2e})")
    if not d <= tol:
        failures.append(f"{name}: differs by {d:.3e} > {tol:.3e}")
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

    copies = {torch.float32: (emb, pos, layers, fc)}

    def run(ids, blocked, ablate=None, dtype=torch.float32):
        """Every layer's attention and values and the logits, in float32 or float64 (the oracle)."""
        if dtype not in copies:
            copies[dtype] = tuple(copy.deepcopy(m).to(dtype) for m in (emb, pos, layers, fc))
        e, p, ls, head = copies[dtype]
        with torch.no_grad():
            x = e(ids) + p(torch.arange(len(ids)))
            atts, values = [], []
            for l, layer in enumerate(ls):
                x, att, v = layer(x, blocked, [h for (ll, h) in (ablate or []) if ll == l])
                atts.append(att)
                values.append(v)
            logits = head(x.mean(dim=0))
        return atts, values, logits, ls

    return folder, run, run_grad, H, (E, F, L)


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
        folder, run, run_grad, H, (E, F, L) = make_case(pre, 5 + pre)
        # The floors (pyutil.stack_floor): L blocks, the longest reduction F (the feed-forward), T
        # or E terms; maps made of probabilities have rows of magnitude <= 1.
        K = max(E, F, T)
        p_floor = stack_floor(L, K)
        ids = torch.randint(3, 30, (T,))
        ids_pad = ids.clone()
        ids_pad[-2:] = 0  # [PAD] tokens for the padding mask
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        cases = [("no mask", ids, [], None), ("causal", ids, ["causal"], causal),
                 ("padding", ids_pad, ["padding"], (ids_pad == 0)[None, :].expand(T, T))]
        for name, x_ids, masks, blocked in cases:
            tag = f"{'pre' if pre else 'post'}-LN, {name}"
            runs = {dt: run(x_ids, blocked, dtype=dt) for dt in (torch.float32, torch.float64)}
            atts, _, logits, _ = runs[torch.float64]
            probs = torch.softmax(logits.double(), -1).numpy()

            def both(f):
                """f of the float32 run and of the float64 run (the oracle)."""
                return f(*runs[torch.float32]), f(*runs[torch.float64])

            # rollout
            def rollout(atts_, *_):
                R = np.eye(T)
                for a in atts_:
                    A = 0.5 * a.mean(0).double().numpy() + 0.5 * np.eye(T)
                    A /= A.sum(-1, keepdims=True)
                    R = A @ R
                return R
            R32, R = both(rollout)
            got = analyze(folder, x_ids.tolist(), masks, "rollout")
            check(f"{tag}: rollout", got, R, p_floor, R32)
            # each layer's row normalisation sums T float32 terms of a row that sums to 1
            check(f"{tag}: rollout rows sum to 1", got.sum(-1), np.ones(T), stack_floor(L, T))
            # aggregates
            s32, s64 = both(lambda a, *_: torch.stack(a).double().numpy())  # [L, H, T, T]
            check(f"{tag}: mean-heads", analyze(folder, x_ids.tolist(), masks, "mean-heads"), s64.mean(1), p_floor,
                  s32.mean(1))
            check(f"{tag}: mean-layers", analyze(folder, x_ids.tolist(), masks, "mean-layers"), s64.mean((0, 1)),
                  p_floor, s32.mean((0, 1)))
            # grad-attention (Chefer et al. 2021), the predicted class and class 1, by autograd
            # float64 autograd is the oracle, float32 autograd's distance from it the measure (the
            # backward doubles the reductions: 2 L blocks)
            def relevance(atts_, grads_):
                R = np.eye(T)
                for a, g in zip(atts_, grads_):
                    R = R + np.clip((g * a).double().numpy(), 0, None).mean(0) @ R
                return R
            for target in (None, 1):
                g_atts, g_grads, used = run_grad(x_ids, blocked, target, torch.float64)
                R = relevance(g_atts, g_grads)
                R32 = relevance(*run_grad(x_ids, blocked, used)[:2])
                extra = [] if target is None else ["--target", str(target)]
                got = analyze(folder, x_ids.tolist(), masks, "grad-attention", extra)
                check(f"{tag}: grad-attention, class {used}", got, R, stack_floor(2 * L, K, float(np.abs(R).max())),
                      R32)
                # far above any rounding bound: a map this close to I would prove nothing
                if float(np.abs(R - np.eye(T)).max()) < 1e-4:
                    failures.append(f"{tag}: grad-attention is the identity: the check would prove nothing")

            # value-norm
            def value_norm(atts_, values_, _logits, layers_):
                vn = []
                for layer, a, v in zip(layers_, atts_, values_):
                    D = layer.D
                    per_head = []
                    for h in range(H):
                        f = v[:, h * D:(h + 1) * D] @ layer.fc_out.weight[:, h * D:(h + 1) * D].T  # (T, E)
                        per_head.append(a[h] * f.norm(dim=-1)[None, :])
                    vn.append(torch.stack(per_head))
                return torch.stack(vn).detach().double().numpy()
            vn32, vn = both(value_norm)
            got = analyze(folder, x_ids.tolist(), masks, "value-norm")
            check(f"{tag}: value-norm", got, vn, stack_floor(L, K, float(np.abs(vn).max())), vn32)
            # head importance, target = predicted, then class 2
            for target in (int(probs.argmax()), 2):
                imp = {}
                for dt in (torch.float32, torch.float64):
                    p_full = torch.softmax(runs[dt][2].double(), -1)[target].item()
                    imp[dt] = np.array([[p_full - torch.softmax(run(x_ids, blocked, [(l, h)], dt)[2].double(),
                                                                -1)[target].item() for h in range(H)]
                                        for l in range(L)])
                got = analyze(folder, x_ids.tolist(), masks, "head-importance", ["--target", str(target)])
                # a difference of two probabilities, each within the floor
                check(f"{tag}: head importance, class {target}", got, imp[torch.float64], 2 * p_floor,
                      imp[torch.float32])
                # far above any rounding bound: all-zero importances would prove nothing
                if target == 2 and float(np.abs(imp[torch.float64]).max()) < 1e-4:
                    failures.append(f"{tag}: every head unimportant: the check would prove nothing")
            # forward --ablate: two heads, then every head of layer 1 (only the residual path and fc_out's bias)
            for ablate in ([(0, 1), (2, 3)], [(1, h) for h in range(H)]):
                lg32, lg = (run(x_ids, blocked, ablate, dt)[2].double().numpy() for dt in (torch.float32, torch.float64))
                r = cli("forward", "--model", folder, "--ids", ",".join(map(str, x_ids.tolist())), "--json",
                        "--ablate", ",".join(f"{l}:{h}" for l, h in ablate), *sum((["--mask", m] for m in masks), []))
                check(f"{tag}: forward --ablate {ablate[:2]}{'...' if len(ablate) > 2 else ''} logits",
                      json.loads(r.stdout)["logits"], lg, stack_floor(L, K, float(np.abs(lg).max())), lg32)
        # head patterns: the means written out from the probabilities
        r = json.loads(cli("analyze", "--model", folder, "--ids", ",".join(map(str, ids.tolist())), "--method",
                           "head-patterns", "--json").stdout)

        def patterns(atts_):
            out = []
            for a in atts_:
                a = a.numpy().astype(np.float64)
                out.append([{"prev": np.mean([a[h, i, i - 1] for i in range(1, T)]) * (T - 1) / T,
                             "next": np.mean([a[h, i, i + 1] for i in range(T - 1)]) * (T - 1) / T,
                             "self": np.mean([a[h, i, i] for i in range(T)]), "first": a[h, :, 0].mean(),
                             "entropy": float(np.mean([-(row[row > 0] * np.log(row[row > 0])).sum() for row in a[h]]))}
                            for h in range(H)])
            return out
        want32, want = (patterns(run(ids, None, dtype=dt)[0]) for dt in (torch.float32, torch.float64))
        for l in range(L):
            for h in range(H):
                got = r["head_patterns"][l][h]
                for k, v in want[l][h].items():
                    # means of probabilities; the entropy sums T terms of size <= log T
                    bound = oracle_bound(want32[l][h][k], v, p_floor * (math.log(T) if k == "entropy" else 1.0))
                    if abs(got[k] - v) > bound:
                        failures.append(f"head patterns layer {l} head {h} {k}: {got[k]} vs {v} (bound {bound:.2e})")
                        print("FAIL", failures[-1])
        print(f"{'pre' if pre else 'post'}-LN: head patterns of {L} x {H} heads checked")
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

#!/usr/bin/env python3
"""Attention made elsewhere, opened by attnlab (engine/formats/attention_file.h): transformers'
outputs.attentions on MiniLM saved the ways people save them (np.savez of the stacked tensor with
tokens and the attention_mask, np.savez_compressed of the tuple, safetensors with the tokens in its
metadata, a TransformerLens-style cache in float16), read back by `attnlab-cli export --attention`
and `analyze --attention`:
  - the probabilities come back as written (exactly; float16 within half its unit in the last place),
    the batch chosen with --batch, the CSV re-export gives the numbers written;
  - a file of attnlab's own probabilities draws the same PNG and CSV, byte for byte, as
    `export --model` of the same text;
  - rollout and mean-heads equal numpy's from the same array;
  - bad files (NaN, negative values, too few tokens, an object array, no attention, a damaged
    archive) are refused with the engine's message and exit status 2; rows that do not sum to 1
    are a warning.
Usage: attention_files.py ATTNLAB_CLI MINILM_DIR (under the transformers venv's Python)."""
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.numpy import save_file
from transformers import AutoModel, AutoTokenizer

cli, model_dir = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="attnlab-attention-files-")
atexit.register(shutil.rmtree, tmp, True)  # the files it wrote go with it, passed or failed
failures = []


def run(*args, ok=True):
    p = subprocess.run([cli, *args], capture_output=True, text=True)
    if ok and p.returncode != 0:
        raise SystemExit(f"attnlab-cli {' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return p


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def path(name):
    return os.path.join(tmp, name)


tok = AutoTokenizer.from_pretrained(model_dir)
model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
enc = tok(["The cat sat on the mat.", "Hi there"], return_tensors="pt", padding=True)
with torch.no_grad():
    out = model(**enc, output_attentions=True)
att = torch.stack(out.attentions).numpy()  # [layers, batch, heads, T, T]
L, B, H, T, _ = att.shape
tokens = np.array([tok.convert_ids_to_tokens(row) for row in enc["input_ids"]])
mask = enc["attention_mask"].numpy()


def exported(f, *extra):
    """Every layer's probabilities as attnlab reads them from file f: [layers, heads, T, S]."""
    npy = path(os.path.basename(f) + ".npy")
    p = run("export", "--attention", f, "--layer", "all", "--out", npy, *extra)
    return np.load(npy), p.stderr


# 1. The ways transformers' output is saved: every one reads back as written.
np.savez(path("stacked.npz"), attentions=att, tokens=tokens, mask=mask)
np.savez_compressed(path("tuple.npz"), *[a.numpy() for a in out.attentions], tokens=tokens)
save_file({"attentions": np.ascontiguousarray(att[:, 0])}, path("one.safetensors"),
          metadata={"tokens": json.dumps(list(tokens[0]))})
save_file({f"blocks.{l}.attn.hook_pattern": a.numpy()[:1].astype(np.float16) for l, a in enumerate(out.attentions)},
          path("cache.safetensors"), metadata={"tokens": json.dumps([list(tokens[0])])})
for name in ["stacked.npz", "tuple.npz", "one.safetensors"]:
    got, err = exported(path(name))
    check(got.shape == (L, H, T, T) and np.array_equal(got, att[:, 0]), f"{name}: sequence 0 read back exactly")
    check(("2 sequences" in err) == name.endswith(".npz"), f"{name}: a batch of 2 is said ({err.strip()!r})")
got, _ = exported(path("cache.safetensors"))
# float16 keeps 11 significant bits: a probability p is off by at most p * 2^-11, and by half the
# subnormal step (2^-25) below 2^-14
check(np.all(np.abs(got - att[:, 0]) <= att[:, 0] * 2.0 ** -11 + 2.0 ** -25),
      "TransformerLens-style float16 cache: within half a float16 unit of the probabilities")
got, _ = exported(path("stacked.npz"), "--batch", "1")
check(np.array_equal(got, att[:, 1]), "--batch 1 reads the second sequence")
csv = path("b1.csv")
run("export", "--attention", path("stacked.npz"), "--batch", "1", "--layer", "3", "--head", "5", "--out", csv)
rows = [line.split(",") for line in open(csv, encoding="utf-8").read().splitlines()[1:]]
vals = np.array([float(r[6]) for r in rows]).reshape(T, T)
blocked = np.array([int(r[7]) for r in rows]).reshape(T, T)
check(np.allclose(vals, att[3, 1, 5], rtol=1e-7, atol=0), "CSV re-export gives back the numbers written")
check(np.array_equal(blocked[0], 1 - mask[1]) and [r[3] for r in rows[::T]] == list(tokens[1]),
      "CSV: the mask's padding keys are blocked, the tokens are the file's")
check(run("export", "--attention", path("stacked.npz"), "--batch", "2", "--out", path("x.png"), ok=False).returncode == 2,
      "--batch past the batch is an error")

# 2. attnlab's own probabilities, saved and opened again: the same figure and table, byte for byte.
text = "The cat sat on the mat."
run("export", "--model", model_dir, "--text", text, "--layer", "all", "--out", path("own.npy"))
own = np.load(path("own.npy"))
np.savez(path("own.npz"), attentions=own, tokens=tokens[0])
for ext, extra in [("png", ["--layer", "1"]), ("csv", ["--layer", "1", "--head", "2"]), ("svg", ["--layer", "4", "--head", "0"])]:
    a, b = path("model." + ext), path("file." + ext)
    run("export", "--model", model_dir, "--text", text, *extra, "--out", a)
    run("export", "--attention", path("own.npz"), *extra, "--out", b)
    check(open(a, "rb").read() == open(b, "rb").read(), f"export --attention draws the model's {ext} byte for byte")

# 3. Methods that need only the probabilities.
p0 = att[:, 0].astype(np.float64)
R = np.eye(T)
for l in range(L):
    A = 0.5 * p0[l].mean(0) + 0.5 * np.eye(T)
    A /= A.sum(1, keepdims=True)
    R = A @ R
j = json.loads(run("analyze", "--attention", path("one.safetensors"), "--method", "rollout", "--json").stdout)
# float32 products of row-stochastic matrices: each entry a sum of T terms <= 1, L times
check(np.abs(np.array(j["rollout"]) - R).max() < 8 * L * T * 2.0 ** -24, "rollout equals numpy's on the same array")
run("analyze", "--attention", path("one.safetensors"), "--method", "mean-heads", "--out", path("mh.npy"))
check(np.abs(np.load(path("mh.npy")) - p0.mean(1)).max() < H * 2.0 ** -24, "mean-heads equals numpy's")
j = json.loads(run("analyze", "--attention", path("one.safetensors"), "--method", "head-patterns", "--json").stdout)
check(len(j["head_patterns"]) == L and len(j["head_patterns"][0]) == H, "head-patterns: a row per layer and head")
p = run("analyze", "--attention", path("one.safetensors"), "--method", "value-norm", ok=False)
check(p.returncode == 2 and "needs a model" in p.stderr, "value-norm on a file: needs a model")

# 4. Bad files: a clear error (exit 2) or a warning, never a crash.
a0 = att[:, 0]
bad = {
    "nan": (lambda: np.savez(path("nan.npz"), attentions=np.where(np.arange(T) == 3, np.nan, a0), tokens=tokens[0]), "NaN"),
    "negative": (lambda: np.savez(path("negative.npz"), attentions=a0 - 0.5, tokens=tokens[0]), "never negative"),
    "few tokens": (lambda: np.savez(path("few tokens.npz"), attentions=a0, tokens=tokens[0][:4]), "4 tokens for 9"),
    "object": (lambda: np.savez(path("object.npz"), attentions=a0, tokens=np.array(list(tokens[0]), dtype=object)),
               "pickle"),
    "ids": (lambda: np.savez(path("ids.npz"), attentions=a0, tokens=np.arange(T)), "holds numbers"),
    "none": (lambda: np.savez(path("none.npz"), weights=a0), "no attention found"),
    "cross": (lambda: np.savez(path("cross.npz"), attentions=a0[:, :, :4], tokens=tokens[0][:4]), "tokens_b"),
}
for name, (make, message) in bad.items():
    make()
    p = run("export", "--attention", path(name + ".npz"), "--out", path("bad.png"), ok=False)
    check(p.returncode == 2 and message in p.stderr and not os.path.exists(path("bad.png")),
          f"{name}: refused ({p.stderr.strip()[:110]!r})")
damaged = bytearray(open(path("tuple.npz"), "rb").read())
damaged[len(damaged) // 2] ^= 0xFF
open(path("damaged.npz"), "wb").write(bytes(damaged))
p = run("export", "--attention", path("damaged.npz"), "--out", path("bad.png"), ok=False)
check(p.returncode == 2 and "damaged" in p.stderr, f"a damaged archive: refused ({p.stderr.strip()[:100]!r})")
np.savez(path("scaled.npz"), attentions=a0 * 1.5, tokens=tokens[0])
p = run("export", "--attention", path("scaled.npz"), "--out", path("scaled.png"), ok=False)
check(p.returncode == 0 and "do not sum to 1" in p.stderr, "rows that do not sum to 1: drawn, with a warning")

if failures:
    sys.exit(f"{len(failures)} failed: {failures}")
print("all attention-file checks passed")

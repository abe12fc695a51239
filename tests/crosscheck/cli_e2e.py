#!/usr/bin/python3
"""End-to-end checks of the attnlab-cli forward contract, driven with real files.

Good paths: --attn-out [layers, heads, T, S] float32, --out [T, embed], --json fields, --pad-to,
cross mode, --save-model then --model on the saved folder, reference == cpu through the CLI.
Bad input: every case exits non-zero with a one-line message naming what and where.
Usage: cli_e2e.py PATH/TO/attnlab-cli
"""
import atexit
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

from pyutil import U32, stack_floor

CLI = sys.argv[1]
failures = []
tmp = tempfile.mkdtemp(prefix="attnlab_cli_")
atexit.register(shutil.rmtree, tmp, True)
RANDOM = ["--random-init", "--seed", "3", "--dim", "32", "--heads", "4", "--layers", "3", "--ff", "40",
          "--max-len", "64", "--classes", "2"]


def run(*args, env=None):
    return subprocess.run([CLI, *args], capture_output=True, text=True,
                          env=None if env is None else {**os.environ, **env})


def check(name, cond, detail=""):
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else f": {detail}"))
    if not cond:
        failures.append(name)


def write(name, data, mode="w"):
    p = os.path.join(tmp, name)
    with open(p, mode) as f:
        f.write(data)
    return p


# --- version ----------------------------------------------------------------------------------
r = run("--version")
check("--version prints the version and exits 0",
      r.returncode == 0 and r.stdout.startswith("attnlab-cli ") and " (Eigen " in r.stdout
      and len(r.stdout.split()[1].split(".")) == 3, r.stdout + r.stderr)

# --- good paths -------------------------------------------------------------------------------
a, h = os.path.join(tmp, "a.npy"), os.path.join(tmp, "h.npy")
r = run("forward", *RANDOM, "--text", "hello there", "--attn-out", a, "--out", h, "--json")
check("forward --text exits 0", r.returncode == 0, r.stderr)
j = json.loads(r.stdout)
T = len(j["ids"])
check("json has tokens/ids/logits/probabilities/predicted_label/warnings",
      all(k in j for k in ["tokens", "ids", "logits", "probabilities", "predicted_label", "warnings"]), str(j.keys()))
check("tokens and ids have the same length", len(j["tokens"]) == T == 11, str(j["tokens"]))
# A float32 softmax row of n entries sums to 1 within (2n + 2) U32: the row sum's rounding
# (gamma_n), the divisions (U32 each) and storing each probability as float32 (U32 each).
def row_sum_bound(n):
    return (2 * n + 2) * U32


# The random model's floors (pyutil.stack_floor): 3 layers, longest reduction max(32, 40, T).
def random_model_bound(T):
    return stack_floor(3, max(32, 40, T))


check("class probabilities sum to 1", abs(sum(j["probabilities"]) - 1) <= row_sum_bound(len(j["probabilities"])),
      str(j["probabilities"]))
A = np.load(a)
check("--attn-out is float32 [layers, heads, T, S]", A.dtype == np.float32 and A.shape == (3, 4, T, T), str(A.shape))
check("--attn-out rows sum to 1", np.abs(A.sum(-1) - 1).max() <= row_sum_bound(T))
H = np.load(h)
check("--out is [T, embed]", H.shape == (T, 32), str(H.shape))

r = run("forward", *RANDOM, "--ids", "5,17,2", "--pad-to", "6", "--mask", "padding", "--mask", "causal", "--attn-out", a, "--json")
A = np.load(a)
check("--pad-to pads with [PAD]", json.loads(r.stdout)["tokens"][3:] == ["[PAD]"] * 3, r.stdout)
check("padding + causal blocks pad keys and the future", (A[:, :, :, 3:] == 0).all() and (np.triu(A[0, 0], 1) == 0).all())

r = run("forward", *RANDOM, "--text", "abcde", "--cross-text", "xyzuvw!", "--attn-out", a)
A = np.load(a)
check("cross mode writes [layers, heads, T_a, T_b]", r.returncode == 0 and A.shape == (3, 4, 5, 7), f"{A.shape} {r.stderr}")

mask = np.zeros((5, 5), dtype=bool)
mask[2, :] = True
np.save(os.path.join(tmp, "m.npy"), mask)
r = run("forward", *RANDOM, "--text", "abcde", "--mask", "custom:" + os.path.join(tmp, "m.npy"), "--attn-out", a, "--json")
A = np.load(a)
check("fully blocked row: zeros, no NaN, a warning", (A[:, :, 2, :] == 0).all() and np.isfinite(A).all()
      and any("every key blocked" in w for w in json.loads(r.stdout)["warnings"]), r.stdout + r.stderr)

model = os.path.join(tmp, "model")
r1 = run("forward", *RANDOM, "--text", "round trip", "--save-model", model, "--attn-out", a)
r2 = run("forward", "--model", model, "--text", "round trip", "--attn-out", h)
check("--save-model writes a folder that --model opens with identical results",
      r1.returncode == 0 and r2.returncode == 0 and np.array_equal(np.load(a), np.load(h)), r1.stderr + r2.stderr)
r3 = run("forward", "--model", model, "--text", "round trip", "--backend", "reference", "--attn-out", h)
check("--backend reference agrees with cpu", r3.returncode == 0
      and np.abs(np.load(a) - np.load(h)).max() <= random_model_bound(np.load(a).shape[-1]))

r = run("bench", "--layers", "1", "--dim", "32", "--heads", "4", "--ff", "32", "--seq", "16", "--repeat", "3", "--json")
b = json.loads(r.stdout) if r.returncode == 0 else {}
check("bench --json reports median_ms and gflops", b.get("median_ms", 0) > 0 and b.get("gflops", 0) > 0, r.stdout + r.stderr)
# a language model's training step: the decoder train --objective lm makes (GPT-2 style: learned
# positions, LayerNorm with biases, tied head), at the flags' shape
V, E, L, F, T = 50, 16, 2, 24, 12
r = run("bench", "--train", "--objective", "lm", "--arch", "gpt2", "--vocab-size", str(V), "--dim", str(E), "--heads", "2",
        "--layers", str(L), "--ff", str(F), "--seq", str(T), "--batch", "3", "--repeat", "2", "--json")
b = json.loads(r.stdout) if r.returncode == 0 else {}
per_layer = 2 * E + 3 * E * E + 3 * E + E * E + E + 2 * E + E * F + F + F * E + E
check("bench --train --objective lm times a GPT-2-style decoder of the flags' shape",
      b.get("objective") == "lm" and b.get("arch") == "gpt2" and b.get("median_ms", 0) > 0 and b.get("seq") == T
      and b.get("batch") == 3 and b.get("params") == V * E + T * E + L * per_layer + 2 * E, r.stdout + r.stderr)
r = run("bench", "--train", "--objective", "lm", "--arch", "llama", "--ff", "0", "--dim", "16", "--heads", "4",
        "--kv-heads", "2", "--layers", "1", "--seq", "8", "--batch", "2", "--repeat", "2", "--json")
b = json.loads(r.stdout) if r.returncode == 0 else {}
check("bench --train --objective lm --arch llama --ff 0 times an attention-only Llama-style decoder",
      b.get("arch") == "llama" and b.get("ff") == 0 and b.get("median_ms", 0) > 0, r.stdout + r.stderr)
for args, what in [(["--objective", "lm"], "is for bench --train"),
                   (["--train", "--objective", "lm", "--classes", "3"], "does not apply to --objective lm"),
                   (["--train", "--objective", "mlm"], "--objective must be classify or lm"),
                   (["--train", "--objective", "lm", "--arch", "bert"], "unknown architecture")]:
    r = run("bench", *args, "--repeat", "1")
    check(f"bench {' '.join(args)} is refused", r.returncode != 0 and what in r.stderr and r.stderr.count("\n") <= 1,
          r.stdout + r.stderr)

# --- a kill in the middle of saving a model never destroys the previous one -----------------------
import signal
import time
saved = os.path.join(tmp, "saved")
run("forward", *RANDOM, "--ids", "3,4,5", "--save-model", saved, "--attn-out", a)
before = np.load(a)
proc = subprocess.Popen([CLI, "forward", *RANDOM[:2], "7", *RANDOM[3:], "--dim", "64", "--ids", "3,4,5", "--save-model", saved],
                        env={**os.environ, "ATTNLAB_TEST_SAVE_PAUSE_MS": "3000"}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(1.0)  # the new weights are written into the temporary folder; config and vocab are not yet
proc.send_signal(signal.SIGKILL)
proc.wait()
r = run("forward", "--model", saved, "--ids", "3,4,5", "--attn-out", h)
check("after a kill -9 during save, the previous model still loads with the same answers",
      r.returncode == 0 and np.array_equal(np.load(h), before), r.stderr)
r = run("forward", *RANDOM[:2], "7", *RANDOM[3:], "--ids", "3,4,5", "--save-model", saved, "--attn-out", a)
r2 = run("forward", "--model", saved, "--ids", "3,4,5", "--attn-out", h)
check("a save that completes replaces the model as a whole", r.returncode == 0 and r2.returncode == 0 and
      np.array_equal(np.load(a), np.load(h)) and not np.array_equal(np.load(h), before), r.stderr + r2.stderr)

# --- train -> eval -> predict -> forward on the saved folder ---------------------------------
data = os.path.join(tmp, "neg.tsv")
r = run("make-data", "--task", "negation", "--n", "600", "--seed", "4", "--out", data)
check("make-data writes a TSV", r.returncode == 0 and open(data).readline() == "text\tlabel\n", r.stderr)
trained = os.path.join(tmp, "trained")
r = run("train", "--data", data, "--out", trained, "--epochs", "3", "--dim", "32", "--heads", "4", "--layers", "1",
        "--ff", "32", "--max-len", "16", "--seed", "2")
epoch_lines = [l for l in r.stdout.splitlines() if l.startswith("epoch ")]
check("train prints one line per epoch in the documented form", r.returncode == 0 and len(epoch_lines) == 3 and
      all(len(l.split()) == 10 and l.split()[2] == "train_loss" and l.split()[8] == "samples_per_s" for l in epoch_lines),
      r.stdout + r.stderr)
r = run("eval", "--model", trained, "--data", data)
check("eval prints accuracy and loss", r.returncode == 0 and r.stdout.startswith("accuracy ") and " loss " in r.stdout,
      r.stdout + r.stderr)
r = run("predict", "--model", trained, "--text", "the film was not good", "--json")
p = json.loads(r.stdout) if r.returncode == 0 else {}
check("predict gives a label and class probabilities", p.get("label") in ("negative", "positive") and
      abs(sum(p.get("probabilities", {}).values()) - 1) <= row_sum_bound(2), r.stdout + r.stderr)
r = run("forward", "--model", trained, "--text", "the film was not good", "--json")
check("forward opens the trained folder and agrees with predict",
      r.returncode == 0 and json.loads(r.stdout)["predicted_label"] == p.get("label"), r.stderr)
r = run("predict", "--text", "the film was not very good")
check("the shipped default model is used without --model and gets negation right",
      r.returncode == 0 and r.stdout.startswith("negative"), r.stdout + r.stderr)

# --- train --objective lm -> a language model folder that forward, generate and analyze open ---
lm = os.path.join(tmp, "lm")
r = run("train", "--objective", "lm", "--task", "induction", "--task-seq", "6", "--task-vocab", "24", "--arch", "llama",
        "--heads", "2", "--kv-heads", "1", "--dim", "16", "--ff", "24", "--steps", "40", "--n", "400", "--log-every", "20",
        "--out", lm, "--seed", "3")
step_lines = [l for l in r.stdout.splitlines() if l.startswith("step ")]
check("train --objective lm logs steps and epochs (40 steps of 13 per epoch: 4), and saves", r.returncode == 0 and len(step_lines) == 2 and
      step_lines[-1].startswith("step 40/40 loss ") and any(l.startswith("epoch 4/4 ") for l in r.stdout.splitlines()) and
      os.path.exists(os.path.join(lm, "config.json")), r.stdout + r.stderr)
cfg = json.load(open(os.path.join(lm, "config.json"))) if r.returncode == 0 else {}
check("the language model's config.json says what it is", cfg.get("lm_head") is True and cfg.get("causal") is True and
      cfg.get("norm_kind") == "rms_norm" and cfg.get("num_kv_heads") == 1 and cfg.get("positional") == "rotary", str(cfg))
r = run("forward", "--model", lm, "--text", "w1 w2 w3 w1 w2", "--json")
j = json.loads(r.stdout) if r.returncode == 0 else {}
check("forward opens it as a language model", len(j.get("next_tokens", [])) > 0, r.stdout + r.stderr)
r = run("generate", "--model", lm, "--text", "w1 w2 w3 w1", "--max-new", "3", "--greedy", "--json")
check("generate writes with it", r.returncode == 0 and len(json.loads(r.stdout)["generated_ids"]) == 3, r.stdout + r.stderr)
r = run("train", "--objective", "lm", "--preset", "induction", "--epochs", "1", "--n", "320", "--out",
        os.path.join(tmp, "preset"), "--quiet")
cfg = json.load(open(os.path.join(tmp, "preset", "config.json"))) if r.returncode == 0 else {}
check("train --preset induction builds the preset's model (2 layers of one head, attention-only, rotary)",
      cfg.get("num_layers") == 2 and cfg.get("num_heads") == 1 and cfg.get("ff_dim") == 0 and
      cfg.get("positional") == "rotary" and cfg.get("max_len") == 20, r.stdout + r.stderr + str(cfg))
# modular addition: every pair once, split; the full batch by default; the model reads its numbers
ma = os.path.join(tmp, "modadd")
r = run("train", "--objective", "lm", "--task", "modadd", "--task-p", "7", "--task-train-frac", "0.5", "--arch", "llama",
        "--heads", "2", "--dim", "16", "--ff", "16", "--steps", "4", "--log-every", "2", "--out", ma)
epochs = [l for l in r.stdout.splitlines() if l.startswith("epoch ")]
check("train --task modadd: 25 of 49 pairs, the full batch (a step an epoch), train_acc logged every 2 epochs",
      r.returncode == 0 and "on the modadd task: 25 sequences of 4, vocab 11" in r.stdout and len(epochs) == 2 and
      epochs[-1].startswith("epoch 4/4 ") and " train_acc " in epochs[-1], r.stdout + r.stderr)
r = run("forward", "--model", ma, "--text", "3 5 =", "--json")
j = json.loads(r.stdout) if r.returncode == 0 else {}
check("its folder reads \"3 5 =\" as the task's numbers", j.get("tokens") == ["3", "5", "="] and j.get("ids") == [6, 8, 10],
      r.stdout + r.stderr)
# a new language model on a text: a character vocabulary built from it, the last tenth held out
text_file, one_char = os.path.join(tmp, "text.txt"), os.path.join(tmp, "one.txt")
with open(text_file, "w") as f:
    f.write("The cat sat on the mat. The dog sat on the log.\n" * 40)
with open(one_char, "w") as f:
    f.write("aaaa")
tl = os.path.join(tmp, "text-lm")
r = run("train", "--objective", "lm", "--data", text_file, "--seq", "32", "--arch", "gpt2", "--heads", "2", "--dim", "16",
        "--ff", "32", "--steps", "30", "--lr", "3e-3", "--out", tl)
epochs = [l for l in r.stdout.splitlines() if l.startswith("epoch ")]
f = run("forward", "--model", tl, "--text", "The cat", "--json") if r.returncode == 0 else r
j = json.loads(f.stdout) if f.returncode == 0 else {}
check("train --objective lm --data FILE.txt: a character model of the text (54 train / 5 held-out sequences of 32), "
      "which reads its characters, case kept",
      r.returncode == 0 and "54 train / 5 validation sequences of 32 tokens, char vocabulary of 18" in r.stdout and
      len(epochs) > 0 and j.get("tokens") == ["T", "h", "e", " ", "c", "a", "t"], r.stdout + r.stderr + f.stdout + f.stderr)
# a text too large to read into sequences in this machine's memory (100 bytes a byte): refused
# before it is read, with the figures (a sparse file: its size on disk is nothing)
with open("/proc/meminfo") as f:
    avail = next(int(l.split()[1]) * 1024 for l in f if l.startswith("MemAvailable:"))
huge = os.path.join(tmp, "huge.txt")
with open(huge, "wb") as f:
    f.truncate(avail // 50)  # twice what the memory holds: refused even if some is freed meanwhile
r2 = run("train", "--objective", "lm", "--data", huge, "--steps", "1", "--out", os.path.join(tmp, "x"))
os.remove(huge)
check("train --objective lm refuses a text too large for the memory before reading it",
      r2.returncode == 2 and "takes up to" in r2.stderr and "GB of memory available" in r2.stderr, r2.stdout + r2.stderr)
g = run("generate", "--model", tl, "--text", "The cat", "--max-new", "12", "--greedy", "--json") if r.returncode == 0 else r
gj = json.loads(g.stdout) if g.returncode == 0 else {}
check("generate writes a character model's text without spaces between its characters",
      g.returncode == 0 and len(gj.get("generated_ids", [])) == 12 and
      gj.get("text") == "".join(step["token"] for step in gj.get("steps", [])),
      g.stdout + g.stderr)
# --hf: the same run saved as transformers saves LlamaForCausalLM, with a tokenizer.json
hfo = os.path.join(tmp, "lm-hf")
r = run("train", "--objective", "lm", "--task", "copy", "--task-seq", "4", "--task-vocab", "12", "--arch", "llama",
        "--heads", "2", "--dim", "16", "--steps", "3", "--n", "64", "--hf", "--out", hfo, "--quiet")
cfg = json.load(open(os.path.join(hfo, "config.json"))) if r.returncode == 0 else {}
f = run("forward", "--model", hfo, "--text", "w1 W2 |", "--json") if r.returncode == 0 else r
j = json.loads(f.stdout) if f.returncode == 0 else {}
check("train --hf saves a Llama folder (config, tokenizer.json) that forward reads with its tokenizer",
      cfg.get("model_type") == "llama" and cfg.get("architectures") == ["LlamaForCausalLM"] and
      os.path.exists(os.path.join(hfo, "tokenizer.json")) and j.get("ids") == [4, 5, 11],
      r.stdout + r.stderr + f.stdout + f.stderr + str(cfg))
# copy / reverse / parens: their own tokens in the folder's vocabulary ("|" is the last id)
for task, flags, text, ids in [("reverse", ["--task-seq", "4", "--task-vocab", "10"], "w1 w2 w3 |", [4, 5, 6, 9]),
                               ("parens", ["--task-seq", "6"], "( ( ) ) =", [3, 3, 4, 4, 5])]:
    out = os.path.join(tmp, task)
    r = run("train", "--objective", "lm", "--task", task, *flags, "--arch", "gpt2", "--heads", "2", "--dim", "16",
            "--steps", "3", "--n", "64", "--out", out, "--quiet")
    f = run("forward", "--model", out, "--text", text, "--json") if r.returncode == 0 else r
    j = json.loads(f.stdout) if f.returncode == 0 else {}
    check("train --task %s saves a model that reads %r as the task's tokens" % (task, text),
          j.get("tokens") == text.split() and j.get("ids") == ids, r.stdout + r.stderr + f.stdout + f.stderr)
r = run("lm-loss", "--model", lm, "--ids", "5,9,7,5,9,7", "--json", "--grad-out", os.path.join(tmp, "g.safetensors"))
j = json.loads(r.stdout) if r.returncode == 0 else {}
check("lm-loss gives the loss over T - 1 positions and writes a gradient per tensor",
      j.get("scored") == 5 and j.get("loss", 0) > 0 and os.path.getsize(os.path.join(tmp, "g.safetensors")) > 1000,
      r.stdout + r.stderr)
r = run("analyze", "--model", lm, "--method", "induction", "--seq", "6")
check("analyze --method induction scores it", r.returncode == 0 and r.stdout.startswith("induction scores"), r.stderr)

for ext, magic in [("png", b"\x89PNG"), ("svg", b"<?xml"), ("pdf", b"%PDF")]:
    out = os.path.join(tmp, "fig." + ext)
    r = run("export", *RANDOM, "--text", "hello", "--layer", "all", "--mask", "causal", "--out", out)
    ok = r.returncode == 0 and os.path.exists(out) and open(out, "rb").read(len(magic)) == magic
    check(f"export --out .{ext} writes a valid file", ok, r.stderr)
out = os.path.join(tmp, "fig.npy")
r = run("export", *RANDOM, "--text", "hello", "--layer", "0", "--scale", "0-1", "--out", os.path.join(tmp, "unit.png"))
check("export --scale 0-1 writes a PNG", r.returncode == 0 and open(os.path.join(tmp, "unit.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n", r.stderr)
r = run("export", *RANDOM, "--text", "hello", "--layer", "1", "--head", "2", "--out", out)
check("export --out .npy writes one head [T, S]", r.returncode == 0 and np.load(out).shape == (5, 5), r.stderr)

one_class = write("one.tsv", "text\tlabel\na\tx\nb\tx\nc\tx\n")
unseen = write("unseen.tsv", "text\tlabel\nthe film was good\tneutral\n")
empty_row = write("empty.tsv", "text\tlabel\nthe film was good\tpositive\n\tnegative\n")
data_bad_cases = [
    ("train: missing data file", ["train", "--data", "/nonexistent.tsv", "--out", os.path.join(tmp, "x")], "cannot open"),
    ("train: one class only", ["train", "--data", one_class, "--out", os.path.join(tmp, "x"), "--val-split", "0.3"], "only one class"),
    ("train: no such column", ["train", "--data", data, "--label-column", "mood", "--out", os.path.join(tmp, "x")], "no column named \"mood\""),
    ("train: empty row", ["train", "--data", empty_row, "--out", os.path.join(tmp, "x")], ":3: the text is empty"),
    ("export: unknown format", ["export", *RANDOM, "--text", "hi", "--out", os.path.join(tmp, "x.bmp")], "unknown export format"),
    ("export: unknown --scale", ["export", *RANDOM, "--text", "hi", "--scale", "log", "--out", os.path.join(tmp, "x.png")], "--scale: expected max or 0-1"),
    ("export: no such head", ["export", *RANDOM, "--text", "hi", "--head", "9", "--out", os.path.join(tmp, "x.png")], "head 9 does not exist"),
    ("eval: label unseen in training", ["eval", "--model", trained, "--data", unseen], "label \"neutral\" was not seen"),
    ("train lm: no task", ["train", "--objective", "lm", "--steps", "5", "--out", os.path.join(tmp, "x")], "needs --task induction"),
    ("train lm: unknown task", ["train", "--objective", "lm", "--task", "sort", "--steps", "5", "--out", os.path.join(tmp, "x")], "unknown language-model task \"sort\""),
    ("train lm: --task with --data", ["train", "--objective", "lm", "--task", "induction", "--data", data, "--steps", "5", "--out", os.path.join(tmp, "x")], "--task does not apply to a new language model on --data"),
    ("train lm: --tokenizer on a task", ["train", "--objective", "lm", "--task", "induction", "--tokenizer", "char", "--steps", "5", "--out", os.path.join(tmp, "x")], "--tokenizer does not apply to --objective lm on --task"),
    ("train lm: a text of one character", ["train", "--objective", "lm", "--data", one_char, "--steps", "5", "--out", os.path.join(tmp, "x")], "a language model needs at least 2"),
    ("train lm: unknown text tokenizer", ["train", "--objective", "lm", "--data", one_char, "--tokenizer", "sentencepiece", "--steps", "5", "--out", os.path.join(tmp, "x")], "--tokenizer: a new language model reads its text by char, word or bpe"),
    ("train lm: a BPE smaller than the bytes", ["train", "--objective", "lm", "--data", one_char, "--tokenizer", "bpe", "--vocab-size", "200", "--steps", "5", "--out", os.path.join(tmp, "x")], "--vocab-size: a byte-level BPE holds <|endoftext|> and the 256 bytes: at least 257, got 200"),
    ("train lm: no length", ["train", "--objective", "lm", "--task", "induction", "--out", os.path.join(tmp, "x")], "needs --steps N or --epochs N"),
    ("train lm: max-len too short", ["train", "--objective", "lm", "--task", "induction", "--max-len", "8", "--steps", "5", "--out", os.path.join(tmp, "x")], "shorter than the task's sequences"),
    ("train lm: unknown arch", ["train", "--objective", "lm", "--task", "induction", "--arch", "t5", "--steps", "5", "--out", os.path.join(tmp, "x")], "expected gpt2 or llama"),
    ("train lm: unknown preset", ["train", "--objective", "lm", "--preset", "grok", "--out", os.path.join(tmp, "x")], "unknown language-model preset \"grok\" (expected induction, grokking, reverse)"),
    ("train lm: --task-p is for modadd", ["train", "--objective", "lm", "--task", "induction", "--task-p", "7", "--steps", "5", "--out", os.path.join(tmp, "x")], "--task-p is for --task modadd"),
    ("train lm: --n does not apply to modadd", ["train", "--objective", "lm", "--task", "modadd", "--n", "9", "--steps", "5", "--out", os.path.join(tmp, "x")], "--n does not apply to the modadd task"),
    ("train lm --hf: attention-only GPT-2", ["train", "--objective", "lm", "--task", "induction", "--arch", "gpt2", "--ff", "0", "--hf", "--steps", "5", "--out", os.path.join(tmp, "x")], "cannot run a feed-forward of width 0"),
    ("train: --hf is for lm", ["train", "--hf", "--data", data, "--out", os.path.join(tmp, "x")], "--hf is for --objective lm"),
    ("train lm: parens has its own tokens", ["train", "--objective", "lm", "--task", "parens", "--task-vocab", "9", "--steps", "5", "--out", os.path.join(tmp, "x")], "--task-vocab does not apply to the parens task"),
    ("train lm: modadd share out of range", ["train", "--objective", "lm", "--task", "modadd", "--task-train-frac", "1.5", "--steps", "5", "--out", os.path.join(tmp, "x")], "between 0 and 1"),
    ("train: --preset is for lm", ["train", "--preset", "induction", "--data", data, "--out", os.path.join(tmp, "x")], "--preset is for --objective lm"),
    ("lm-loss: a classifier", ["lm-loss", "--model", trained, "--text", "the film was good"], "lm-loss reads a language model"),
    ("lm-loss: one token", ["lm-loss", "--model", lm, "--ids", "5"], "at least 2 tokens"),
    ("train: unknown objective", ["train", "--objective", "mlm", "--data", data, "--out", os.path.join(tmp, "x")], "--objective must be classify or lm"),
    ("train: --task is for lm", ["train", "--task", "induction", "--data", data, "--out", os.path.join(tmp, "x")], "--task is for --objective lm"),
]

# --- OpenCL: the device list, agreement with cpu, and the fallbacks ----------------------------
r = run("devices")
has_opencl = "opencl:0" in r.stdout
check("devices lists cpu, reference and the OpenCL device (CI installs PoCL)", r.returncode == 0 and has_opencl and
      r.stdout.startswith("cpu"), r.stdout + r.stderr)
if has_opencl:
    a_cpu, a_ocl = os.path.join(tmp, "cpu.npy"), os.path.join(tmp, "ocl.npy")
    run("forward", *RANDOM, "--text", "opencl check", "--mask", "causal", "--attn-out", a_cpu)
    r = run("forward", *RANDOM, "--text", "opencl check", "--mask", "causal", "--attn-out", a_ocl, "--backend", "opencl", "--json")
    check("forward --backend opencl agrees with cpu, no warning",
          r.returncode == 0 and json.loads(r.stdout)["backend"] == "opencl" and not json.loads(r.stdout)["warnings"]
          and np.abs(np.load(a_cpu) - np.load(a_ocl)).max() <= random_model_bound(np.load(a_cpu).shape[-1]), r.stderr)
    broken = os.path.join(tmp, "broken_kernels")
    os.makedirs(broken)
    write("broken_kernels/softmax.cl", "__kernel void masked_softmax(__global float* p) { this is not OpenCL C }\n")
    r = run("forward", *RANDOM, "--text", "opencl check", "--mask", "causal", "--attn-out", a_ocl, "--backend", "opencl",
            "--json", env={"ATTNLAB_OPENCL_KERNELS": broken})
    j = json.loads(r.stdout) if r.returncode == 0 else {}
    check("kernels that fail to build: falls back to cpu, says why, same answers",
          j.get("backend") == "cpu" and any("building attnlab's kernels failed" in w for w in j.get("warnings", []))
          and np.array_equal(np.load(a_cpu), np.load(a_ocl)), r.stdout + r.stderr)
    r = run("forward", *RANDOM, "--text", "hi", "--backend", "opencl:9", "--json")
    check("a device index that does not exist: falls back to cpu, says why",
          r.returncode == 0 and any("no device 9" in w for w in json.loads(r.stdout)["warnings"]), r.stderr)
r = run("forward", *RANDOM, "--text", "hi", "--backend", "opencl:x")
check("a malformed opencl:N is still a warning with a cpu result", r.returncode == 0 and "expected opencl or opencl:N" in r.stderr,
      r.stderr)

# --- bad input --------------------------------------------------------------------------------
broken = os.path.join(tmp, "broken")
os.makedirs(broken)
write("broken/vocab.txt", "[PAD]\n[UNK]\n")
write("broken/model.safetensors", open(os.path.join(model, "model.safetensors"), "rb").read()[:1000], "wb")
write("broken/config.json", open(os.path.join(model, "config.json")).read())
badjson = os.path.join(tmp, "badjson")
os.makedirs(badjson)
write("badjson/config.json", "{\"vocab_size\": 10,")
hdr = json.dumps({"w": {"dtype": "F32", "shape": [1000000], "data_offsets": [0, 4000000]}}).encode()
liar = os.path.join(tmp, "liar")
os.makedirs(liar)
write("liar/config.json", open(os.path.join(model, "config.json")).read())
write("liar/vocab.txt", "[PAD]\n")
write("liar/model.safetensors", struct.pack("<Q", len(hdr)) + hdr + b"\0" * 16, "wb")
np.save(os.path.join(tmp, "wrong.npy"), np.zeros((3, 3), dtype=bool))

bad_cases = [
    ("missing model folder", ["forward", "--model", "/nonexistent/model", "--text", "hi"], "no such model folder"),
    ("config.json not JSON", ["forward", "--model", badjson, "--text", "hi"], "not valid JSON"),
    ("truncated safetensors", ["forward", "--model", broken, "--text", "hi"], "model.safetensors"),
    ("offsets outside the data", ["forward", "--model", liar, "--text", "hi"], "outside the data"),
    ("id out of range", ["forward", *RANDOM, "--ids", "1,2,500"], "id 500 at position 2"),
    ("ids not integers", ["forward", *RANDOM, "--ids", "1,x"], "not an integer"),
    ("empty text", ["forward", *RANDOM, "--text", "   "], "no tokens"),
    ("too long", ["forward", *RANDOM, "--text", "a" * 65], "max_len 64"),
    ("only_second without a pair", ["forward", *RANDOM, "--text", "a" * 65, "--truncation", "only_second"],
     "needs a pair"),
    ("unknown truncation", ["forward", *RANDOM, "--text", "a" * 65, "--truncation", "longest"],
     "expected longest_first"),
    ("unknown mask", ["forward", *RANDOM, "--text", "hi", "--mask", "diagonal"], "unknown mask"),
    ("mask of the wrong shape", ["forward", *RANDOM, "--text", "hello", "--mask", "custom:" + os.path.join(tmp, "wrong.npy")],
     "expected [5, 5]"),
    ("mask file missing", ["forward", *RANDOM, "--text", "hi", "--mask", "custom:/nonexistent.npy"], "cannot open"),
    ("unknown option", ["forward", *RANDOM, "--text", "hi", "--colour", "red"], "unknown option --colour"),
    ("option without value", ["forward", *RANDOM, "--text"], "--text needs a value"),
    ("no input", ["forward", *RANDOM], "--text"),
    ("unknown backend", ["forward", *RANDOM, "--text", "hi", "--backend", "tpu"], "unknown backend"),
    ("heads do not divide dim", ["forward", "--random-init", "--dim", "30", "--heads", "4", "--text", "hi"], "does not divide"),
    ("unknown command", ["fly"], "unknown command"),
    ("--cache without --cache-out", ["forward", *RANDOM, "--text", "hi", "--cache", "*"], "--cache needs --cache-out"),
    ("--cache matching nothing", ["forward", *RANDOM, "--text", "hi", "--cache", "blocks.99.*", "--cache-out",
                                  os.path.join(tmp, "c.npz")], "no activation of this model's pass matches"),
    ("--patch of an unknown name", ["forward", *RANDOM, "--text", "hello", "--patch",
                                    "blocks.0.hook_nope=" + os.path.join(tmp, "wrong.npy")], "no activation"),
    ("--patch with positions that are not numbers", ["forward", *RANDOM, "--text", "hi", "--patch",
                                                     "blocks.0.hook_z=" + os.path.join(tmp, "wrong.npy") + ":x"],
     "is not a list of positions"),
    ("--patch without '='", ["forward", *RANDOM, "--text", "hi", "--patch", "blocks.0.hook_z"], "expected NAME=FILE.npy"),
    ("--add with a bad factor", ["forward", *RANDOM, "--text", "hi", "--add",
                                 "blocks.0.hook_resid_pre=" + os.path.join(tmp, "wrong.npy") + "*two"], "is not a number"),
    ("attention that would not fit in memory", ["forward", "--random-init", "--max-len", "200000", "--layers", "6",
                                                "--heads", "16", "--ids", "5", "--pad-to", "150000"], "of memory available"),
]
# too long, cut when asked: the first max_len tokens, and stderr says so
r = run("forward", *RANDOM, "--text", "a" * 65, "--truncation", "longest_first", "--json")
check("--truncation longest_first cuts to max_len and says so",
      r.returncode == 0 and len(json.loads(r.stdout)["tokens"]) == 64 and "cut to 64" in r.stderr,
      f"exit {r.returncode}, stderr {r.stderr.strip()!r}")

# mean ablation through the hooks: the run says so and its prediction moves
plain = json.loads(run("forward", *RANDOM, "--text", "hello world", "--json").stdout)
r = run("forward", *RANDOM, "--text", "hello world", "--ablate-mean", "0:1,2:3", "--json")
j = json.loads(r.stdout) if r.returncode == 0 else {}
check("--ablate-mean runs as hook edits and changes the output",
      j.get("mean_ablated") == "0:1,2:3" and [e["name"] for e in j.get("edits", [])] ==
      ["blocks.0.attn.hook_z", "blocks.2.attn.hook_z"] and j.get("probabilities") != plain["probabilities"],
      f"exit {r.returncode}: {r.stderr.strip()} {j.get('edits')}")
r = run("forward", *RANDOM, "--text", "hello", "--ablate-mean", "0:9")
check("--ablate-mean of a head that does not exist is refused", r.returncode == 2 and "0:9" in r.stderr, r.stderr)

for name, args, needle in bad_cases + data_bad_cases:
    r = run(*args)
    lines = r.stderr.strip().splitlines()
    check(f"bad input, {name}: non-zero exit, one line naming it",
          r.returncode != 0 and len(lines) == 1 and needle in lines[0] and "error:" in lines[0],
          f"rc={r.returncode} stderr={r.stderr!r}")

if failures:
    print(f"{len(failures)} CLI check(s) failed")
    sys.exit(1)
print("all CLI checks passed")

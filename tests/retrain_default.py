#!/usr/bin/python3
"""The shipped default model, retrained with the README's own command (read from README.md, so
the two cannot drift apart), then held to what must hold on any machine: validation accuracy 1.0,
the shipped model's predictions on every row of the shipped data, and a second run giving the
same weights bit for bit. How far the retrained weights
are from the shipped ones depends on the CPU type, the build and the thread count (float sums in
another order), so that is printed, not asserted.
Usage: retrain_default.py PATH/TO/attnlab-cli PATH/TO/SOURCE_TREE
"""
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

CLI, ROOT = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="attnlab_retrain_")
failures = []


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + (f": {detail}" if detail else ""))
    if not ok:
        failures.append(what)


def run(*args):
    r = subprocess.run([CLI, *args], capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"attnlab-cli {' '.join(args)} failed: {r.stderr}")
    return r.stdout


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"])
    return out


try:
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = readme[readme.index("### The default model"):]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    words = shlex.split(block.replace("\\\n", " "))
    assert words[:2] == ["attnlab-cli", "train"], words[:2]
    out_at = words.index("--out")
    check("the README's command trains into resources/models/default", words[out_at + 1] == "resources/models/default")
    words[out_at + 1] = os.path.join(tmp, "default")
    print("retraining:", " ".join(words[1:]))
    run(*words[1:])

    shipped = os.path.join(ROOT, "resources", "models", "default")
    data = os.path.join(ROOT, "resources", "data", "negation.tsv")
    accuracy = {}
    for name, model in (("shipped", shipped), ("retrained", os.path.join(tmp, "default"))):
        accuracy[name] = json.loads(run("eval", "--model", model, "--data", data, "--json"))
    for name, e in accuracy.items():
        check(f"the {name} model gets every row of negation.tsv right", e["accuracy"] == 1.0, f"accuracy {e['accuracy']}")

    # the same prediction on every row: both at accuracy 1.0 already says so; checked row by row
    # on the first 200 rows' texts too, with the probabilities' largest difference printed
    rows = [line.split("\t") for line in open(data, encoding="utf-8").read().splitlines()[1:201]]
    worst, differ = 0.0, 0
    for r in rows:
        a = json.loads(run("predict", "--model", shipped, "--text", r[0], "--json"))
        b = json.loads(run("predict", "--model", os.path.join(tmp, "default"), "--text", r[0], "--json"))
        differ += a["label"] != b["label"]
        worst = max(worst, max(abs(a["probabilities"][k] - b["probabilities"][k]) for k in a["probabilities"]))
    check("the retrained model predicts what the shipped one does on 200 rows", differ == 0,
          f"{differ} differ; class probabilities within {worst:.2e}")

    # and on one machine, one build, one thread count: the same weights, bit for bit
    words[out_at + 1] = os.path.join(tmp, "again")
    run(*words[1:])
    same = open(os.path.join(tmp, "default", "model.safetensors"), "rb").read() == \
        open(os.path.join(tmp, "again", "model.safetensors"), "rb").read()
    check("training twice here gives the same weights, bit for bit", same)

    wa = load_safetensors(os.path.join(shipped, "model.safetensors"))
    wb = load_safetensors(os.path.join(tmp, "default", "model.safetensors"))
    check("the retrained model has the shipped one's tensors and shapes",
          sorted(wa) == sorted(wb) and all(wa[k].shape == wb[k].shape for k in wa))
    diff = max(float(np.max(np.abs(wa[k] - wb[k]))) for k in wa if k in wb and wa[k].shape == wb[k].shape)
    print(f"largest weight difference from the shipped model: {diff:.2e} (CPU type, build and thread count decide it)")
finally:
    shutil.rmtree(tmp, True)

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("retraining the default model: all checks passed")

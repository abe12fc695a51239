#!/usr/bin/python3
"""The shipped default model, retrained with the documented command (read from docs/training.md, so
the two cannot drift apart), then held to what must hold on any machine: accuracy 1.0 on every row
of the shipped data, as the shipped model has (so both predict the same on every row), and a
second run giving the same weights bit for bit. How far the retrained weights are from the
shipped ones depends on the CPU type, the build and the thread count (float sums in another
order), so that is printed, not asserted.
Usage: retrain_default.py PATH/TO/attnlab-cli PATH/TO/SOURCE_TREE
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from pyutil import load_safetensors

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


try:
    readme = open(os.path.join(ROOT, "docs", "training.md"), encoding="utf-8").read()
    section = readme[readme.index("### The default model"):]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    words = shlex.split(block.replace("\\\n", " "))
    assert words[:2] == ["attnlab-cli", "train"], words[:2]
    out_at = words.index("--out")
    check("docs/training.md's command trains into resources/models/default", words[out_at + 1] == "resources/models/default")
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

    # both at accuracy 1.0 on every row: the same prediction on every row. How close their
    # probabilities are, on a few rows, for the log:
    worst = 0.0
    for line in open(data, encoding="utf-8").read().splitlines()[1:21]:
        text = line.split("\t")[0]
        a = json.loads(run("predict", "--model", shipped, "--text", text, "--json"))["probabilities"]
        b = json.loads(run("predict", "--model", os.path.join(tmp, "default"), "--text", text, "--json"))["probabilities"]
        worst = max(worst, max(abs(a[k] - b[k]) for k in a))
    print(f"class probabilities of the two models within {worst:.2e} on 20 rows")

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

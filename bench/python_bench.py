"""The Python package's forward against attnlab-cli bench (the same engine, the same shapes) and
transformers' eager forward with output_attentions=True (what BertViz runs), in one run, rounds
interleaved so that the machine's noise falls on every side alike.

usage (in a venv with `pip install ./python`):
  python bench/python_bench.py build/app/attnlab-cli [--minilm DIR] [--seq 128] [--repeat 30]
      [--rounds 3] [--hf-python ~/.cache/attnlab/hf5-venv/bin/python]
Prints a table and one JSON line (medians in ms, ratios)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import attnlab

here = os.path.dirname(os.path.abspath(__file__))
p = argparse.ArgumentParser()
p.add_argument("cli")
p.add_argument("--minilm", default=os.path.expanduser("~/.local/share/attnlab/models/all-MiniLM-L6-v2"))
p.add_argument("--seq", type=int, default=128)
p.add_argument("--repeat", type=int, default=30)
p.add_argument("--rounds", type=int, default=3)
p.add_argument("--threads", type=int, default=os.cpu_count())
p.add_argument("--hf-python", default=os.path.expanduser("~/.cache/attnlab/hf5-venv/bin/python"))
a = p.parse_args()

model = attnlab.Model(a.minilm)
ids = np.random.default_rng(0).integers(1000, model.vocab_size, a.seq).tolist()


def python_forward(stack):
    walls, passes = [], []
    for k in range(a.repeat + 2):
        t0 = time.perf_counter()
        r = model.forward(ids=ids)
        if stack:
            r.attentions  # every layer stacked into one [L, H, T, T] array (one copy)
        dt = (time.perf_counter() - t0) * 1e3
        if k >= 2:  # two warm-up passes, as the CLI's and transformers' benches
            walls.append(dt)
            passes.append(r.millis)
    return statistics.median(walls), statistics.median(passes)


def cli_bench():
    out = subprocess.run([a.cli, "bench", "--model", a.minilm, "--seq", str(a.seq), "--repeat", str(a.repeat),
                          "--json"], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["median_ms"]


def hf_bench():
    out = subprocess.run([a.hf_python, os.path.join(here, "hf_forward.py"), "--model", a.minilm, "--seq",
                          str(a.seq), "--repeat", str(a.repeat), "--threads", str(a.threads)],
                         capture_output=True, text=True, check=True).stdout
    j = json.loads(out.strip().splitlines()[-1])
    return j["median_ms"], j["impl"]


rows = {"cli": [], "py": [], "py_pass": [], "py_stacked": [], "hf": []}
impl = ""
for _ in range(a.rounds):
    rows["cli"].append(cli_bench())
    wall, inner = python_forward(False)
    rows["py"].append(wall)
    rows["py_pass"].append(inner)
    rows["py_stacked"].append(python_forward(True)[0])
    ms, impl = hf_bench()
    rows["hf"].append(ms)
med = {k: statistics.median(v) for k, v in rows.items()}
print(f"MiniLM-L6 (6 layers, 12 heads, hidden 384), T={a.seq}, {a.threads} threads, median of {a.repeat} x "
      f"{a.rounds} rounds")
print(f"  attnlab-cli bench                       {med['cli']:8.2f} ms")
print(f"  attnlab.Model.forward (wall, Python)    {med['py']:8.2f} ms   {med['py'] / med['cli']:.3f}x the CLI"
      f"   (its pass: {med['py_pass']:.2f} ms)")
print(f"  ... and r.attentions stacked            {med['py_stacked']:8.2f} ms   {med['py_stacked'] / med['cli']:.3f}x")
print(f"  {impl} eager, output_attentions   {med['hf']:8.2f} ms   attnlab.forward is {med['hf'] / med['py']:.2f}x"
      " faster")
print(json.dumps({"seq": a.seq, "medians_ms": med, "python_over_cli": med["py"] / med["cli"],
                  "transformers_over_python": med["hf"] / med["py"], "anchor": impl}))
sys.exit(0)

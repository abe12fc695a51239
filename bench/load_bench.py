"""Opening a model of real size: a new process that loads a folder and runs one forward pass of T
random ids with every head's attention at hand, wall time (median of --repeat runs) and peak RSS,
attnlab against transformers (fp32 eager, output_attentions) in the same run, alternating.
attnlab-cli forward keeps each layer's queries and keys (attention on demand: any layer's
probabilities one attention op away; `bench --on-demand` times that op), transformers every
probability.
usage: load_bench.py ATTNLAB_CLI FOLDER --python PY [--seq 5,512] [--repeat 3]
  (PY: a Python with torch and transformers; bench/make_llama.py makes a TinyLlama-shaped folder)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

TORCH_SIDE = r"""
import sys, time, torch, transformers
from transformers import AutoModelForCausalLM
folder, T = sys.argv[1], int(sys.argv[2])
torch.set_grad_enabled(False)
m = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32, attn_implementation="eager")
ids = torch.randint(0, m.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(0))
out = m(input_ids=ids, output_attentions=True)
assert len(out.attentions) == m.config.num_hidden_layers
print(transformers.__version__, torch.__version__)
"""


def measure(cmd):
    """Wall seconds and peak RSS (GB) of one new process: wait4's rusage is that child's alone.
    Its output goes to files (a pipe would fill at 64 KB and block it before wait4 returns)."""
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        t = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, text=True)
        _, _, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
        out_f.seek(0)
        err_f.seek(0)
        return wall, ru.ru_maxrss / 1024 / 1024, out_f.read(), err_f.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cli")
    ap.add_argument("folder")
    ap.add_argument("--python", required=True)
    ap.add_argument("--seq", default="5,512")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    for T in [int(s) for s in a.seq.split(",")]:
        ids = ",".join(str(5 + (i * 7919) % 30000) for i in range(T))
        ours, theirs, versions = [], [], ""
        for _ in range(a.repeat):
            w, r, out, err = measure([a.cli, "forward", "--model", a.folder, "--ids", ids, "--json"])
            if not out.strip():
                sys.exit(f"attnlab-cli failed: {err[-500:]}")
            ours.append((w, r))
            w, r, out, err = measure([a.python, "-c", TORCH_SIDE, a.folder, str(T)])
            if not out.strip():
                sys.exit(f"transformers failed: {err[-500:]}")
            versions = out.split()
            theirs.append((w, r))
        row = {"seq": T, "attnlab_s": statistics.median(w for w, _ in ours),
               "attnlab_peak_gb": max(r for _, r in ours),
               "transformers_s": statistics.median(w for w, _ in theirs),
               "transformers_peak_gb": max(r for _, r in theirs),
               "transformers": versions[0], "torch": versions[1]}
        row["speedup"] = row["transformers_s"] / row["attnlab_s"]
        row["memory_ratio"] = row["attnlab_peak_gb"] / row["transformers_peak_gb"]
        rows.append(row)
        print(f"T={T}: attnlab {row['attnlab_s']:.1f} s, {row['attnlab_peak_gb']:.2f} GB; transformers "
              f"{versions[0]} (torch {versions[1]}) {row['transformers_s']:.1f} s, {row['transformers_peak_gb']:.2f} GB; "
              f"{row['speedup']:.2f}x as fast, {row['memory_ratio']:.2f}x the memory (medians of {a.repeat})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

"""Generation speed: N new tokens after a T-token prompt (random ids), greedy, attnlab-cli generate
against transformers' generate() in the same run, alternating, each in a new process; the time of
the generate call alone (the model's loading left out), median of --repeat runs. Two settings:
every attention row kept (attnlab --attn-out; transformers eager with output_attentions=True) and
without attentions (transformers with its default sdpa attention).
usage: generate_bench.py ATTNLAB_CLI FOLDER --python PY [--prompt 512] [--new 128] [--repeat 3]
  (PY: a Python with torch 2.x and transformers; bench/make_gpt2.py DIR --lm makes a GPT-2-small folder)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

TORCH_SIDE = r"""
import sys, time, torch, transformers
from transformers import AutoModelForCausalLM
folder, T, N, attn = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
torch.set_grad_enabled(False)
torch.set_num_threads(int(sys.argv[5]))
m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                         attn_implementation="eager" if attn else "sdpa")
m.generation_config.eos_token_id = None
m.generation_config.pad_token_id = 0
ids = torch.randint(3, m.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(0))
t = time.perf_counter()
out = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=N, min_new_tokens=N, do_sample=False,
                 output_attentions=attn, return_dict_in_generate=True)
s = time.perf_counter() - t
assert out.sequences.shape[1] == T + N
print(s, transformers.__version__, torch.__version__)
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cli")
    ap.add_argument("folder")
    ap.add_argument("--python", required=True)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    threads = str(os.cpu_count())
    vocab = json.load(open(os.path.join(a.folder, "config.json")))["vocab_size"]
    import random
    rnd = random.Random(0)
    ids = ",".join(str(rnd.randrange(3, vocab)) for _ in range(a.prompt))
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for attn in (True, False):
            ours, theirs, versions = [], [], ""
            for _ in range(a.repeat):
                cmd = [a.cli, "generate", "--model", a.folder, "--ids", ids, "--max-new", str(a.new), "--ignore-eos",
                       "--json", "--json-top", "1"] + (["--attn-out", os.path.join(d, "a.npy")] if attn else [])
                j = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
                assert len(j["generated_ids"]) == a.new
                ours.append(j["generate_seconds"])
                p = subprocess.run([a.python, "-c", TORCH_SIDE, a.folder, str(a.prompt), str(a.new), "1" if attn else "0",
                                    threads], check=True, capture_output=True, text=True)
                secs, tv, pv = p.stdout.split()
                theirs.append(float(secs))
                versions = f"transformers {tv}, torch {pv}"
            o, t = statistics.median(ours), statistics.median(theirs)
            rows.append((attn, o, t, versions))
    print(f"{a.new} new tokens after a {a.prompt}-token prompt, greedy, median of {a.repeat}; {rows[0][3]}")
    print("| | attnlab | transformers | ratio |")
    print("| --- | --- | --- | --- |")
    for attn, o, t, _ in rows:
        what = "every attention kept" if attn else "no attentions"
        print(f"| {what} | {a.new / o:.1f} tokens/s ({o:.2f} s) | {a.new / t:.1f} tokens/s ({t:.2f} s) | {t / o:.2f}x |")


if __name__ == "__main__":
    sys.exit(main())

"""Hugging Face side of the pretrained-model benchmark: transformers' BertModel (eager attention,
output_attentions=True: every layer's per-head probabilities, what BertViz runs) on a model
folder, random ids of length T, the same thread count as `attnlab-cli bench`. Prints one JSON
line: {"median_ms": ..., "impl": "transformers X / torch Y"}.
usage: hf_forward.py --model DIR --seq 128 --repeat 10 --threads 2   (run with a Python that has transformers)
"""
import argparse
import json
import statistics
import time

import torch
import transformers
from transformers import AutoModel

p = argparse.ArgumentParser()
p.add_argument("--model", required=True)
for name, default in [("seq", 128), ("repeat", 10), ("threads", 2)]:
    p.add_argument(f"--{name}", type=int, default=default)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
model = AutoModel.from_pretrained(a.model, attn_implementation="eager").eval()
ids = torch.randint(1000, model.config.vocab_size, (1, a.seq))
times = []
with torch.no_grad():
    for k in range(a.repeat + 2):
        t0 = time.perf_counter()
        out = model(input_ids=ids, output_attentions=True)
        dt = (time.perf_counter() - t0) * 1e3
        assert len(out.attentions) == model.config.num_hidden_layers
        if k >= 2:  # two warm-up passes
            times.append(dt)
print(json.dumps({"median_ms": statistics.median(times), "min_ms": min(times),
                  "impl": f"transformers {transformers.__version__} / torch {torch.__version__}"}))

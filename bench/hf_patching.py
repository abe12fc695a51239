"""The activation-patching sweep as a user writes it today, timed: PyTorch forward hooks on
transformers' GPT2LMHeadModel put each clean layer input (hook_resid_pre) into the corrupted run,
one layer and position at a time (TransformerLens's get_act_patch_resid_pre semantics; every
patched run is a whole forward); and attribution patching with autograd (one clean forward, one
corrupted forward + backward). Prints one JSON line: exact_s (the whole sweep, once), the
attribution median in ms, and the normalised tables (for the ratio's sanity: attnlab's must agree).
usage: hf_patching.py --model DIR --clean IDS --corrupted IDS --answer N --wrong N [--repeat N] [--threads N]
"""
import argparse
import json
import statistics
import time

import torch
import transformers
from transformers import GPT2LMHeadModel

p = argparse.ArgumentParser()
p.add_argument("--model", required=True)
p.add_argument("--clean", required=True)
p.add_argument("--corrupted", required=True)
p.add_argument("--answer", type=int, required=True)
p.add_argument("--wrong", type=int, required=True)
p.add_argument("--repeat", type=int, default=3)
p.add_argument("--threads", type=int, default=0)
a = p.parse_args()
if a.threads:
    torch.set_num_threads(a.threads)
model = GPT2LMHeadModel.from_pretrained(a.model, attn_implementation="eager").eval()
clean = torch.tensor([[int(x) for x in a.clean.split(",")]])
corrupted = torch.tensor([[int(x) for x in a.corrupted.split(",")]])
T, blocks = clean.shape[1], model.transformer.h


def metric(ids):
    logits = model(input_ids=ids).logits[0, -1]
    return logits[a.answer] - logits[a.wrong]


with torch.no_grad():
    t0 = time.perf_counter()
    cache = {}
    handles = [b.register_forward_pre_hook(lambda m, i, l=l: cache.__setitem__(l, i[0].clone()))
               for l, b in enumerate(blocks)]
    m_clean = float(metric(clean))
    for h in handles:
        h.remove()
    m_corr = float(metric(corrupted))
    exact = []
    for l, blk in enumerate(blocks):
        row = []
        for t in range(T):
            def pre(m, i, l=l, t=t):
                x = i[0].clone()
                x[0, t] = cache[l][0, t]
                return (x,) + tuple(i[1:])
            h = blk.register_forward_pre_hook(pre)
            row.append((float(metric(corrupted)) - m_corr) / (m_clean - m_corr))
            h.remove()
        exact.append(row)
    exact_s = time.perf_counter() - t0

times = []
for _ in range(a.repeat):
    t0 = time.perf_counter()
    with torch.no_grad():
        handles = [b.register_forward_pre_hook(lambda m, i, l=l: cache.__setitem__(l, i[0].clone()))
                   for l, b in enumerate(blocks)]
        m_clean = float(metric(clean))
        for h in handles:
            h.remove()
    kept = {}

    def keep(l, x):
        x.retain_grad()
        kept[l] = x
    handles = [b.register_forward_pre_hook(lambda m, i, l=l: keep(l, i[0])) for l, b in enumerate(blocks)]
    m = metric(corrupted)
    m.backward()
    for h in handles:
        h.remove()
    span = m_clean - float(m)
    attribution = [((cache[l][0] - kept[l][0].detach()) * kept[l].grad[0]).sum(-1).div(span).tolist()
                   for l in range(len(blocks))]
    model.zero_grad(set_to_none=True)
    times.append((time.perf_counter() - t0) * 1000)
print(json.dumps({"exact_s": exact_s, "attribution_ms": statistics.median(times), "exact": exact,
                  "attribution": attribution,
                  "impl": f"PyTorch {torch.__version__} + transformers {transformers.__version__} (forward hooks)"}))

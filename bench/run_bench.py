#!/usr/bin/python3
"""attnlab's performance table, side by side with PyTorch in one run on this machine.

1. this machine's SGEMM rate (oneDNN and Eigen, 512^3, median) and a bf16 matmul's: the practical
   limits; each forward row's roofline (its products alone at those rates) and the largest
   speed-up over PyTorch any implementation of those products could show here;
2. forward passes (cpu backend, every per-head probability kept) vs PyTorch
   (nn.MultiheadAttention, need_weights=True, average_attn_weights=False, post-LN layers, the
   same weights) for d=512, 8 heads, ff=2048, 6 layers at T = 128 and 512;
3. one training step (forward + backward + Adam) vs PyTorch: d=128, 8 heads, 2 layers, ff=512,
   T=64, batch 32; and a language model's (next-token loss at every position) for a 2-layer
   attention-only Llama-style and a 4-layer GPT-2-style decoder, d=256, T=256, batch 16, against
   the same decoders in PyTorch (bench/torch_train_lm.py, fused and written-out attention);
4. T = 2,048 and 4,096 forwards of the default-size model (d=64, 8 heads, 2 layers, ff=128),
   full and with a sliding window of 64, with peak memory, keeping every layer / one layer / none;
5. the opencl backend's rows (whatever device `--backend opencl` picks here);
6. a real pretrained BERT (all-MiniLM-L6-v2, `scripts/attnlab.sh get-model minilm`) at T = 128 and
   512, every probability kept, against transformers' BertModel (eager, output_attentions=True)
   run by --hf-python (a Python with transformers; PyTorch 2.x from PyPI is the fair anchor);
7. a GPT-2-small-sized random decoder (--gpt2 DIR, made by bench/make_gpt2.py) at T = 128 and 512
   against transformers' GPT2Model the same way;
8. the activation-patching sweep (resid_pre, every layer x position, 12 x 20 = 240 patched runs)
   on a GPT-2-small-sized random LM (--gpt2 DIR + "-lm", GPT2LMHeadModel) against the same sweep
   written with PyTorch forward hooks on transformers (bench/hf_patching.py, run by --hf-python),
   and attribution patching (one backward) against the same with autograd;
then prints a table (medians, ratios, GFLOP/s and their share of the SGEMM rate, peak memory) and
writes the same as JSON. Each measurement runs in its own process (peak memory is per process).
usage: run_bench.py PATH/TO/attnlab-cli [--repeat N] [--threads N] [--json OUT.json] [--quick]
                    [--minilm DIR] [--hf-python PYTHON] [--gpt2 DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

p = argparse.ArgumentParser()
p.add_argument("cli")
p.add_argument("--repeat", type=int, default=10)
p.add_argument("--threads", type=int, default=os.cpu_count())
p.add_argument("--json", default="bench-results.json")
p.add_argument("--quick", action="store_true", help="fewer repeats and no T=4096 (a smoke run)")
p.add_argument("--minilm", default=os.path.expanduser("~/.local/share/attnlab/models/all-MiniLM-L6-v2"))
p.add_argument("--torch-python", default=os.environ.get("ATTNLAB_BENCH_PYTHON", "/usr/bin/python3"),
               help="the Python whose PyTorch the articles' layers are timed against (PyTorch 2.x is the fair anchor)")
p.add_argument("--gpt2", default="", help="folder for the GPT-2-small-sized random model (made by --hf-python)")
p.add_argument("--hf-python", default=os.environ.get("ATTNLAB_BENCH_PYTHON",
                                                      os.path.expanduser("~/.cache/attnlab/hf-venv/bin/python")))
a = p.parse_args()
here = os.path.dirname(os.path.abspath(__file__))
env = {**os.environ, "OMP_NUM_THREADS": str(a.threads)}
R = 3 if a.quick else a.repeat


def cli(*args):
    r = subprocess.run([a.cli, *args, "--json"], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"attnlab-cli {' '.join(args)} failed: {r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def torch(script, *args):
    r = subprocess.run([a.torch_python, os.path.join(here, script), *args, "--threads", str(a.threads)],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"{script} failed: {r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


results = {"threads": a.threads}
print(f"attnlab benchmark, {a.threads} thread(s), medians of {R} runs\n")

sg = cli("bench", "--sgemm", "--seq", "512", "--repeat", "20")
sgemm = max(sg.get("onednn_gflops", 0.0), sg["gflops"])  # the best SGEMM here: the practical limit
bf16_rate = sg.get("onednn_bf16_gflops", 0.0)   # a bf16 matmul with converted operands: the bf16 path's limit
results["sgemm_gflops"], results["eigen_sgemm_gflops"], results["bf16_matmul_gflops"] = sgemm, sg["gflops"], bf16_rate
print(f"{sg.get('machine', '')}\nSGEMM 512x512x512: oneDNN {sg.get('onednn_gflops', float('nan')):.1f} GFLOP/s, "
      f"Eigen {sg['gflops']:.1f} GFLOP/s (the cpu ops use {sg.get('fp32_gemm', 'eigen')}, as measured here); "
      f"bf16 matmul {bf16_rate:.1f} GFLOP/s" +
      (" (slower than fp32 on this CPU: cpu-bf16 gains nothing here)" if sg.get("bf16_slower_than_fp32") else "") + "\n")

with tempfile.TemporaryDirectory() as d:
    model = os.path.join(d, "m")
    subprocess.run([a.cli, "forward", "--random-init", "--seed", "1", "--vocab-size", "1000", "--dim", "512", "--heads", "8",
                    "--layers", "6", "--ff", "2048", "--max-len", "512", "--positional", "sinusoidal", "--ids", "1",
                    "--save-model", model], check=True, capture_output=True, env=env)
    rows = []
    for T in (128, 512):
        ours = cli("bench", "--model", model, "--seq", str(T), "--repeat", str(R))
        theirs = torch("torch_forward.py", "--model", model, "--layers", "6", "--dim", "512", "--heads", "8", "--ff", "2048",
                       "--seq", str(T), "--repeat", str(R))
        # The roofline: the pass's matrix products alone at the best SGEMM rate measured above
        # (nothing else costing anything) is the fastest any fp32 implementation of these
        # products runs here, so PyTorch's time over it is the largest speed-up fp32 can show.
        gflop = ours["gflops"] * ours["median_ms"] / 1e3
        floor_ms = gflop / sgemm * 1e3
        rows.append({"seq": T, "attnlab_ms": ours["median_ms"], "pytorch_ms": theirs["median_ms"],
                     "speedup": theirs["median_ms"] / ours["median_ms"], "gflops": ours["gflops"],
                     "sgemm_share": ours["gflops"] / sgemm, "peak_rss_mb": ours["peak_rss_mb"], "pytorch": theirs["impl"],
                     "gflop": gflop, "sgemm_floor_ms": floor_ms, "fp32_ceiling_speedup": theirs["median_ms"] / floor_ms,
                     "bf16_floor_ms": gflop / bf16_rate * 1e3 if bf16_rate else None,
                     "bf16_ceiling_speedup": theirs["median_ms"] / (gflop / bf16_rate * 1e3) if bf16_rate else None})
    results["forward"] = rows
    bf16 = []  # the bf16 backend against the same fp32 PyTorch rows
    for r in rows:
        ours = cli("bench", "--model", model, "--seq", str(r["seq"]), "--repeat", str(R), "--backend", "cpu-bf16")
        bf16.append({"seq": r["seq"], "attnlab_ms": ours["median_ms"], "speedup": r["pytorch_ms"] / ours["median_ms"],
                     "vs_fp32": r["attnlab_ms"] / ours["median_ms"],
                     "max_prob_diff_vs_fp32": ours.get("max_prob_diff_vs_fp32"), "notice": ours.get("notice", "")})
    results["forward_bf16"] = bf16
print(f"forward, d=512, 8 heads, ff=2048, 6 layers, all probabilities kept (same weights in both), "
      f"vs {rows[0]['pytorch']}")
print(f"{'T':>6} {'attnlab':>10} {'PyTorch':>10} {'speed-up':>9} {'GFLOP/s':>8} {'of SGEMM':>9} {'peak MB':>8}")
for r in rows:
    print(f"{r['seq']:>6} {r['attnlab_ms']:>8.1f}ms {r['pytorch_ms']:>8.1f}ms {r['speedup']:>8.2f}x {r['gflops']:>8.1f} "
          f"{100 * r['sgemm_share']:>8.0f}% {r['peak_rss_mb']:>8.0f}")

for r in rows:
    print(f"{r['seq']:>6} roofline: {r['gflop']:.1f} GFLOP of products take {r['sgemm_floor_ms']:.1f} ms at the SGEMM rate "
          f"(fp32 ceiling {r['fp32_ceiling_speedup']:.2f}x PyTorch)" +
          (f", {r['bf16_floor_ms']:.1f} ms at the bf16 rate (bf16 ceiling {r['bf16_ceiling_speedup']:.2f}x)"
           if r["bf16_floor_ms"] else ""))
for r in bf16:
    print(f"{r['seq']:>6} {r['attnlab_ms']:>8.1f}ms  cpu-bf16 (bf16 products, fp32 accumulation): {r['speedup']:.2f}x "
          f"PyTorch fp32, {r['vs_fp32']:.2f}x attnlab fp32" + (" (SLOWER than fp32 here)" if r["vs_fp32"] < 1 else "") +
          f"; probabilities within {r['max_prob_diff_vs_fp32']:.1e} of attnlab fp32 {r['notice']}")

# Training steps are short and noisy here: three times as many repeats.
ours = cli("bench", "--train", "--layers", "2", "--dim", "128", "--heads", "8", "--ff", "512", "--seq", "64", "--batch", "32",
           "--repeat", str(3 * R))
theirs = torch("torch_train.py", "--layers", "2", "--dim", "128", "--heads", "8", "--ff", "512", "--seq", "64", "--batch", "32",
               "--repeat", str(3 * R))
results["train"] = {"attnlab_ms": ours["median_ms"], "pytorch_ms": theirs["median_ms"], "speedup": theirs["median_ms"] / ours["median_ms"],
                    "attnlab_samples_per_s": ours["samples_per_s"], "pytorch_samples_per_s": theirs["samples_per_s"]}
t = results["train"]
print(f"\ntraining step (forward + backward + Adam, dropout 0.1), d=128, 8 heads, 2 layers, ff=512, T=64, batch 32")
print(f"  attnlab {t['attnlab_ms']:.1f} ms ({t['attnlab_samples_per_s']:.0f} samples/s), PyTorch {t['pytorch_ms']:.1f} ms "
      f"({t['pytorch_samples_per_s']:.0f} samples/s): {t['speedup']:.2f}x")

# Language models' training steps (issue #27's rows): a 2-layer attention-only Llama-style decoder
# and a 4-layer GPT-2-style one, d=256, 4 heads, T=256, batch 16, vocabulary 1,000, no dropout,
# against the same decoders in nanoGPT-style PyTorch (bench/torch_train_lm.py) with PyTorch's fused
# causal attention (sdpa) and with the softmax written out (eager).
results["train_lm"] = []
print("\nlanguage-model training step (forward + next-token loss + backward + clipping + Adam), d=256, 4 heads, "
      "T=256, batch 16")
for arch, layers, ff in [("llama", 2, 0), ("gpt2", 4, 1024)]:
    shape = ["--arch", arch, "--layers", str(layers), "--dim", "256", "--heads", "4", "--ff", str(ff), "--seq", "256",
             "--batch", "16", "--repeat", str(R)]
    ours = cli("bench", "--train", "--objective", "lm", *shape)
    row = {"arch": arch, "layers": layers, "ff": ff, "attnlab_ms": ours["median_ms"], "params": ours["params"]}
    for attn in ("sdpa", "eager"):
        theirs = torch("torch_train_lm.py", *shape, "--attn", attn)
        row[f"pytorch_{attn}_ms"] = theirs["median_ms"]
        row[f"speedup_vs_{attn}"] = theirs["median_ms"] / ours["median_ms"]
    results["train_lm"].append(row)
    what = f"{layers}-layer {arch}-style" + (", attention-only" if ff == 0 else f", ff={ff}")
    print(f"  {what:<32} attnlab {row['attnlab_ms']:.0f} ms, PyTorch sdpa {row['pytorch_sdpa_ms']:.0f} ms "
          f"({row['speedup_vs_sdpa']:.2f}x), eager {row['pytorch_eager_ms']:.0f} ms ({row['speedup_vs_eager']:.2f}x)")

# bf16 training (bf16 products, fp32 accumulation, master weights and the rest) against fp32, on a
# step large enough for the products to matter: 4 layers, d=512, ff=2048, T=128, batch 16.
bt = {}
for b in ("cpu", "cpu-bf16"):
    bt[b] = cli("bench", "--train", "--backend", b, "--layers", "4", "--dim", "512", "--heads", "8", "--ff", "2048",
                "--seq", "128", "--max-len", "128", "--batch", "16", "--repeat", str(max(3, R // 2)))
results["train_bf16"] = {"fp32_ms": bt["cpu"]["median_ms"], "bf16_ms": bt["cpu-bf16"]["median_ms"]}
print(f"\nbf16 training step, d=512, 8 heads, 4 layers, ff=2048, T=128, batch 16: fp32 {bt['cpu']['median_ms']:.0f} ms, "
      f"bf16 {bt['cpu-bf16']['median_ms']:.0f} ms ({bt['cpu']['median_ms'] / bt['cpu-bf16']['median_ms']:.2f}x)")

# Activation checkpointing at T = 512: 6 layers (d=128, 8 heads, ff=512), batch 16, with and without.
ck = {}
for flag in ("", "--checkpoint"):
    args = ["bench", "--train", "--layers", "6", "--dim", "128", "--heads", "8", "--ff", "512", "--seq", "512",
            "--max-len", "512", "--batch", "16", "--repeat", str(max(2, R // 3))]
    ck[flag or "plain"] = cli(*(args + ([flag] if flag else [])))
results["checkpoint"] = {"plain_ms": ck["plain"]["median_ms"], "checkpoint_ms": ck["--checkpoint"]["median_ms"],
                         "plain_peak_mb": ck["plain"]["peak_rss_mb"], "checkpoint_peak_mb": ck["--checkpoint"]["peak_rss_mb"]}
c = results["checkpoint"]
print(f"\nactivation checkpointing, training step d=128, 8 heads, 6 layers, ff=512, T=512, batch 16: "
      f"{c['plain_ms']:.0f} -> {c['checkpoint_ms']:.0f} ms ({c['checkpoint_ms'] / c['plain_ms']:.2f}x), "
      f"peak {c['plain_peak_mb']:.0f} -> {c['checkpoint_peak_mb']:.0f} MB ({c['checkpoint_peak_mb'] / c['plain_peak_mb']:.2f})")

# The analysis methods against a forward pass: 6 layers x 12 heads, d=384 (MiniLM's shape), T = 128.
an = cli("bench", "--analysis", "--repeat", str(max(5, R)))
results["analysis"] = an
print(f"\nanalysis methods, 6 layers x 12 heads, d=384, T=128 (targets: rollout and value-norm <= 1.1 forward "
      f"passes, grad-attention <= 3, head importance <= 2 s): forward {an['forward_ms']:.1f} ms; "
      f"rollout {an['rollout_ms'] / an['forward_ms']:.2f}, value-norm {an['value_norm_ms'] / an['forward_ms']:.2f}, "
      f"grad-attention {an['grad_attention_ms'] / an['forward_ms']:.2f} forward passes; "
      f"head importance {an['head_importance_ms'] / 1000:.2f} s")

long_rows = []
for T in ((2048,) if a.quick else (2048, 4096)):
    for keep in ("all", "0", "none"):
        for mask in ("", "window:64"):
            args = ["bench", "--layers", "2", "--dim", "64", "--heads", "8", "--ff", "128", "--max-len", str(T), "--seq", str(T),
                    "--repeat", str(max(3, R // 3))]
            if keep != "all":
                args += ["--keep-layers", keep]
            if mask:
                args += ["--mask", mask]
            r = cli(*args)
            long_rows.append({"seq": T, "keep": keep, "mask": mask or "full", "ms": r["median_ms"], "peak_rss_mb": r["peak_rss_mb"],
                              "probability_mb": r["probability_mb"], "model_mb": r["model_mb"]})
results["long"] = long_rows
print("\nlong inputs, default-size model (d=64, 8 heads, 2 layers, ff=128)")
print(f"{'T':>6} {'kept layers':>11} {'mask':>10} {'median':>9} {'window speed-up':>15} {'peak MB':>8} {'probs MB':>9} {'peak/(probs+model)':>19}")
for r in long_rows:
    full = next(x for x in long_rows if x["seq"] == r["seq"] and x["keep"] == r["keep"] and x["mask"] == "full")
    r["window_speedup"] = full["ms"] / r["ms"] if r["mask"] != "full" else None
    ratio = r["peak_rss_mb"] / (r["probability_mb"] + r["model_mb"]) if r["probability_mb"] > 0 else float("nan")
    r["peak_ratio"] = ratio
    speedup = f"{r['window_speedup']:.1f}x" if r["window_speedup"] else ""
    print(f"{r['seq']:>6} {r['keep']:>11} {r['mask']:>10} {r['ms']:>7.1f}ms {speedup:>15} {r['peak_rss_mb']:>8.0f} "
          f"{r['probability_mb']:>9.0f} {ratio:>19.2f}")

ocl = []
for T in (128, 512):
    r = cli("bench", "--backend", "opencl", "--seq", str(T), "--repeat", str(max(2, R // 5)))
    ocl.append({"seq": T, "backend": r["backend"], "device": r["device"], "ms": r["median_ms"], "gflops": r["gflops"],
                "transfer_share": r.get("transfer_share"), "notice": r.get("notice", "")})
results["opencl"] = ocl
print("\nopencl backend, d=512, 8 heads, ff=2048, 6 layers")
for r in ocl:
    share = f"transfers {100 * r['transfer_share']:.2f}% of device time" if r["transfer_share"] is not None else r["notice"]
    print(f"  T={r['seq']}: {r['ms']:.1f} ms, {r['gflops']:.1f} GFLOP/s on {r['device']} ({share})")

if os.path.exists(os.path.join(a.minilm, "model.safetensors")) and os.path.exists(a.hf_python):
    hf_rows = []
    for T in (128, 512):
        ours = cli("bench", "--model", a.minilm, "--seq", str(T), "--repeat", str(R))
        r = subprocess.run([a.hf_python, os.path.join(here, "hf_forward.py"), "--model", a.minilm, "--seq", str(T),
                            "--repeat", str(R), "--threads", str(a.threads)], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            sys.exit(f"hf_forward.py failed: {r.stderr}")
        theirs = json.loads(r.stdout.strip().splitlines()[-1])
        hf_rows.append({"seq": T, "attnlab_ms": ours["median_ms"], "transformers_ms": theirs["median_ms"],
                        "speedup": theirs["median_ms"] / ours["median_ms"], "impl": theirs["impl"]})
    results["minilm"] = hf_rows
    print(f"\nall-MiniLM-L6-v2 (6 layers, 12 heads, d=384), every probability kept, vs {hf_rows[0]['impl']}"
          " BertModel (eager, output_attentions=True)")
    for r in hf_rows:
        print(f"  T={r['seq']}: attnlab {r['attnlab_ms']:.1f} ms, transformers {r['transformers_ms']:.1f} ms: "
              f"{r['speedup']:.2f}x")
else:
    print(f"\n(MiniLM rows skipped: no {a.minilm} or no {a.hf_python}; scripts/attnlab.sh get-model minilm makes both)")

if a.gpt2 and os.path.exists(a.hf_python):
    # A GPT-2-small-sized decoder (GPT2Model defaults, random weights), every probability kept,
    # against transformers' GPT2Model (eager, output_attentions=True) run by --hf-python.
    r = subprocess.run([a.hf_python, os.path.join(here, "make_gpt2.py"), a.gpt2], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"make_gpt2.py failed: {r.stderr}")
    dec_rows = []
    for T in (128, 512):
        ours = cli("bench", "--model", a.gpt2, "--seq", str(T), "--repeat", str(R))
        r = subprocess.run([a.hf_python, os.path.join(here, "hf_forward.py"), "--model", a.gpt2, "--seq", str(T),
                            "--repeat", str(R), "--threads", str(a.threads)], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            sys.exit(f"hf_forward.py failed: {r.stderr}")
        theirs = json.loads(r.stdout.strip().splitlines()[-1])
        dec_rows.append({"seq": T, "attnlab_ms": ours["median_ms"], "transformers_ms": theirs["median_ms"],
                         "speedup": theirs["median_ms"] / ours["median_ms"], "gflops": ours["gflops"],
                         "impl": theirs["impl"]})
    results["gpt2_small"] = dec_rows
    print(f"\nGPT-2 small size (12 layers, 12 heads, d=768, random weights, causal), every probability kept, "
          f"vs {dec_rows[0]['impl']} GPT2Model (eager, output_attentions=True)")
    for r in dec_rows:
        print(f"  T={r['seq']}: attnlab {r['attnlab_ms']:.1f} ms ({r['gflops']:.0f} GFLOP/s), "
              f"transformers {r['transformers_ms']:.1f} ms: {r['speedup']:.2f}x")

if a.gpt2 and os.path.exists(a.hf_python):
    # Activation patching, the whole resid_pre sweep at T = 20, and attribution patching.
    lm = a.gpt2.rstrip("/") + "-lm"
    r = subprocess.run([a.hf_python, os.path.join(here, "make_gpt2.py"), lm, "--lm"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"make_gpt2.py --lm failed: {r.stderr}")
    import random
    g = random.Random(20)
    clean = [g.randrange(50257) for _ in range(20)]
    corrupted = list(clean)
    corrupted[10] = (clean[10] + 7) % 50257
    ids = [",".join(map(str, clean)), ",".join(map(str, corrupted))]
    answer, wrong = 464, 1169
    common = ["patch", "--model", lm, "--clean-ids", ids[0], "--corrupted-ids", ids[1], "--answer-id", str(answer),
              "--wrong-id", str(wrong), "--what", "resid_pre"]
    import time as _time
    t0 = _time.perf_counter()
    exact = cli(*common)
    exact_wall = _time.perf_counter() - t0
    attr = [cli(*common, "--method", "attribution")["millis"] for _ in range(max(3, R // 3))]
    r = subprocess.run([a.hf_python, os.path.join(here, "hf_patching.py"), "--model", lm, "--clean", ids[0],
                        "--corrupted", ids[1], "--answer", str(answer), "--wrong", str(wrong), "--repeat",
                        str(max(3, R // 3)), "--threads", str(a.threads)], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"hf_patching.py failed: {r.stderr}")
    theirs = json.loads(r.stdout.strip().splitlines()[-1])
    import statistics
    ours_exact = [exact["values"][l * 20:(l + 1) * 20] for l in range(12)]
    agree = max(abs(x - y) for ro, rt in zip(ours_exact, theirs["exact"]) for x, y in zip(ro, rt))
    results["patching"] = {"exact_s": exact["millis"] / 1000, "exact_wall_s": exact_wall,
                           "pytorch_exact_s": theirs["exact_s"], "speedup": theirs["exact_s"] / exact_wall,
                           "attribution_ms": statistics.median(attr), "pytorch_attribution_ms": theirs["attribution_ms"],
                           "attribution_speedup": theirs["attribution_ms"] / statistics.median(attr),
                           "max_abs_diff_exact": agree, "impl": theirs["impl"]}
    pr = results["patching"]
    print(f"\nactivation patching, resid_pre, GPT-2-small-sized random LM, T=20 (240 patched runs), vs {pr['impl']}")
    print(f"  exact sweep: attnlab {pr['exact_wall_s']:.1f} s as a process ({pr['exact_s']:.1f} s in the engine), "
          f"PyTorch hooks {pr['pytorch_exact_s']:.1f} s: {pr['speedup']:.1f}x (tables agree to {agree:.1e})")
    print(f"  attribution patching: attnlab {pr['attribution_ms']:.0f} ms, PyTorch autograd "
          f"{pr['pytorch_attribution_ms']:.0f} ms: {pr['attribution_speedup']:.2f}x")

with open(a.json, "w") as f:
    json.dump(results, f, indent=2)
print(f"\nJSON: {a.json}")

#!/usr/bin/python3
"""Summarises an `attnlab --perf-log FILE` recording: keystroke-to-result latency and forward
and render times, overall and for inputs of at least --min-tokens tokens (the first result, the
pass over --text, on a line of its own).
usage: perf_log_summary.py FILE [--min-tokens 100]"""
import argparse
import statistics

p = argparse.ArgumentParser()
p.add_argument("file")
p.add_argument("--min-tokens", type=int, default=100)
a = p.parse_args()
rows = [l.rstrip("\n").split("\t") for l in open(a.file)][1:]
fw = [(int(r[1]), float(r[2]), float(r[3])) for r in rows if r[0] == "forward"]
rd = [(int(r[1]), float(r[3])) for r in rows if r[0] == "render"]
# The first result is the pass over --text (a long prompt's whole pass), not a keystroke: said on
# its own line and left out of the keystroke figures (typing into an empty box loses one key of many).
if fw:
    print(f"first result: {fw[0][0]} tokens, forward {fw[0][1]:.1f} ms, {fw[0][2]:.1f} ms to the screen (not counted below)")
    fw, rd = fw[1:], rd[1:]


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))] if v else float("nan")


for label, sel in [("all", lambda t: True), (f">= {a.min_tokens} tokens", lambda t: t >= a.min_tokens)]:
    lat = [x[2] for x in fw if sel(x[0])]
    f = [x[1] for x in fw if sel(x[0])]
    r = [x[1] for x in rd if sel(x[0])]
    if not lat:
        continue
    print(f"{label}: {len(lat)} results; keystroke-to-result p50 {statistics.median(lat):.1f} ms, p95 {pct(lat, .95):.1f} ms, "
          f"max {max(lat):.1f} ms; forward p95 {pct(f, .95):.2f} ms; render p95 {pct(r, .95):.2f} ms")
layer = [float(r[3]) for r in rows if r[0] == "layer"]
if layer:
    print(f"layer switch: {len(layer)} switches; p50 {statistics.median(layer):.1f} ms, p95 {pct(layer, .95):.1f} ms, max {max(layer):.1f} ms")

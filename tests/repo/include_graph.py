#!/usr/bin/python3
"""engine/'s include graph has no cycle: a module is a header and its .cpp (engine/compute/lm.h and
engine/compute/lm.cpp are "lm"), an edge is an #include "engine/..." in either file. A cycle (forward.cpp
including lm.h while lm.cpp included forward.h) means two modules cannot be understood, tested or
moved apart. Usage: include_graph.py REPO_ROOT"""
import os
import re
import sys

root = os.path.join(sys.argv[1], "engine")
edges = {}
for d, _, files in os.walk(root):
    for f in files:
        if not f.endswith((".h", ".cpp")):
            continue
        path = os.path.join(d, f)
        mod = os.path.splitext(os.path.relpath(path, root))[0]
        deps = edges.setdefault(mod, set())
        for line in open(path, encoding="utf-8"):
            m = re.match(r'\s*#include\s+"engine/([^"]+)\.h"', line)
            if m and m.group(1) != mod:
                deps.add(m.group(1))

# depth-first search for a back edge
state, stack, cycles = {}, [], []


def visit(m):
    state[m] = 1
    stack.append(m)
    for n in sorted(edges.get(m, ())):
        if state.get(n) == 1:
            cycles.append(stack[stack.index(n):] + [n])
        elif n not in state:
            visit(n)
    stack.pop()
    state[m] = 2


for m in sorted(edges):
    if m not in state:
        visit(m)
print(f"{len(edges)} engine modules, {sum(len(v) for v in edges.values())} include edges")
for c in cycles:
    print("cycle: " + " -> ".join(c))
if cycles:
    sys.exit(1)
print("no include cycle")

#!/usr/bin/python3
"""The documents say what is there: every relative link in README.md and docs/*.md reaches an
existing file (and, with #anchor, one of its headings), and every file or folder named in
docs/architecture.md's "where to add" table exists. Usage: docs_check.py REPO_ROOT"""
import glob
import os
import re
import sys

root = sys.argv[1]
failures = []


def anchors(path):
    out = set()
    for line in open(path, encoding="utf-8"):
        m = re.match(r"^#+ (.*)", line)
        if m:
            a = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(a)
    return out


docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
links = 0
for doc in docs:
    text = open(doc, encoding="utf-8").read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold commands, not links
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target):
            continue
        links += 1
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
        if not os.path.exists(full):
            failures.append(f"{os.path.relpath(doc, root)}: link to {target}: no such file")
        elif anchor and full.endswith(".md") and anchor not in anchors(full):
            failures.append(f"{os.path.relpath(doc, root)}: link to {target}: no such heading")

arch = open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8").read()
table = arch[arch.index("| to add | where |"):]
table = table[:table.index("\n\n")]
named = 0
for cell in re.findall(r"`([^`]+)`", table):
    # file and folder names: a path with a slash, or a name with a source file's ending
    if "/" in cell or re.search(r"\.(cpp|h|py|cl|md|sh)$", cell):
        named += 1
        candidates = [cell, os.path.join("engine", cell), os.path.join("tests", cell)]
        if not any(os.path.exists(os.path.join(root, c)) for c in candidates):
            failures.append(f"docs/architecture.md's where-to-add table names {cell}: not there")
print(f"{len(docs)} documents, {links} relative links, {named} files and folders in the where-to-add table")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)

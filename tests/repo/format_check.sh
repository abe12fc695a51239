#!/usr/bin/env bash
# The files in tests/repo/format_checked.txt keep the repository's .clang-format look (clang-format 14).
# The list grows: a change that touches a C++ file formats it and adds it here.
# usage: format_check.sh SOURCE_ROOT
set -euo pipefail
cd "$1"
command -v clang-format > /dev/null || { echo "FAIL: clang-format is not installed (scripts/attnlab.sh deps)"; exit 1; }
bad=0
while read -r f; do
  [ -n "$f" ] || continue
  [ -f "$f" ] || { echo "FAIL: $f is listed in tests/repo/format_checked.txt but does not exist"; bad=1; continue; }
  if ! clang-format --dry-run --Werror "$f" > /dev/null 2>&1; then
    echo "FAIL: $f differs from clang-format's output (run: clang-format -i $f)"
    bad=1
  fi
done < tests/repo/format_checked.txt
echo "$(grep -c . tests/repo/format_checked.txt) files checked against .clang-format"
exit $bad

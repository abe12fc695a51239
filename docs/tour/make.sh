#!/usr/bin/env bash
# Retakes the pictures of docs/tour.md: every step of Help > Tour, opened with --tour-step on the
# shipped models (step 9 on the relative-position one beside the default; step 10 patches; the
# training step as it opens, and after 6 epochs).
# usage: docs/tour/make.sh [PATH/TO/attnlab]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
app=${1:-$here/../../build/app/attnlab}
for step in 1 2 3 4 5 6 7 8 9 10 11; do
  extra=()
  [ "$step" = 11 ] && extra=(--tab train)
  xvfb-run -a -s "-screen 0 1920x1200x24" "$app" --no-settings --size 1280x720 --tour-step "$step" "${extra[@]}" \
    --screenshot "$here/step-$step.png"
done
xvfb-run -a -s "-screen 0 1920x1200x24" "$app" --no-settings --size 1280x720 --tour-step 11 --tab train \
  --train-epochs 6 --screenshot "$here/step-11-trained.png"

#!/usr/bin/env bash
# Regenerates docs/decoders/*.png: trains the small GPT-2 (train_tiny_gpt2.py), then screenshots
# the Explore heads and the Logit lens tab at 1280x720.
# usage: docs/decoders/make.sh [PATH/TO/attnlab] [PYTHON]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
app=${1:-$here/../../build/app/attnlab}
py=${2:-$HOME/.cache/attnlab/hf-venv/bin/python}
model=$(mktemp -d)/tiny-gpt2
"$py" "$here/train_tiny_gpt2.py" "$model"
text="The cpu backend runs the forward pass of the model on every token of the input text"
for tab in heads lens; do
  name=$([ "$tab" = heads ] && echo decoder-heads || echo logit-lens)
  xvfb-run -a -s "-screen 0 1920x1200x24" "$app" --no-settings --size 1280x720 --model "$model" \
    --text "$text" --tab "$tab" --screenshot "$here/$name.png"
done

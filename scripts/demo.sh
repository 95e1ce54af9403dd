#!/usr/bin/env bash
# The main job on a default model: stories260K from ../shared when present,
# else a small model written by `qlens synth`. Later issues extend this into
# the whole imatrix -> sensitivity -> plan -> quantize -> compare pipeline.
set -euo pipefail
qlens=${1:-build/qlens}
root=$(cd "$(dirname "$0")/.." && pwd)
shared="$root/../shared"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ -f "$shared/models/stories260K.gguf" ]; then
  model="$shared/models/stories260K.gguf"
  text="$shared/data/tinystories/tinystories_val.txt"
  prompt="Once upon a time"
else
  echo "== ../shared is absent: using a synthetic model (qlens synth --preset tiny)"
  model="$work/synth-tiny.gguf"
  "$qlens" synth --preset tiny -o "$model"
  text="$work/text.txt"
  for i in $(seq 1 400); do echo "the quick brown fox $i jumps over the lazy dog."; done > "$text"
  prompt="the quick"
fi

echo "== qlens inspect $model"
"$qlens" inspect "$model" > "$work/inspect.txt"
head -n 30 "$work/inspect.txt"
echo "   ... (the full table: qlens inspect $model)"
echo
echo "== qlens generate (greedy)"
"$qlens" generate -m "$model" -p "$prompt" -n 48 --temp 0
echo
echo "== qlens perplexity -c 128 -b 128 --chunks 200"
"$qlens" perplexity -m "$model" -f "$text" -c 128 -b 128 --chunks 200 --json "$work/ppl.json"

#!/usr/bin/env bash
# The main job, end to end, on a default model (stories260K from ../shared
# when present, else a small model written by `qlens synth`):
#   imatrix on calibration text -> sensitivity of every tensor -> a plan at a
#   size budget -> quantize with the plan and with the uniform mix of the same
#   size -> compare both with the original on held-out text -> the verdict.
set -euo pipefail
qlens=${1:-build/qlens}
root=$(cd "$(dirname "$0")/.." && pwd)
shared="$root/../shared"
work=${QLENS_DEMO_DIR:-$(mktemp -d)}
mkdir -p "$work"
[ -n "${QLENS_DEMO_DIR:-}" ] || trap 'rm -rf "$work"' EXIT
threads=${QLENS_THREADS:-$(nproc)}

if [ -f "$shared/models/stories260K.gguf" ]; then
  model="$shared/models/stories260K.gguf"
  full_text="$shared/data/tinystories/tinystories_val.txt"
  ctx=128 chunks=400 sens_chunks=4 bpw=7.2
else
  echo "== ../shared is absent: using a synthetic model (qlens synth --preset tiny)"
  model="$work/synth-tiny.gguf"
  "$qlens" synth --preset tiny --type F32 -o "$model"
  full_text="$work/text.txt"
  for i in $(seq 1 3000); do echo "the quick brown fox $i jumps over the lazy dog and runs home."; done > "$full_text"
  ctx=64 chunks=100 sens_chunks=2 bpw=7
fi
# Calibration and held-out halves, split at a line break.
python3 - "$full_text" "$work/calibration.txt" "$work/held-out.txt" <<'PY'
import sys
text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
cut = text.find("\n", len(text) // 2) + 1
open(sys.argv[2], "w", encoding="utf-8").write(text[:cut])
open(sys.argv[3], "w", encoding="utf-8").write(text[cut:])
PY

step() { echo; echo "== $*"; }
step "qlens imatrix: importance of every weight's input columns, on the calibration half"
"$qlens" imatrix -m "$model" -f "$work/calibration.txt" -c "$ctx" -b "$ctx" --chunks "$chunks" -t "$threads" \
  --no-ppl -o "$work/imatrix.gguf"

step "qlens sensitivity: ΔKLD of the output when only one tensor is quantized, per tensor and type"
"$qlens" sensitivity -m "$model" -f "$work/calibration.txt" -c "$ctx" --chunks "$sens_chunks" -t "$threads" \
  --imatrix "$work/imatrix.gguf" --json "$work/sensitivity.json" --top 10

step "qlens plan --target-bpw $bpw --validate: the plan, then the plan against uniform mixes of its size"
"$qlens" plan --sensitivity "$work/sensitivity.json" --target-bpw "$bpw" -o "$work/plan.txt" \
  --validate -f "$work/held-out.txt" -c "$ctx" --chunks "$chunks" --imatrix "$work/imatrix.gguf" -t "$threads" \
  --work-dir "$work" | sed -n '/^size:/,$p'

step "qlens compare: where the plan's model deviates from the original (held-out text)"
"$qlens" compare --ref "$model" -m "$work/validate-plan.gguf" -f "$work/held-out.txt" -c "$ctx" --chunks 20 \
  -t "$threads" --top 5 | sed -n '/Where the error grows/,$p'
echo
echo "(files of this run: $work; set QLENS_DEMO_DIR to keep them)"

#!/usr/bin/env bash
# The main job, end to end, on a default model: Gemma 3 270M's F32 reference
# (scripts/fetch-gemma3.sh installs it; QLENS_DEMO_MODEL=stories picks the
# small one), else stories260K from ../shared, else a small model written by
# `qlens synth`:
#   imatrix on calibration text -> sensitivity of every tensor -> a plan at a
#   size budget -> quantize with the plan and with the uniform mix of the same
#   size -> compare both with the original on held-out text -> the verdict ->
#   one HTML report of it all (qlens report).
# The files go to $QLENS_DEMO_DIR when set (kept), else to a temporary folder
# removed at exit; the report then survives as $QLENS_CACHE/demo-report.html
# (~/.cache/qlens, beside the models), never in the current directory.
set -euo pipefail
qlens=${1:-build/qlens}
root=$(cd "$(dirname "$0")/.." && pwd)
shared="$root/../shared"
work=${QLENS_DEMO_DIR:-$(mktemp -d)}
mkdir -p "$work"
[ -n "${QLENS_DEMO_DIR:-}" ] || trap 'rm -rf "$work"' EXIT
threads=${QLENS_THREADS:-$(nproc)}

cache="${QLENS_CACHE:-$HOME/.cache/qlens}"
gemma="$cache/gemma-3-270m-f32.gguf"
wiki="$shared/data/wikitext-2-raw/wiki.test.raw"
if [ -f "$gemma" ] && [ -f "$wiki" ] && [ "${QLENS_DEMO_MODEL:-gemma3}" = gemma3 ]; then
  # Sized for about 10 minutes on 2 cores: a 262,144-token output matrix
  # makes every pass cost; sensitivity in noise mode (one pass per tensor,
  # types predicted from the fit) on 2 chunks of 128, the budget at 4.5 bits
  # per weight (about llama.cpp's Q3_K_M of this model).
  echo "== Gemma 3 270M, F32 reference of the published Q4_K_M ($gemma)"
  echo "   imatrix 6 x 512 tokens, sensitivity --mode noise 2 x 128 (7 types), plan at 4.5 bpw, validation 2 x 512"
  model="$gemma"
  full_text="$wiki"
  ctx=512 chunks=6 sens_ctx=128 sens_chunks=2 sens_mode=noise bpw=4.5 val_chunks=2
  sens_types=Q3_K,Q4_K,Q5_K,Q6_K,IQ4_NL,Q5_0,Q8_0
elif [ -f "$shared/models/stories260K.gguf" ]; then
  model="$shared/models/stories260K.gguf"
  full_text="$shared/data/tinystories/tinystories_val.txt"
  echo "== stories260K ($model)"
  ctx=128 chunks=400 sens_ctx=128 sens_chunks=4 sens_mode=quant bpw=7.2 val_chunks=400
else
  echo "== ../shared is absent: using a synthetic model (qlens synth --preset tiny)"
  model="$work/synth-tiny.gguf"
  "$qlens" synth --preset tiny --type F32 -o "$model"
  full_text="$work/text.txt"
  for i in $(seq 1 3000); do echo "the quick brown fox $i jumps over the lazy dog and runs home."; done > "$full_text"
  ctx=64 chunks=100 sens_ctx=64 sens_chunks=2 sens_mode=quant bpw=7 val_chunks=100
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

"$qlens" imatrix --in-file "$work/imatrix.gguf" --show-statistics --json "$work/imatrix-stats.json" \
  > "$work/imatrix-stats.txt"

step "qlens sensitivity: ΔKLD of the output when only one tensor is quantized, per tensor and type"
"$qlens" sensitivity -m "$model" -f "$work/calibration.txt" -c "$sens_ctx" -b "$sens_ctx" --chunks "$sens_chunks" \
  --mode "$sens_mode" ${sens_types:+--types "$sens_types"} -t "$threads" \
  --imatrix "$work/imatrix.gguf" --json "$work/sensitivity.json" --top 10

step "qlens plan --target-bpw $bpw --validate: the plan, then the plan against uniform mixes of its size"
"$qlens" plan --sensitivity "$work/sensitivity.json" --target-bpw "$bpw" -o "$work/plan.txt" \
  --json "$work/plan.json" --validate -f "$work/held-out.txt" -c "$ctx" --chunks "$val_chunks" \
  --imatrix "$work/imatrix.gguf" -t "$threads" --work-dir "$work" | sed -n '/^size:/,$p'

step "qlens compare: where the plan's model deviates from the original (held-out text)"
"$qlens" compare --ref "$model" -m "$work/validate-plan.gguf" -f "$work/held-out.txt" -c "$ctx" \
  --chunks "$(( val_chunks < 20 ? val_chunks : 20 ))" \
  -t "$threads" --top 5 --json "$work/compare.json" | sed -n '/Where the error grows/,$p'

step "qlens report: the run as one HTML page (charts of every step above)"
"$qlens" report --compare "$work/compare.json" --sensitivity "$work/sensitivity.json" --plan "$work/plan.json" \
  --imatrix-stats "$work/imatrix-stats.json" -o "$work/report.html"
report="$work/report.html"
if [ -z "${QLENS_DEMO_DIR:-}" ]; then
  # The folder goes at exit: keep the page beside the models.
  mkdir -p "$cache"
  cp "$work/report.html" "$cache/demo-report.html"
  report="$cache/demo-report.html"
  echo
  echo "(files of this run: $work, removed at exit; set QLENS_DEMO_DIR to keep them)"
else
  echo
  echo "(files of this run: $work)"
fi
echo "report: $report"
echo "        open file://$report in a browser (it loads nothing from the network)"

#!/bin/bash
# Makes the llama.cpp reference outputs of one tiny synthetic model in
# tests/data (tests/data/README.md says which models, seeds and llama.cpp
# build): the model from qlens synth, then llama.cpp's log-probabilities,
# node dump, greedy text and importance matrix, every run with flash
# attention off and an F32 cache; with a mix name, also the file
# llama-quantize writes in that mix and llama.cpp's perplexity and greedy
# text of it.
#
#   make_arch_reference.sh QLENS LLAMA_BIN TEXT PRESET SEED NAME [MIX SUFFIX]
#   e.g. make_arch_reference.sh build/qlens /tmp/lcp-build/bin ts.txt gpt-oss-tiny 1 gpt-oss-tiny MXFP4_MOE mxfp4
#
# TEXT: the first 200,000 bytes of ../shared/data/tinystories/tinystories_val.txt.
# TYPE (environment): the matrices' type, F32 (default) or F16.
#
# On a busy machine llama.cpp 0c1e570's tools sometimes stop part-way with
# exit status 0 (seen with 2 cores and other work running); each run is
# repeated until its log shows it finished.
set -eu
Q=$1 B=$2 TEXT=$3 PRESET=$4 SEED=$5 NAME=$6
MIX=${7:-} SUFFIX=${8:-}
D=$(dirname "$0")
# The model itself is not kept: the tests make it again with qlens synth
# (tests/test_util.cpp, arch_reference_model, which checks its hash).
M=$(mktemp --suffix=.gguf)
R="-t 2 -fa off -ctk f32 -ctv f32"
PROMPT="Once upon a time"
LOG=$(mktemp)
OUT=$(mktemp)
trap 'rm -f "$LOG" "$OUT" "$M"' EXIT

# until_done PATTERN COMMAND...: runs COMMAND (stdout to $OUT, stderr to
# $LOG) until $OUT or $LOG holds PATTERN, at most 8 times.
until_done() {
  local pattern=$1
  shift
  for _ in 1 2 3 4 5 6 7 8; do
    "$@" > "$OUT" 2> "$LOG" < /dev/null || true
    if grep -q "$pattern" "$OUT" "$LOG"; then return 0; fi
  done
  echo "$*: did not finish" >&2
  exit 1
}

"$Q" synth --preset "$PRESET" --type "${TYPE:-F32}" --seed "$SEED" -o "$M"
until_done "Final estimate" "$B/llama-perplexity" -m "$M" -f "$TEXT" -c 128 --chunks 4 $R \
  --kl-divergence-base "$D/$NAME.kld"
# The node dump from its first node on (the load log before it cut off).
# On glm4moe-tiny llama-eval-callback stops at the last layer's shared
# expert every time: the longest of 8 dumps is kept.
DUMP=$(mktemp)
rm -f "$D/$NAME.eval-callback.txt"  # an earlier model's dump is not kept
for _ in 1 2 3 4 5 6 7 8; do
  "$B/llama-eval-callback" -m "$M" -p "$PROMPT" $R -lv 4 > "$OUT" 2> "$LOG" < /dev/null || true
  awk 'f||/common_debug_cb_eval/{f=1; print}' "$OUT" "$LOG" | grep -v "^[0-9.]* I \(llama_perf\|common_perf\)" > "$DUMP"
  kept=0
  [ -f "$D/$NAME.eval-callback.txt" ] && kept=$(wc -l < "$D/$NAME.eval-callback.txt")
  [ "$(wc -l < "$DUMP")" -gt "$kept" ] && cat "$DUMP" > "$D/$NAME.eval-callback.txt"
  grep -q "result_output = " "$DUMP" && break
done
rm -f "$DUMP"
until_done "common_perf_print: *total time" "$B/llama-completion" -m "$M" -p "$PROMPT" -n 24 --temp 0 -no-cnv $R
cat "$OUT" > "$D/$NAME.greedy.txt"
until_done "Final estimate" "$B/llama-imatrix" -m "$M" -f "$TEXT" -o "$D/$NAME.imatrix.gguf" -c 128 --chunks 4 $R
if [ -n "$MIX" ]; then
  QM=$D/$NAME.$SUFFIX.gguf
  "$B/llama-quantize" "$M" "$QM" "$MIX" 2 > /dev/null 2>&1
  until_done "Maximum KLD" "$B/llama-perplexity" -m "$QM" -f "$TEXT" -c 128 --chunks 4 $R \
    --kl-divergence-base "$D/$NAME.kld" --kl-divergence
  grep -v "^$" "$OUT" | sed -n '/Mean PPL(Q)/,$p' > "$D/$NAME.$SUFFIX.kld.log"
  until_done "common_perf_print: *total time" "$B/llama-completion" -m "$QM" -p "$PROMPT" -n 24 --temp 0 -no-cnv $R
  cat "$OUT" > "$D/$NAME.$SUFFIX.greedy.txt"
fi
# The hash the tests check the model they make against (FNV-1a, 64 bits).
python3 -c 'import sys
h = 0xcbf29ce484222325
for b in open(sys.argv[1], "rb").read(): h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
print("%s: seed %s, fnv1a 0x%016x (tests/test_util.cpp)" % (sys.argv[2], sys.argv[3], h))' "$M" "$NAME" "$SEED"

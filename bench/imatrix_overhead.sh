#!/usr/bin/env bash
# The cost of collecting an importance matrix: qlens imatrix (taps, and the
# host-callback path) against qlens perplexity on the same model, text,
# context, batch, threads and KV cache type (F32: imatrix's default).
# Runs alternate, REPEATS times; medians printed.
#
#   bench/imatrix_overhead.sh QLENS MODEL TEXT CTX CHUNKS [THREADS] [REPEATS] [DEVICE]
set -euo pipefail
qlens=$1 model=$2 text=$3 ctx=$4 chunks=$5 threads=${6:-2} repeats=${7:-3} device=${8:-cpu}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(-m "$model" -f "$text" -c "$ctx" -b "$ctx" -t "$threads" --chunks "$chunks" --device "$device" -ctk f32)
rate() { grep -o '[0-9.]* tokens/s' | tail -1 | cut -d' ' -f1; }
ppl=() taps=() callback=()
for _ in $(seq "$repeats"); do
  ppl+=("$("$qlens" perplexity "${common[@]}" 2>&1 >/dev/null | rate)")
  taps+=("$("$qlens" imatrix "${common[@]}" -o "$out/t.gguf" --output-frequency 0 2>&1 >/dev/null | rate)")
  callback+=("$("$qlens" imatrix "${common[@]}" -o "$out/c.gguf" --output-frequency 0 --collect callback 2>&1 >/dev/null | rate)")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
p=$(median "${ppl[@]}") t=$(median "${taps[@]}") c=$(median "${callback[@]}")
echo "model $(basename "$model") on $device, -c $ctx -b $ctx -t $threads, $chunks chunks, median of $repeats"
awk -v p="$p" -v t="$t" -v c="$c" 'BEGIN {
  printf "  perplexity          %8.0f tokens/s\n", p
  printf "  imatrix (taps)      %8.0f tokens/s   overhead %+.1f%%\n", t, (p / t - 1) * 100
  printf "  imatrix (callback)  %8.0f tokens/s   overhead %+.1f%%\n", c, (p / c - 1) * 100
}'

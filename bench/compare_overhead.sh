#!/usr/bin/env bash
# The cost of qlens compare against the two perplexity runs it replaces: the
# reference and the test model each through `qlens perplexity`, and both at
# once through `qlens compare` (every node's statistics and errors, and KL
# divergence). Wall times, median of REPEATS runs.
#
#   bench/compare_overhead.sh QLENS REF TEST TEXT CTX CHUNKS [THREADS] [REPEATS]
set -euo pipefail
qlens=$1 ref=$2 test=$3 text=$4 ctx=$5 chunks=$6 threads=${7:-2} repeats=${8:-3}
common=(-f "$text" -c "$ctx" -b "$ctx" -t "$threads" --chunks "$chunks")
seconds() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
pr=() pt=() cmp=()
for _ in $(seq "$repeats"); do
  pr+=("$(seconds "$qlens" perplexity -m "$ref" "${common[@]}")")
  pt+=("$(seconds "$qlens" perplexity -m "$test" "${common[@]}")")
  cmp+=("$(seconds "$qlens" compare --ref "$ref" -m "$test" "${common[@]}" --top 0)")
done
a=$(median "${pr[@]}") b=$(median "${pt[@]}") c=$(median "${cmp[@]}")
echo "ref $(basename "$ref"), test $(basename "$test"), -c $ctx -t $threads, $chunks chunks, median of $repeats"
awk -v a="$a" -v b="$b" -v c="$c" 'BEGIN {
  printf "  perplexity ref   %7.2f s\n  perplexity test  %7.2f s\n  compare          %7.2f s   = %.2f x (ref + test)\n", a, b, c, c / (a + b)
}'

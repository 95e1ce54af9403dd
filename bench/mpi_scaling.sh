#!/usr/bin/env bash
# Wall time of imatrix, sensitivity and a --split-layers perplexity on 1, 2
# and 3 MPI ranks of this machine (docs/PERFORMANCE.md, "Across processes").
# Oversubscribed ranks share the machine's cores, so the figures show what
# the distribution costs (loads, the reference pass every sensitivity rank
# makes, the gathers, the activations handed on), not a speed-up.
#
#   bench/mpi_scaling.sh QLENS MODEL TEXT [CHUNKS] [THREADS_PER_RANK]
set -euo pipefail
qlens=${1:?usage: bench/mpi_scaling.sh QLENS MODEL TEXT [CHUNKS] [THREADS_PER_RANK]}
model=${2:?model}
text=${3:?text}
chunks=${4:-6}
threads=${5:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Runs "$@" on N ranks (1: plainly) and prints the wall seconds and each
# rank's peak resident memory.
timed() {
  local n=$1
  shift
  local launch=()
  [ "$n" -gt 1 ] && launch=(mpirun --oversubscribe -np "$n")
  local t0 t1
  t0=$(date +%s.%N)
  "${launch[@]}" /usr/bin/time -f "rss %M" "$@" > "$out/log" 2>&1 || { cat "$out/log"; exit 1; }
  t1=$(date +%s.%N)
  printf '%6.2f s   peak RSS per rank: %s MB\n' "$(echo "$t1 - $t0" | bc)" \
    "$(grep -o 'rss [0-9]*' "$out/log" | awk '{printf "%s%d", sep, $2/1024; sep=", "}')"
}

echo "model $model, $chunks chunks of 512, $threads thread(s) per rank, $(nproc) cores"
for n in 1 2 3; do
  printf 'imatrix (chunks per rank), %d rank(s):      ' "$n"
  timed "$n" "$qlens" imatrix -m "$model" -f "$text" -c 512 --chunks "$chunks" -t "$threads" -o "$out/im$n.gguf"
  cmp -s "$out/im$n.gguf" "$out/im1.gguf" || { echo "imatrix on $n ranks differs from one process"; exit 1; }
done
for n in 2 3; do
  printf 'imatrix --split-layers, %d ranks:           ' "$n"
  timed "$n" "$qlens" imatrix -m "$model" -f "$text" -c 512 --chunks "$chunks" -t "$threads" --split-layers \
    -o "$out/sl$n.gguf"
  cmp -s "$out/sl$n.gguf" "$out/im1.gguf" || { echo "imatrix --split-layers on $n ranks differs"; exit 1; }
done
printf 'perplexity, 1 rank:                         '
timed 1 "$qlens" perplexity -m "$model" -f "$text" -c 512 --chunks "$chunks" -t "$threads"
for n in 2 3; do
  printf 'perplexity --split-layers, %d ranks:        ' "$n"
  timed "$n" "$qlens" perplexity -m "$model" -f "$text" -c 512 --chunks "$chunks" -t "$threads" --split-layers
done
for n in 1 2 3; do
  printf 'sensitivity (noise, Q4_0/Q8_0), %d rank(s): ' "$n"
  timed "$n" "$qlens" sensitivity -m "$model" -f "$text" -c 512 --chunks 2 -t "$threads" --mode noise \
    --imatrix "$out/im1.gguf" --types Q4_0,Q8_0 --json "$out/s$n.json"
  cmp -s "$out/s$n.json" "$out/s1.json" || { echo "sensitivity on $n ranks differs from one process"; exit 1; }
done

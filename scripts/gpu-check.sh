#!/usr/bin/env bash
# On a machine with a real GPU: the Vulkan backend's tests and benchmarks,
# and one summary at the end. Builds (or uses BUILD if it holds a build), then
#   1. lists the devices;
#   2. runs the op-by-op backend tests and the stories260K model tests;
#   3. benchmarks the 1.1b synth model (F16, Q8_0, Q4_0, Q4_K_M) on the GPU,
#      with the weight bandwidth generation reaches;
#   4. measures imatrix overhead against perplexity on the GPU.
# The device tool's README says how to bring the Vulkan loader to a lent
# machine (unpack libvulkan1 into /, ldconfig, VK_DRIVER_FILES for NVIDIA).
#
#   scripts/gpu-check.sh [BUILD] [DEVICE]      (defaults: build-gpu, vulkan:0)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-gpu}
device=${2:-vulkan:0}
out=${OUT:-$(mktemp -d)}
summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

if [ ! -x "$build/qlens" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DQLENS_BUILD_BENCH=OFF >/dev/null &&
    cmake --build "$build" -j"$(nproc)" >/dev/null || { note "BUILD FAILED"; exit 1; }
fi
qlens=$build/qlens
note "== devices"
"$qlens" devices | tee -a "$summary"

note "== backend tests"
for t in test_vulkan test_vulkan_taps test_vulkan_errors test_vulkan_model; do
  if "$build/tests/$t" >"$out/$t.log" 2>&1; then
    note "$t: $(grep -E '^\[  PASSED  \]' "$out/$t.log")"
  else
    note "$t: FAILED (see $out/$t.log)"; grep -E 'FAILED|Failure' "$out/$t.log" | head -5 | tee -a "$summary"
  fi
  grep -E 'NMSE|KLD' "$out/$t.log" | tee -a "$summary"
done

note "== 1.1b synth model on $device (pp512, tg128)"
models=$out/models
mkdir -p "$models"
"$qlens" synth --preset 1.1b -o "$models/f16.gguf" >/dev/null 2>&1
for type in Q8_0 Q4_0 Q4_K_M; do
  "$qlens" quantize "$models/f16.gguf" "$models/$type.gguf" "$type" >/dev/null 2>&1
done
# Generation reads every weight once per token: file size x tg t/s is the
# bandwidth it reaches (compare with the GPU's, e.g. 4.8 TB/s for an H200).
for m in f16 Q8_0 Q4_0 Q4_K_M; do
  "$qlens" bench -m "$models/$m.gguf" --device "$device" -p 512 -n 128 -r 3 2>&1 | grep -E '^\|' | tail -2 |
    sed "s/^/$m /" | tee "$out/bench_$m.txt" | tee -a "$summary"
  tg=$(grep -E '\| tg128 \|' "$out/bench_$m.txt" | awk -F'|' '{print $7}' | awk '{print $1}')
  bytes=$(stat -c %s "$models/$m.gguf")
  [ -n "$tg" ] && note "$m generation: $(awk -v b="$bytes" -v t="$tg" 'BEGIN { printf "%.0f GB/s of weights read", b * t / 1e9 }')"
done
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv | tee -a "$summary"

note "== imatrix overhead against perplexity on $device"
if [ -f "$root/../shared/models/stories260K.gguf" ]; then
  "$root/bench/imatrix_overhead.sh" "$qlens" "$root/../shared/models/stories260K.gguf" \
    "$root/../shared/data/tinystories/tinystories_val.txt" 128 400 4 3 "$device" 2>&1 | tee -a "$summary" || true
fi
echo
echo "======== summary ($summary)"
cat "$summary"

#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz/ (docs/ROBUSTNESS.md).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# Configures and builds build-fuzz with clang (QLENS_FUZZ=ON: ASan, UBSan,
# coverage) when needed, then runs each target (all of them by default, one
# after the other, under nice) for SECONDS_PER_TARGET seconds (default 60) on
# its seed corpus (tests/fuzz/corpus/<target>/) and its regression inputs
# (tests/fuzz/regressions/<target>/). New inputs go to a scratch folder, so
# the repository's corpus does not grow; crashes, leaks, timeouts and
# out-of-memory inputs are kept in build-fuzz/artifacts/. Prints executions
# and coverage per target and exits non-zero when any target failed.
#
# Environment: QLENS_FUZZ_BUILD (build folder, default build-fuzz), JOBS
# (parallel compile jobs, default 2), QLENS_FUZZ_KEEP_CORPUS=DIR (keep each
# target's new inputs in DIR/<target> instead of discarding them),
# QLENS_FUZZ_TIMEOUT (seconds one input may take before it counts as a hang,
# default 10; long campaigns that pause the fuzzer with SIGSTOP while
# something else is measured raise it, since libFuzzer times a unit by the
# wall clock).
set -euo pipefail
cd "$(dirname "$0")/.."

ALL_TARGETS=(gguf imatrix_gguf imatrix_dat tensor_types json tokenizers dequant)
SECONDS_PER_TARGET=${1:-60}
[ $# -gt 0 ] && shift
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=("${ALL_TARGETS[@]}")
BUILD=${QLENS_FUZZ_BUILD:-build-fuzz}
JOBS=${JOBS:-2}

if ! [[ "$SECONDS_PER_TARGET" =~ ^[0-9]+$ ]] || [ "$SECONDS_PER_TARGET" -lt 1 ]; then
  echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   (targets: ${ALL_TARGETS[*]})" >&2
  exit 2
fi
for t in "${TARGETS[@]}"; do
  [ -f "tests/fuzz/fuzz_$t.cpp" ] || { echo "fuzz.sh: unknown target '$t' (targets: ${ALL_TARGETS[*]})" >&2; exit 2; }
done

# Inputs longer than this are not generated: the seeds are a few KB, and the
# parsers' size checks do not need more to be reached.
max_len() {
  case "$1" in
    gguf|imatrix_gguf) echo 16384 ;;
    json) echo 8192 ;;
    tokenizers|tensor_types|imatrix_dat) echo 4096 ;;
    dequant) echo 2048 ;;
    *) echo 4096 ;;
  esac
}

# Dictionaries: GGUF keys, value and tensor type ids (both GGUF targets);
# JSON tokens and the keys of qlens's files.
dict_of() {
  case "$1" in
    gguf|imatrix_gguf) echo tests/fuzz/gguf.dict ;;
    json) echo tests/fuzz/json.dict ;;
    *) echo "" ;;
  esac
}

start=$(date +%s)
if ! grep -q '^QLENS_FUZZ:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only" \
    -DQLENS_FUZZ=ON -DQLENS_BUILD_TESTS=OFF -DQLENS_BUILD_BENCH=OFF -DQLENS_VULKAN=OFF -DQLENS_MPI=OFF >/dev/null
fi
build_targets=()
for t in "${TARGETS[@]}"; do build_targets+=("fuzz_$t"); done
nice -n 19 cmake --build "$BUILD" -j"$JOBS" --target "${build_targets[@]}"
echo "fuzz.sh: build took $(( $(date +%s) - start )) s"

artifacts="$BUILD/artifacts"
logs="$BUILD/logs"
mkdir -p "$artifacts" "$logs"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# libFuzzer reports leaks, sanitizer findings, timeouts and OOMs as crashes.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=()
summary=()
for t in "${TARGETS[@]}"; do
  out="$scratch/$t"
  [ -n "${QLENS_FUZZ_KEEP_CORPUS:-}" ] && out="$QLENS_FUZZ_KEEP_CORPUS/$t"
  mkdir -p "$out"
  args=(-max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -timeout="${QLENS_FUZZ_TIMEOUT:-10}" -max_len="$(max_len "$t")"
        -print_final_stats=1 -artifact_prefix="$artifacts/$t-")
  dict=$(dict_of "$t")
  [ -n "$dict" ] && args+=(-dict="$dict")
  dirs=("$out" "tests/fuzz/corpus/$t")
  [ -d "tests/fuzz/regressions/$t" ] && dirs+=("tests/fuzz/regressions/$t")
  # The real models of ../shared (never copied into the repository): their
  # first bytes (header, metadata, tensor infos) as seeds, cut here.
  if [ "$t" = gguf ] && [ -d ../shared/models ]; then
    mkdir -p "$scratch/shared-seeds"
    for model in ../shared/models/*.gguf; do
      [ -f "$model" ] && head -c "$(max_len gguf)" "$model" >"$scratch/shared-seeds/$(basename "$model")"
    done
    dirs+=("$scratch/shared-seeds")
  fi
  log="$logs/$t.log"
  echo "== $t: ${SECONDS_PER_TARGET} s"
  rc=0
  nice -n 19 "$BUILD/tests/fuzz/fuzz_$t" "${args[@]}" "${dirs[@]}" >"$log" 2>&1 &
  pid=$!
  wait "$pid" || rc=$?
  # A crashed target leaves its scratch files behind (tests/fuzz/fuzz_util.h).
  rm -f /dev/shm/qlens-fuzz-"$pid".* "${TMPDIR:-/tmp}"/qlens-fuzz-"$pid".*
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  final=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$final")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$final")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$final")
  line=$(printf '%-13s %12s execs  cov %6s  ft %7s  corpus %s' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}")
  if [ "$rc" -ne 0 ]; then
    failed+=("$t")
    line+="  FAILED (exit $rc; log $log)"
    grep -E 'ERROR: |runtime error|SUMMARY|Test unit written|==[0-9]+==' "$log" | head -20 || true
  fi
  echo "$line"
  summary+=("$line")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$SECONDS_PER_TARGET" "${execs:-?}" "${cov:-?}" \
    "${ft:-?}" "$rc" >>"$BUILD/fuzz-history.tsv"
done

echo
echo "fuzz.sh: ${#TARGETS[@]} targets, ${SECONDS_PER_TARGET} s each, $(( $(date +%s) - start )) s in all (build included)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: FAILED: ${failed[*]} (inputs in $artifacts/, logs in $logs/)" >&2
  exit 1
fi

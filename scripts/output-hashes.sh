#!/usr/bin/env bash
# Hashes of the outputs of a fixed list of runs: the check that a change of
# the engine's design leaves every result bit for bit as it was. Run it with
# the binary before and after the change and diff the two lists:
#
#   scripts/output-hashes.sh OLD_QLENS > before.txt
#   scripts/output-hashes.sh build/qlens > after.txt
#   diff before.txt after.txt
#
# The runs: stories260K (F32, ../shared), the synth llama3, qwen3moe and
# gemma3 models (../shared/reference/synth) and, when installed, Gemma 3 270M
# Q4_K_M (~/.cache/qlens): perplexity, llama.cpp's log-probability file (every
# logit's bits), imatrix (GGUF and .dat), quantize (with and without the
# imatrix), compare (the per-node CSV: every node's statistics), greedy text
# and a short sensitivity table. JSON is hashed with its timing fields left
# out; text outputs with their timing lines left out.
#
# Environment: SHARED (default ../shared next to the repository), QLENS_CACHE
# (default ~/.cache/qlens), THREADS (default 2). The outputs go to one fixed
# folder, OUT (default /tmp/qlens-output-hashes), emptied first: quantized
# files and JSON record the paths of their inputs.
set -euo pipefail
qlens=$(realpath "${1:?usage: output-hashes.sh QLENS}")
repo=$(cd "$(dirname "$0")/.." && pwd)
shared=${SHARED:-$repo/../shared}
cache=${QLENS_CACHE:-$HOME/.cache/qlens}
threads=${THREADS:-2}
out=${OUT:-/tmp/qlens-output-hashes}
rm -rf "$out"
mkdir -p "$out"
[ -d "$shared/models" ] || { echo "output-hashes: $shared/models not found (set SHARED)" >&2; exit 1; }

# JSON without the fields that measure time or name the machine.
json_hash() {
  python3 - "$1" <<'EOF'
import hashlib, json, re, sys
volatile = re.compile(r"(time|seconds|_s$|_ms$|per_second|tokens_s|rate|date|host|elapsed|eta|threads|version|build|cpu|device_name)", re.I)
def clean(v):
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items() if not volatile.search(k)}
    if isinstance(v, list):
        return [clean(x) for x in v]
    return v
with open(sys.argv[1]) as f:
    data = clean(json.load(f))
print(hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest())
EOF
}
file_hash() { sha256sum "$1" | cut -d' ' -f1; }
# Text without the lines that report speed or time.
text_hash() { grep -viE 'tokens/s|seconds|[0-9] ?ms|t/s|eta|elapsed|time' "$1" | sha256sum | cut -d' ' -f1; }
emit() { printf '%-44s %s\n' "$1" "$2"; }

run() {  # run NAME COMMAND...: stdout to $out/NAME.out, failures reported as such
  local name=$1
  shift
  if ! "$@" >"$out/$name.out" 2>"$out/$name.err"; then
    emit "$name" "FAILED ($(tail -1 "$out/$name.err"))"
    return 1
  fi
}

one_model() {  # one_model TAG MODEL TEXT CTX CHUNKS QTYPE
  local tag=$1 model=$2 text=$3 ctx=$4 chunks=$5 qtype=$6
  local common=(-f "$text" -c "$ctx" -b "$ctx" --chunks "$chunks" -t "$threads")
  if run "$tag.perplexity" "$qlens" perplexity -m "$model" "${common[@]}" --json "$out/$tag.ppl.json" \
       --kl-divergence-base "$out/$tag.kld"; then
    emit "$tag.perplexity.json" "$(json_hash "$out/$tag.ppl.json")"
    emit "$tag.kld-base" "$(file_hash "$out/$tag.kld")"
  fi
  if run "$tag.imatrix" "$qlens" imatrix -m "$model" "${common[@]}" -o "$out/$tag.imatrix.gguf"; then
    emit "$tag.imatrix.gguf" "$(file_hash "$out/$tag.imatrix.gguf")"
  fi
  if run "$tag.imatrix-dat" "$qlens" imatrix -m "$model" "${common[@]}" -o "$out/$tag.imatrix.dat"; then
    emit "$tag.imatrix.dat" "$(file_hash "$out/$tag.imatrix.dat")"
  fi
  if run "$tag.quantize" "$qlens" quantize --allow-requantize -t "$threads" "$model" "$out/$tag.q.gguf" "$qtype"; then
    emit "$tag.quantize.$qtype" "$(file_hash "$out/$tag.q.gguf")"
  fi
  if [ -f "$out/$tag.imatrix.gguf" ] &&
     run "$tag.quantize-imatrix" "$qlens" quantize --allow-requantize -t "$threads" --imatrix "$out/$tag.imatrix.gguf" \
       "$model" "$out/$tag.qi.gguf" "$qtype"; then
    emit "$tag.quantize-imatrix.$qtype" "$(file_hash "$out/$tag.qi.gguf")"
  fi
  if [ -f "$out/$tag.qi.gguf" ] &&
     run "$tag.compare" "$qlens" compare --ref "$model" -m "$out/$tag.qi.gguf" "${common[@]}" \
       --csv "$out/$tag.compare.csv" --json "$out/$tag.compare.json"; then
    emit "$tag.compare.csv" "$(file_hash "$out/$tag.compare.csv")"
    emit "$tag.compare.json" "$(json_hash "$out/$tag.compare.json")"
  fi
  if [ -f "$out/$tag.kld" ] && [ -f "$out/$tag.qi.gguf" ] &&
     run "$tag.kld-score" "$qlens" perplexity -m "$out/$tag.qi.gguf" --kl-divergence-base "$out/$tag.kld" \
       --kl-divergence -t "$threads"; then
    emit "$tag.kld-score" "$(text_hash "$out/$tag.kld-score.out")"
  fi
  if run "$tag.generate" "$qlens" generate -m "$model" -p "Once upon a time" -n 24 --temp 0 --no-stats -t "$threads"; then
    emit "$tag.generate" "$(file_hash "$out/$tag.generate.out")"
  fi
}

sensitivity() {  # sensitivity TAG MODEL TEXT CTX TENSORS
  local tag=$1 model=$2 text=$3 ctx=$4 tensors=$5
  if run "$tag.sensitivity" "$qlens" sensitivity -m "$model" -f "$text" -c "$ctx" -b "$ctx" --chunks 2 \
       --types Q4_0,Q4_K,IQ4_XS --tensors "$tensors" -t "$threads" --json "$out/$tag.sens.json"; then
    emit "$tag.sensitivity.json" "$(json_hash "$out/$tag.sens.json")"
  fi
}

stories_text="$shared/data/tinystories/tinystories_val.txt"
wiki_text="$shared/data/wikitext-2-raw/wiki.test.raw"
one_model stories "$shared/models/stories260K.gguf" "$stories_text" 128 4 Q4_K_M
sensitivity stories "$shared/models/stories260K.gguf" "$stories_text" 128 'blk\.[0-4]\.(attn_q|ffn_down)'
for arch in llama3 qwen3moe gemma3; do
  one_model "synth-$arch" "$shared/reference/synth/$arch.f16.gguf" "$wiki_text" 128 2 Q4_K_M
done
sensitivity synth-qwen3moe "$shared/reference/synth/qwen3moe.f16.gguf" "$wiki_text" 128 'blk\.[01]\.'
if [ -f "$cache/gemma-3-270m-q4_k_m.gguf" ]; then
  one_model gemma3-270m "$cache/gemma-3-270m-q4_k_m.gguf" "$wiki_text" 256 2 Q4_K_M
  sensitivity gemma3-270m "$cache/gemma-3-270m-f32.gguf" "$wiki_text" 256 'blk\.(0|17)\.attn_v'
else
  echo "output-hashes: Gemma 3 270M not in $cache (scripts/fetch-gemma3.sh): its runs left out" >&2
fi

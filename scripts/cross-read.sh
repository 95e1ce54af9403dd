#!/usr/bin/env bash
# Cross-reading the low-bit types with llama.cpp (issue 37): for each type,
# qlens's file and llama-quantize's file of the same model (pure, the same
# imatrix; token_embd and output Q8_0, which no imatrix covers), each
# measured by llama-perplexity three ways (flash attention on; off; off with
# an F32 KV cache: llama.cpp's own spread) and by qlens perplexity on the same
# text. A row passes when qlens's perplexity lies within max(1e-4 relative,
# twice llama.cpp's spread) of the mean of llama.cpp's three.
#
# usage: scripts/cross-read.sh MODEL.gguf IMATRIX.gguf TEXT LLAMA_BIN_DIR OUT_DIR [TYPES...]
#   MODEL: F16/F32, rows multiples of 256 (qlens synth --preset 160m does)
#   LLAMA_BIN_DIR: llama.cpp 0c1e570's build/bin (llama-quantize, llama-perplexity)
# Prints a markdown table; the files stay in OUT_DIR.
set -euo pipefail
[ $# -ge 5 ] || { sed -n 2,14p "$0"; exit 2; }
model=$1 imatrix=$2 text=$3 llama=$4 out=$5
shift 5
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S TQ1_0 TQ2_0 MXFP4 NVFP4 Q1_0 Q2_0)
qlens=${QLENS:-$(dirname "$0")/../build/qlens}
ctx=${CTX:-256} chunks=${CHUNKS:-4}
mkdir -p "$out"

final() { { grep -o 'Final estimate: PPL = [0-9.]*' || true; } | awk '{print $5}' | tail -1; }
# A perplexity run's result, tried three times ("nan" when none prints it:
# under load llama.cpp's logger thread sometimes loses the last line).
ppl() {
  local v
  for _ in 1 2 3; do
    v=$("$@" 2>&1 | final)
    [ -n "$v" ] && { echo "$v"; return; }
  done
  echo nan
}

# quantize TOOL TYPE OUT
quantize() {
  local tool=$1 type=$2 dst=$3 args=()
  case $type in
    NVFP4) args=(--tensor-type 'blk\..*=nvfp4' "$model" "$dst" Q8_0) ;;
    MXFP4) args=(--pure --token-embedding-type q8_0 --output-tensor-type q8_0 "$model" "$dst" MXFP4_MOE) ;;
    # llama-quantize's IQ2_S mix is IQ2_XS at its base; IQ2_M's base is IQ2_S.
    IQ2_S) args=(--pure --token-embedding-type q8_0 --output-tensor-type q8_0 "$model" "$dst" IQ2_M) ;;
    *) args=(--pure --token-embedding-type q8_0 --output-tensor-type q8_0 "$model" "$dst" "$type") ;;
  esac
  if [ "$tool" = qlens ]; then
    "$qlens" quantize --imatrix "$imatrix" "${args[@]}" 2 > "$dst.log" 2>&1
  else
    "$llama/llama-quantize" --imatrix "$imatrix" "${args[@]}" 2 > "$dst.log" 2>&1
  fi
}

echo "| type | file by | llama.cpp fa on | fa off | fa off, F32 cache | qlens | qlens - llama.cpp mean | tolerance | |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for type in "${types[@]}"; do
  for tool in qlens llama; do
    f="$out/$tool-$type.gguf"
    [ -f "$f" ] || quantize "$tool" "$type" "$f"
    run=(-m "$f" -f "$text" -c "$ctx" -b "$ctx" --chunks "$chunks" -t 2)
    on=$(ppl "$llama/llama-perplexity" "${run[@]}" -fa on)
    off=$(ppl "$llama/llama-perplexity" "${run[@]}" -fa off)
    f32=$(ppl "$llama/llama-perplexity" "${run[@]}" -fa off -ctk f32 -ctv f32)
    ours=$(ppl "$qlens" perplexity "${run[@]}")
    awk -v t="$type" -v by="$tool" -v on="$on" -v off="$off" -v f32="$f32" -v q="$ours" 'BEGIN {
      mean = (on + off + f32) / 3;
      hi = on; if (off > hi) hi = off; if (f32 > hi) hi = f32;
      lo = on; if (off < lo) lo = off; if (f32 < lo) lo = f32;
      tol = 2 * (hi - lo); if (tol < 1e-4 * mean) tol = 1e-4 * mean;
      d = q - mean; ok = (d <= tol && d >= -tol) ? "ok" : "OUTSIDE";
      if (on == "nan" || off == "nan" || f32 == "nan" || q == "nan") ok = "incomplete";
      printf "| %s | %s | %.4f | %.4f | %.4f | %.4f | %+.4f | %.4f | %s |\n", t, by, on, off, f32, q, d, tol, ok }'
  done
done

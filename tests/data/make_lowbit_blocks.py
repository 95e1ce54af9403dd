#!/usr/bin/env python3
"""Writes lowbit-blocks.gguf: for each of the 13 block types of 2026 (the
1- to 3-bit i-quants, ternary, MXFP4, NVFP4, Q1_0, Q2_0), four rows of 256
elements as llama-quantize wrote them (tensor TYPE, of that type) and
llama.cpp's dequantization of them (tensor TYPE.dequantized, F32); and the
rows they were made from (tensor source, F32) with the importance
llama-quantize gave them (tensor importance: the imatrix's sums over its
count, as llama-quantize reads a GGUF imatrix).

Usage:
  make_lowbit_blocks.py --quantized DIR --oracle ORACLE OUT.gguf

DIR also holds the source model, g3tiny.gguf, and its imatrix,
g3tiny.imatrix.gguf.

DIR holds q-TYPE.gguf for every type: llama-quantize's output on a model
whose blk.0.ffn_down.weight rows are 256 wide (README.md: how). ORACLE is a
program that reads raw blocks on stdin and writes ggml's to_float of them
(README.md: its source). Needs llama.cpp's own gguf-py (on PYTHONPATH),
which knows every type id.
"""
import argparse
import subprocess

import numpy as np
import gguf

TYPES = ["IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S",
         "TQ1_0", "TQ2_0", "MXFP4", "NVFP4", "Q1_0", "Q2_0"]
TENSOR = "blk.0.ffn_down.weight"
ROWS, WIDTH = 4, 256


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quantized", required=True)
    ap.add_argument("--oracle", required=True)
    ap.add_argument("out")
    args = ap.parse_args()
    writer = gguf.GGUFWriter(args.out, arch="qlens-test-blocks")
    writer.add_description("llama-quantize blocks and llama.cpp 0c1e570's dequantization of them")
    source = gguf.GGUFReader(f"{args.quantized}/g3tiny.gguf")
    rows = next(t for t in source.tensors if t.name == TENSOR)
    assert rows.tensor_type == gguf.GGMLQuantizationType.F32
    writer.add_tensor("source", np.asarray(rows.data).reshape(-1, WIDTH)[:ROWS].copy())
    imatrix = gguf.GGUFReader(f"{args.quantized}/g3tiny.imatrix.gguf")
    sums = next(t for t in imatrix.tensors if t.name == TENSOR + ".in_sum2")
    count = next(t for t in imatrix.tensors if t.name == TENSOR + ".counts")
    writer.add_tensor("importance", (np.asarray(sums.data) / np.float32(np.asarray(count.data)[0])).astype(np.float32))
    for name in TYPES:
        qtype = gguf.GGMLQuantizationType[name]
        reader = gguf.GGUFReader(f"{args.quantized}/q-{name}.gguf")
        tensor = next(t for t in reader.tensors if t.name == TENSOR)
        assert tensor.tensor_type == qtype, (name, tensor.tensor_type)
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        row_bytes = WIDTH // block * size
        blocks = np.asarray(tensor.data).reshape(-1).view(np.uint8)[: ROWS * row_bytes].copy()
        floats = subprocess.run([args.oracle, str(qtype.value), str(ROWS * WIDTH)], input=blocks.tobytes(),
                                capture_output=True, check=True).stdout
        values = np.frombuffer(floats, dtype=np.float32).reshape(ROWS, WIDTH)
        writer.add_tensor(name, blocks.reshape(ROWS, row_bytes), raw_dtype=qtype)
        writer.add_tensor(name + ".dequantized", values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


main()

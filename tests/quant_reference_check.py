#!/usr/bin/env python3
"""Checks qlens's block-quantized data against gguf-py (PyPI `gguf`), the
format's Python reference implementation.

Usage: quant_reference_check.py TYPE BLOCKS FLOATS COUNT [--quantize]

  TYPE    a ggml type name as GGMLQuantizationType spells it (Q4_0, Q6_K, ...)
  BLOCKS  raw file of COUNT / block_size blocks of TYPE, back to back
  FLOATS  raw file of COUNT little-endian float32 values
  COUNT   number of elements (a multiple of the type's block size)

Default mode: dequantizes BLOCKS with gguf.quants.dequantize and requires the
result to equal FLOATS (qlens's to_float) bit for bit.

--quantize: quantizes FLOATS with gguf.quants.quantize (gguf-py's port of
ggml's reference quantizer, where it has one) and requires the bytes to equal
BLOCKS (qlens's from_float).

Exit status: 0 match, 1 mismatch (the first few are printed), 2 usage or
file-size error, 3 gguf-py does not implement TYPE in that mode (a skip, with
a message saying so).
"""
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGML_QUANT_SIZES
import gguf.quants


def fail(code, msg):
    print(msg)
    sys.exit(code)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    quantize_mode = "--quantize" in sys.argv[1:]
    if len(args) != 4:
        fail(2, __doc__)
    type_name, blocks_path, floats_path, count = args[0], args[1], args[2], int(args[3])
    try:
        qtype = GGMLQuantizationType[type_name.upper()]
    except KeyError:
        fail(3, f"SKIP gguf-py has no type named {type_name}")
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    # Whether gguf-py implements the type in this mode, before any size check
    # (its size table may describe a layout it cannot convert anyway: it still
    # lists Q8_1 as 40 bytes, the old float d and s, where ggml has 36).
    try:
        if quantize_mode:
            gguf.quants.quantize(np.zeros((1, block_size), dtype=np.float32), qtype)
        else:
            gguf.quants.dequantize(np.zeros((1, type_size), dtype=np.uint8), qtype)
    except NotImplementedError:
        fail(3, f"SKIP gguf.quants cannot {'quantize' if quantize_mode else 'dequantize'} {type_name}")
    if count % block_size:
        fail(2, f"count {count} is not a multiple of {type_name}'s block size {block_size}")
    nblocks = count // block_size

    blocks = np.fromfile(blocks_path, dtype=np.uint8)
    floats = np.fromfile(floats_path, dtype="<f4")
    if blocks.size != nblocks * type_size:
        fail(2, f"{blocks_path}: {blocks.size} bytes, expected {nblocks * type_size}")
    if floats.size != count:
        fail(2, f"{floats_path}: {floats.size} floats, expected {count}")

    if quantize_mode:
        try:
            ref = gguf.quants.quantize(floats.reshape(nblocks, block_size), qtype)
        except NotImplementedError:
            fail(3, f"SKIP gguf.quants cannot quantize {type_name}")
        ref = np.asarray(ref, dtype=np.uint8).reshape(nblocks, type_size)
        got = blocks.reshape(nblocks, type_size)
        bad = np.nonzero(np.any(ref != got, axis=1))[0]
        for b in bad[:5]:
            print(f"block {b}: qlens {got[b].tobytes().hex()}\n"
                  f"       gguf  {ref[b].tobytes().hex()}\n"
                  f"       input {floats[b * block_size:(b + 1) * block_size].tolist()}")
        if bad.size:
            fail(1, f"FAIL {type_name} quantize: {bad.size} of {nblocks} blocks differ")
        print(f"OK {type_name} quantize: {nblocks} blocks identical to gguf.quants.quantize")
        return

    try:
        ref = gguf.quants.dequantize(blocks.reshape(nblocks, type_size), qtype)
    except NotImplementedError:
        fail(3, f"SKIP gguf.quants cannot dequantize {type_name}")
    ref_bits = np.asarray(ref, dtype=np.float32).reshape(-1).view(np.uint32)
    got_bits = floats.view(np.uint32)
    bad = np.nonzero(ref_bits != got_bits)[0]
    for i in bad[:10]:
        print(f"element {i} (block {i // block_size}): qlens {floats[i]!r} "
              f"(0x{got_bits[i]:08x}) gguf {ref_bits.view(np.float32)[i]!r} (0x{ref_bits[i]:08x})")
    if bad.size:
        fail(1, f"FAIL {type_name} dequantize: {bad.size} of {count} values differ")
    print(f"OK {type_name} dequantize: {count} values bit-identical to gguf.quants.dequantize")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Reads a quantized model written by qlens with gguf-py (PyPI `gguf`,
llama.cpp's own Python reader) and compares tensors dequantized by gguf-py's
numpy code with qlens's dequantization.

Usage: gguf_model_check.py MODEL.gguf NAME=FLOATS [NAME=FLOATS ...]

  NAME    a tensor of MODEL
  FLOATS  raw little-endian float32 file: qlens's to_float of that tensor

Exit status: 0 all equal, 1 a mismatch or a tensor missing, 2 usage error.
"""
import sys

import numpy as np
import gguf
import gguf.quants


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    reader = gguf.GGUFReader(sys.argv[1])
    tensors = {t.name: t for t in reader.tensors}
    status = 0
    for arg in sys.argv[2:]:
        name, path = arg.split("=", 1)
        t = tensors.get(name)
        if t is None:
            print(f"{name}: not in the file")
            status = 1
            continue
        ref = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        ours = np.fromfile(path, dtype="<f4")
        if ref.size != ours.size:
            print(f"{name}: {ref.size} values from gguf-py, {ours.size} from qlens")
            status = 1
            continue
        if not np.array_equal(ref.view(np.uint32), ours.view(np.uint32)):
            bad = np.nonzero(ref.view(np.uint32) != ours.view(np.uint32))[0]
            i = bad[0]
            print(f"{name} ({t.tensor_type.name}): {bad.size} values differ; first at {i}: gguf-py {ref[i]!r}, qlens {ours[i]!r}")
            status = 1
        else:
            print(f"{name} ({t.tensor_type.name}): {ref.size} values equal")
    return status


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Cross-checks a GGUF file written by qlens against the reference reader.

Usage: gguf_reference_check.py FILE.gguf EXPECTED.json

Reads FILE.gguf with gguf.GGUFReader (PyPI package `gguf`, the format's Python
reference implementation) and compares it with EXPECTED.json, written by
tests/test_gguf.cpp:

  {"alignment": N,
   "kv": [{"key": K, "types": [type ids as gguf-py reports them],
           "leaves": [flattened leaf values; floats as {"bits": N}]}, ...],
   "tensors": [{"name": S, "type": id, "shape": [ne0, ...], "hex": data}, ...]}

Prints "OK ..." and exits 0 when everything matches; otherwise prints each
mismatch and exits 1.
"""
import json
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType


def leaf_values(field):
    """The field's leaf values in file order (nested arrays flattened)."""
    leaf_type = field.types[-1]
    out = []
    for idx in field.data:
        part = field.parts[idx]
        if leaf_type == GGUFValueType.STRING:
            out.append(bytes(part).decode("utf-8"))
        elif leaf_type == GGUFValueType.FLOAT32:
            out.append({"bits": int(np.asarray(part, dtype=np.float32).view(np.uint32)[0])})
        elif leaf_type == GGUFValueType.FLOAT64:
            out.append({"bits": int(np.asarray(part, dtype=np.float64).view(np.uint64)[0])})
        elif leaf_type == GGUFValueType.BOOL:
            out.append(bool(part[0]))
        else:
            out.append(int(part[0]))
    return out


def main():
    path, expected_path = sys.argv[1], sys.argv[2]
    with open(expected_path, encoding="utf-8") as f:
        exp = json.load(f)
    reader = GGUFReader(path)
    errors = []

    if reader.alignment != exp["alignment"]:
        errors.append(f"alignment {reader.alignment} != {exp['alignment']}")

    keys = [k for k in reader.fields if not k.startswith("GGUF.")]
    want_keys = [kv["key"] for kv in exp["kv"]]
    if keys != want_keys:
        errors.append(f"keys differ:\n  got  {keys}\n  want {want_keys}")
    for kv in exp["kv"]:
        field = reader.fields.get(kv["key"])
        if field is None:
            continue
        types = [int(t) for t in field.types]
        if types != kv["types"]:
            errors.append(f"{kv['key']}: types {types} != {kv['types']}")
            continue
        got = leaf_values(field)
        if got != kv["leaves"]:
            errors.append(f"{kv['key']}: values differ:\n  got  {got[:20]}\n  want {kv['leaves'][:20]}")

    if len(reader.tensors) != len(exp["tensors"]):
        errors.append(f"{len(reader.tensors)} tensors, expected {len(exp['tensors'])}")
    for t, want in zip(reader.tensors, exp["tensors"]):
        name = want["name"]
        if t.name != name:
            errors.append(f"tensor name {t.name!r} != {name!r}")
        if int(t.tensor_type) != want["type"]:
            errors.append(f"{name}: type {int(t.tensor_type)} != {want['type']}")
        shape = [int(d) for d in t.shape]
        if shape != want["shape"]:
            errors.append(f"{name}: shape {shape} != {want['shape']}")
        nbytes = len(want["hex"]) // 2
        if int(t.n_bytes) != nbytes:
            errors.append(f"{name}: {t.n_bytes} bytes, expected {nbytes}")
        if t.data_offset % exp["alignment"] != 0:
            errors.append(f"{name}: data offset {t.data_offset} is not aligned to {exp['alignment']}")
        data = bytes(reader.data[t.data_offset:t.data_offset + nbytes])
        if data.hex() != want["hex"]:
            errors.append(f"{name}: data differs")
        if bytes(np.ascontiguousarray(t.data).view(np.uint8).reshape(-1)) != data:
            errors.append(f"{name}: tensor.data view differs from the raw bytes")

    if errors:
        print("MISMATCH in " + path)
        for e in errors:
            print("  " + e)
        return 1
    print(f"OK: {len(keys)} keys, {len(reader.tensors)} tensors match")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Writes qwen2-nvfp4-scaled.gguf: a copy of qwen2-nvfp4.gguf (every layer
matrix NVFP4, as llama-quantize wrote it) with what published NVFP4 files
carry beside the blocks, as llama.cpp 0c1e570 loads them:

- a per-tensor scale "blk.N.ROLE.scale" (F32, shape [1]) beside each layer
  projection (attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up,
  ffn_down): the projection's product is multiplied by it (llama.cpp's
  build_lora_mm); values 0.5 .. 1.75, different per tensor, so a scale
  that is dropped or applied to the wrong tensor changes the perplexity;
- general.tensor_extra.name / general.tensor_extra.prec_a4: which tensors
  may take 4-bit activations (the back-ends with them; no effect on the CPU).

Usage: make_nvfp4_scaled.py IN.gguf OUT.gguf
Needs llama.cpp's own gguf-py (on PYTHONPATH), which knows NVFP4.
"""
import sys

import numpy as np
import gguf

ROLES = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]


def main():
    src, out = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(out, arch=arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = field.contents()
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(name, value, vtype, sub_type=field.types[-1])
        else:
            writer.add_key_value(name, value, vtype)
    scaled = []
    for t in reader.tensors:
        writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    k = 0
    for t in reader.tensors:
        parts = t.name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[2] in ROLES and parts[3] == "weight":
            scale = 0.5 + 0.25 * (k % 6)
            k += 1
            writer.add_tensor(f"blk.{parts[1]}.{parts[2]}.scale", np.array([scale], dtype=np.float32))
            scaled.append(t.name)
    writer.add_array("general.tensor_extra.name", scaled)
    writer.add_key_value("general.tensor_extra.prec_a4", [i % 2 == 0 for i in range(len(scaled))],
                         gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.BOOL)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()

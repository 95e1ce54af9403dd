#!/usr/bin/env python3
"""Writes src/quant/iq_grids_data.h: the i-quants' lattice points as ggml
defines them, in their compact form (one uint16 per point: its 8 coordinates
as 2-bit digits for the 2-bit and 1-bit grids, its 4 coordinates as 3-bit
digits for the 3-bit grids).

The points were chosen by ggml's authors (they are not the output of a rule
one could rerun), so they are data: this script copies the six kgrid_* lists
out of ggml's ggml-quants.c (llama.cpp 0c1e570, as vendored in PyPI's
llama-cpp-python 0.3.36) and checks each against ggml's expanded table in
ggml-common.h through the level table src/quant/iq_grids.h applies, so that
the header and the expansion agree with ggml before anything is written.

Usage: scripts/iq-grids.py LLAMA_CPP_DIR > src/quant/iq_grids_data.h
"""
import re
import sys

# (compact list in ggml-quants.c, expanded table in ggml-common.h, bits per
#  coordinate, coordinates, levels as iq_grids.h defines them, our name)
GRIDS = [
    ("kgrid_2bit_256", "iq2xxs_grid", 2, 8, [8, 25, 43], "kIq2xxsPoints"),
    ("kgrid_2bit_512", "iq2xs_grid", 2, 8, [8, 25, 43], "kIq2xsPoints"),
    ("kgrid_2bit_1024", "iq2s_grid", 2, 8, [8, 25, 43], "kIq2sPoints"),
    ("kgrid_1bit_2048", "iq1s_grid", 2, 8, [-1, 0, 1], "kIq1sPoints"),
    ("kgrid_256", "iq3xxs_grid", 3, 4, [4, 12, 20, 28, 36, 44, 52, 62], "kIq3xxsPoints"),
    ("kgrid_512", "iq3s_grid", 3, 4, [1, 3, 5, 7, 9, 11, 13, 15], "kIq3sPoints"),
]


def numbers(text):
    return [int(x, 0) for x in re.findall(r"0x[0-9a-fA-F]+|\b\d+\b", text)]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    src = sys.argv[1] + "/ggml/src/"
    quants = open(src + "ggml-quants.c").read()
    common = open(src + "ggml-common.h").read()
    out = ["// The i-quants' lattice points, compact (written by scripts/iq-grids.py from",
           "// ggml 0c1e570; see there and src/quant/iq_grids.h, which expands them).",
           "#pragma once", "", "#include <cstdint>", "", "namespace qlens::quant::iq {", ""]
    for compact, expanded, bits, coords, levels, name in GRIDS:
        m = re.search(r"static const uint16_t " + compact + r"\[\w+\] = \{(.*?)\};", quants, re.S)
        points = numbers(m.group(1))
        m = re.search(r"GGML_TABLE_BEGIN\(\w+, " + expanded + r", \w+\)(.*?)GGML_TABLE_END", common, re.S)
        table = numbers(m.group(1))
        assert len(points) == len(table), (compact, len(points), len(table))
        for p, t in zip(points, table):
            for j in range(coords):
                byte = (t >> (8 * j)) & 0xFF
                assert levels[(p >> (bits * j)) & ((1 << bits) - 1)] & 0xFF == byte, (compact, p, t)
        out.append(f"inline constexpr uint16_t {name}[{len(points)}] = {{")
        for i in range(0, len(points), 12):
            out.append("    " + " ".join(f"{p:5d}," for p in points[i:i + 12]))
        out.append("};")
        out.append("")
    out.append("}  // namespace qlens::quant::iq")
    print("\n".join(out))


main()

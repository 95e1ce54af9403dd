#!/usr/bin/env python3
"""Generates src/model/unicode_data.cpp: compact Unicode tables for the tokenizers.

Usage: python3 scripts/gen_unicode_data.py > src/model/unicode_data.cpp

Everything comes from Python's unicodedata (the Unicode version is recorded in
the output). Tables, all sorted by code point so lookups are binary searches:

  * kCategoryRanges: (first code point, major general category) runs; a run
    lasts until the next entry's first code point. Categories: C (other,
    including unassigned), L, M, N, P, S, Z.
  * kWhitespace: the Unicode White_Space code points (what \\s means in the
    pre-tokenizer regexes).
  * kLowerRanges: (first, last, stride, delta): code points first, first+stride,
    ... <= last map to cp + delta (first code point of str.lower()).
  * kNfdRanges: (first, last, base): each code point in [first, last] has a
    canonical decomposition starting with `base` (used to strip accents).
  * kDeepseekLetters: the explicit letter class of the deepseek-llm
    pre-tokenizer regex, as code point ranges.
"""

import sys
import unicodedata

MAX_CP = 0x110000

CATS = {"C": 0, "L": 1, "M": 2, "N": 3, "P": 4, "S": 5, "Z": 6}
CAT_NAMES = ["kOther", "kLetter", "kMark", "kNumber", "kPunct", "kSymbol", "kSeparator"]

# The letter class of deepseek-llm's tokenizer.json pre-tokenizer, in its
# written form ("X-Y" ranges and single characters).
DEEPSEEK_LETTERS = (
    "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-"
    "\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386"
    "\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f"
    "\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-"
    "\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d"
    "\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d"
    "\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3"
    "\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-"
    "\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134"
    "\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-"
    "\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f"
    "\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-"
    "\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-"
    "\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-"
    "\U000118df\U0001e900-\U0001e943"
)


def parse_class(spec):
    ranges = []
    i = 0
    while i < len(spec):
        a = ord(spec[i])
        if i + 2 < len(spec) and spec[i + 1] == "-":
            ranges.append((a, ord(spec[i + 2])))
            i += 3
        else:
            ranges.append((a, a))
            i += 1
    ranges.sort()
    merged = []
    for a, b in ranges:
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def category_runs():
    runs = []
    prev = None
    for cp in range(MAX_CP):
        c = CATS[unicodedata.category(chr(cp))[0]]
        if c != prev:
            runs.append((cp, c))
            prev = c
    return runs


def whitespace():
    # str.isspace() also accepts U+001C..U+001F (information separators), which
    # are not White_Space; everything else it accepts is.
    return [cp for cp in range(MAX_CP) if chr(cp).isspace() and not 0x1C <= cp <= 0x1F]


def lower_ranges():
    pairs = []
    for cp in range(MAX_CP):
        low = ord(chr(cp).lower()[0])
        if low != cp:
            pairs.append((cp, low - cp))
    out = []  # (first, last, stride, delta)
    i = 0
    while i < len(pairs):
        first, delta = pairs[i]
        # try to extend with stride 1 or 2
        best = (first, first, 1, delta)
        for stride in (1, 2):
            j = i
            last = first
            while j + 1 < len(pairs) and pairs[j + 1][0] == last + stride and pairs[j + 1][1] == delta:
                j += 1
                last = pairs[j][0]
            if last > best[1]:
                best = (first, last, stride, delta)
                best_j = j
        if best[1] == first:
            best_j = i
        out.append(best)
        i = best_j + 1
    return out


def nfd_ranges():
    out = []  # (first, last, base)
    for cp in range(MAX_CP):
        d = unicodedata.normalize("NFD", chr(cp))
        base = ord(d[0])
        if base == cp:
            continue
        if out and out[-1][1] == cp - 1 and out[-1][2] == base:
            out[-1] = (out[-1][0], cp, base)
        else:
            out.append((cp, cp, base))
    return out


def emit_rows(items, per_line, fmt):
    lines = []
    for i in range(0, len(items), per_line):
        lines.append("    " + " ".join(fmt(x) for x in items[i:i + per_line]))
    return "\n".join(lines)


def main():
    out = sys.stdout
    cats = category_runs()
    ws = whitespace()
    low = lower_ranges()
    nfd = nfd_ranges()
    ds = parse_class(DEEPSEEK_LETTERS)
    out.write("// Generated by scripts/gen_unicode_data.py from Python's unicodedata\n")
    out.write("// (Unicode %s). Do not edit by hand.\n\n" % unicodedata.unidata_version)
    out.write('#include "model/unicode.h"\n\n')
    out.write("namespace qlens::unicode::data {\n\n")
    out.write("const char* const kUnicodeVersion = \"%s\";\n\n" % unicodedata.unidata_version)

    out.write("// {first code point, category}; a run lasts until the next entry.\n")
    out.write("const CategoryRun kCategoryRanges[] = {\n")
    out.write(emit_rows(cats, 6, lambda r: "{0x%05X, %s}," % (r[0], CAT_NAMES[r[1]])))
    out.write("\n};\nconst size_t kCategoryRangesSize = sizeof(kCategoryRanges) / sizeof(kCategoryRanges[0]);\n\n")

    out.write("const uint32_t kWhitespace[] = {\n")
    out.write(emit_rows(ws, 10, lambda cp: "0x%04X," % cp))
    out.write("\n};\nconst size_t kWhitespaceSize = sizeof(kWhitespace) / sizeof(kWhitespace[0]);\n\n")

    out.write("// {first, last, stride, delta}\n")
    out.write("const CaseRange kLowerRanges[] = {\n")
    out.write(emit_rows(low, 4, lambda r: "{0x%05X, 0x%05X, %d, %d}," % r))
    out.write("\n};\nconst size_t kLowerRangesSize = sizeof(kLowerRanges) / sizeof(kLowerRanges[0]);\n\n")

    out.write("// {first, last, first code point of the canonical decomposition}\n")
    out.write("const NfdRange kNfdRanges[] = {\n")
    out.write(emit_rows(nfd, 4, lambda r: "{0x%05X, 0x%05X, 0x%05X}," % r))
    out.write("\n};\nconst size_t kNfdRangesSize = sizeof(kNfdRanges) / sizeof(kNfdRanges[0]);\n\n")

    out.write("// {first, last}\n")
    out.write("const CodeRange kDeepseekLetters[] = {\n")
    out.write(emit_rows(ds, 6, lambda r: "{0x%05X, 0x%05X}," % r))
    out.write("\n};\nconst size_t kDeepseekLettersSize = sizeof(kDeepseekLetters) / sizeof(kDeepseekLetters[0]);\n\n")
    out.write("}  // namespace qlens::unicode::data\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Small BPE test vocabularies for the pre-tokenizers that have no vocabulary
in ../shared (gpt-4o, deepseek-v3, kimi-k2), and llama.cpp's token ids for a
set of hard strings on each.

A vocabulary is made so that its token ids show where the pre-tokenizer
split the text: it has every byte (GPT-2's byte-level alphabet), every
character of the strings, and every substring of a set of candidate words
with a merge for every way of cutting each, so byte-pair merging turns any
candidate word into one token, whatever the merge order. The candidate words
are the pieces the strings split into under the regexes of the pre-tokenizer
and of its neighbours (Python's `regex` module, used only to choose the
vocabulary): when llama.cpp splits differently from the pre-tokenizer's
neighbours, the token ids differ. The expected ids are what llama.cpp's own
llama-tokenize makes of each string with the vocabulary (no BOS, special
text not parsed), whatever this script's regexes say.

Writes into OUT_DIR: strings.inp (the cases, separated by
"\\n__ggml_vocab_test__\\n" as llama.cpp's test vocabularies are), and per
vocabulary NAME.gguf and NAME.out (one line of ids per case).

With SHARED_VOCAB_DIR (../shared/models/llama-vocab) it also writes
llama.cpp's ids for strings.inp with the real qwen35 and gemma-4
vocabularies there (qwen35.out, gemma-4.out) and for Gemma 4's own cases
(gemma-4-extra.inp, gemma-4-extra.out).

usage: make_vocab_tests.py LLAMA_TOKENIZE OUT_DIR [SHARED_VOCAB_DIR]
"""
import os
import subprocess
import sys
import tempfile

import regex
from gguf import GGUFWriter, TokenType

SEPARATOR = "\n__ggml_vocab_test__\n"

# Strings that exercise the splitting rules: case changes inside words,
# contractions, digit runs, Han/kana/hangul, marks, punctuation runs, spaces
# and newlines of every kind, emoji.
STRINGS = [
    "Hello world",
    " Hello world",
    "HelloWorld",
    "camelCase XMLHttp iPhone",
    "ALLCAPS and MiXeD cAsE",
    "don't can't I'm you're we've they'll he'd",
    "DON'T I'M YOU'RE WE'VE THEY'LL HE'D",
    "it's 'quoted' ''twice'' 's 're 've 'm 'll 'd 't",
    "hi'S WORLD'Ve x'LL",
    "1234567890",
    "3.14159 + 2,718; 1st 2nd",
    "Phone: +1 (555) 123-4567, $1,000,000.00",
    "A1B2C3 abc123def 0x1F 12345abc",
    "\u0663\u0664\u0665 \u0661\u0662 \u00bd\u2153 \u00b2\u00b3 \u2167",
    "\u4e2d\u6587\u6d4b\u8bd5",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002",
    "hi\u4e2d\u6587ok \u4e2d\u6587ab12\u4e2d",
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c",
    "\u30ab\u30ca\u3068\u304b\u306a\u3001\u6f22\u5b57\u3002",
    "\u65e5\u672c\u306e\u30c6\u30ad",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\u0395\u03bb\u03bb\u03ac\u03c2 \u039a\u0395\u03a6\u0391\u039b",
    "\u041f\u0440\u0438\u041c\u0438\u0440 \u0440\u0443\u0441 \u0422\u0415\u041a\u0421\u0422",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00dcn\u00efc\u00f6d\u00e9 \u00c9TATS-Unis",
    "e\u0301t\u0301e\u0301 n\u0303o a\u0300 \u0301x",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "\u01c5ungla \u01c8j \u1f88",
    "emoji \U0001f600\U0001f603 \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f1fa\U0001f1f8",
    "\U0001f600hello !hello $var @user #tag",
    "..!!?? -- ;;",
    "(paren) [x] {y} <z>",
    "'Hello' \"World\" `code` 'caf\u00e9'",
    "path/to/f.txt http://ex.com/a?c=d //x/\n",
    "!!!/\n.//\r\nend",
    "a\nb\n\nc\r\nd\r\r\n",
    "  lead and trail  ",
    "\t\ttabs\tand  spaces  \n  ",
    "\n\n\n",
    "   ",
    " ",
    "x\u3000y\u00a0z \u3000\u4e2d",
    "def f(x):\n    return x**2  # c\n",
    "if (a&&b||c) { return -1; }",
    "__init__ self._priv snake_case kebab-case",
    "\u200bzero\u200bwidth",
    "Hello, \u4e16\u754c! 123 \u3053\u3093\u306b\u3061\u306f",
]

# More cases for Gemma 4's tokenizer (real vocabulary only): runs of
# newlines longer than its newline tokens, spaces, a literal U+2581, characters
# that are no token (byte fallback), invalid UTF-8, and its special tokens as
# text (user-defined ones split even so; <|tool_response> is one that
# llama.cpp makes a control token, which stays text).
GEMMA4_STRINGS = [
    "\n" * 40,
    "\n" * 31 + "x" + "\n" * 32,
    "a\n\n\nb \n \n ",
    "\r\n\r\n\t\n",
    " " * 40,
    "  a   b    c\t\t x ",
    "a\u2581b \u2581 \u2581\u2581",
    "\U0002a6d6 \U00010348 \ua66e \U0002f800 \u01c5 \u0378",
    b"a\xffb\xc3 z\xe2\x82".decode("utf-8", "surrogateescape"),
    "a<|tool_response>b<tool_response|>c<|\"|>d<|turn>user\nHi<turn|>",
]

# The regexes of the pre-tokenizers as their tokenizer.json files have them
# (a list: each splits the pieces of the one before).
_C = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_TAIL = r"|\s*[\r\n]+|\s+(?!\S)|\s+"
PATTERNS = {
    "llama3": [_C + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*" + _TAIL],
    "qwen2": [_C + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*" + _TAIL],
    "tekken": [r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
               r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
               r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*" + _TAIL],
    "gpt-4o": [r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+" + _C + r"?|"
               r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*" + _C + r"?|"
               r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*" + _TAIL],
    "deepseek-llm": [r"[\r\n]", r"\s?\p{L}+", r"\s?[!-/:-~！-／：-～‘-‟　-。]+", r"\s+$", r"[一-龥ࠀ-一가-퟿]+", r"\p{N}+"],
    "deepseek-v3": [r"\p{N}{1,3}", r"[一-龥぀-ゟ゠-ヿ]+",
                    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|"
                    r" ?[\p{P}\p{S}]+[\r\n]*" + _TAIL],
    "kimi-k2": [r"[\p{Han}]+|"
                r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}--\p{Han}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}--\p{Han}]+" + _C + r"?|"
                r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}--\p{Han}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}--\p{Han}]*" + _C + r"?|"
                r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*" + _TAIL],
    # what llama.cpp's hand-written kimi-k2 splitter does: any letters but Han, whatever their case
    "kimi-k2-llama.cpp": [r"[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{L}--\p{Han}]+" + _C + r"?|\p{N}{1,3}|"
                          r" ?[^\s\p{L}\p{N}]+[\r\n]*" + _TAIL],
}

# name: (tokenizer.ggml.pre, the regexes whose pieces become tokens, with merges)
VOCABS = {
    "gpt-4o": ("gpt-4o", ["gpt-4o", "tekken", "llama3"], True),
    "deepseek-v3": ("deepseek-v3", ["deepseek-v3", "deepseek-llm", "llama3", "qwen2"], True),
    "kimi-k2": ("kimi-k2", ["kimi-k2-llama.cpp", "kimi-k2", "llama3", "gpt-4o"], True),
    # llama.cpp loads a kimi-k2 vocabulary without merges too: bytes only
    "kimi-k2-no-merges": ("kimi-k2", [], False),
}

EOT = "<|endoftext|>"


def split(text, patterns):
    pieces = [text]
    for p in patterns:
        r = regex.compile(p, regex.V1)
        out = []
        for s in pieces:
            pos = 0
            for m in r.finditer(s):
                if m.start() > pos:
                    out.append(s[pos:m.start()])
                out.append(m.group())
                pos = m.end()
            if pos < len(s):
                out.append(s[pos:])
        pieces = out
    return pieces


def _byte_table():
    printable = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table, extra = [], 0
    for b in range(256):
        if b in printable:
            table.append(chr(b))
        else:
            table.append(chr(256 + extra))
            extra += 1
    return table


BYTE = _byte_table()


def byte_level(text):
    """GPT-2's byte-to-unicode mapping of the UTF-8 bytes of text."""
    return "".join(BYTE[b] for b in text.encode("utf-8"))


def vocabulary(words):
    """Tokens and merges (byte-level text) under which every word is one token."""
    tokens = list(BYTE)
    merges = []
    seen = set(tokens)

    def add(tok):
        if tok not in seen:
            seen.add(tok)
            tokens.append(tok)

    # each character of more than one byte: its bytes merge left to right first
    chars = sorted({c for w in words for c in w if len(c.encode("utf-8")) > 1})
    for c in chars:
        b = byte_level(c)
        for k in range(2, len(b) + 1):
            add(b[:k])
            merges.append(f"{b[:k - 1]} {b[k - 1]}")
    # then every substring of a word, from any cut (characters of one word
    # never merge into a substring of another unless that is a substring too)
    subs = set()
    cuts = set()
    for w in words:
        for i in range(len(w)):
            for j in range(i + 2, len(w) + 1):
                subs.add(w[i:j])
                for k in range(i + 1, j):
                    cuts.add((w[i:k], w[k:j]))
    for s in sorted(subs, key=lambda s: (len(s), s)):
        add(byte_level(s))
    for a, b in sorted(cuts, key=lambda ab: (len(ab[0]) + len(ab[1]), ab[0] + ab[1], len(ab[0]))):
        merges.append(f"{byte_level(a)} {byte_level(b)}")
    return tokens, merges


def write_vocab(path, pre, words, with_merges):
    tokens, merges = vocabulary(words)
    tokens.append(EOT)
    types = [TokenType.NORMAL] * (len(tokens) - 1) + [TokenType.CONTROL]
    w = GGUFWriter(path, "llama")
    w.add_name(f"{pre} pre-tokenizer test vocabulary")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if with_merges:
        w.add_token_merges(merges)
    w.add_bos_token_id(len(tokens) - 1)
    w.add_eos_token_id(len(tokens) - 1)
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def utf8(text):
    return text.encode("utf-8", "surrogateescape")  # the invalid bytes stay as they were


def write_cases(path, strings):
    with open(path, "wb") as f:
        f.write(utf8(SEPARATOR).join(utf8(s) for s in strings))


def write_ids(llama_tokenize, vocab_path, strings, out_path):
    with open(out_path, "w") as f:
        for s in strings:
            f.write(" ".join(str(i) for i in llama_ids(llama_tokenize, vocab_path, s)) + "\n")


def llama_ids(llama_tokenize, vocab_path, text):
    with tempfile.NamedTemporaryFile("wb", delete=False) as f:
        f.write(utf8(text))
        case_path = f.name
    try:
        out = subprocess.run(
            [llama_tokenize, "-m", vocab_path, "-f", case_path, "--ids", "--no-bos", "--no-parse-special", "--no-escape",
             "--log-disable"],
            check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(case_path)
    line = [l for l in out.splitlines() if l.startswith("[")][-1]
    return [int(x) for x in line.strip("[]").split(",") if x.strip()]


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    llama_tokenize, out_dir = sys.argv[1:3]
    os.makedirs(out_dir, exist_ok=True)
    write_cases(os.path.join(out_dir, "strings.inp"), STRINGS)
    for name, (pre, pattern_names, with_merges) in VOCABS.items():
        words = sorted({p for s in STRINGS for n in pattern_names for p in split(s, PATTERNS[n])})
        path = os.path.join(out_dir, name + ".gguf")
        write_vocab(path, pre, words, with_merges)
        write_ids(llama_tokenize, path, STRINGS, os.path.join(out_dir, name + ".out"))
        print(f"{name}: {os.path.getsize(path)} bytes")
    if len(sys.argv) == 4:
        shared = sys.argv[3]
        for name in ("qwen35", "gemma-4"):
            vocab = os.path.join(shared, f"ggml-vocab-{name}.gguf")
            write_ids(llama_tokenize, vocab, STRINGS, os.path.join(out_dir, name + ".out"))
        write_cases(os.path.join(out_dir, "gemma-4-extra.inp"), GEMMA4_STRINGS)
        write_ids(llama_tokenize, os.path.join(shared, "ggml-vocab-gemma-4.gguf"), GEMMA4_STRINGS,
                  os.path.join(out_dir, "gemma-4-extra.out"))


if __name__ == "__main__":
    main()

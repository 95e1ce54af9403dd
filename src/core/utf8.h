// Strict UTF-8 validation, for code that must not pass invalid bytes through
// (JSON output, displayed metadata). Tokenizers use their own lenient decoder,
// which follows llama.cpp's handling of invalid input.
#pragma once

#include <cstddef>

namespace qlens {

// Length (1..4) of the valid UTF-8 sequence at s[0..n), or 0 when the bytes
// there are not valid UTF-8 (stray continuation, overlong form, surrogate,
// beyond U+10FFFF, or cut short).
size_t utf8_sequence_length(const unsigned char* s, size_t n);

}  // namespace qlens

// Block layouts of ggml's legacy quantized formats (blocks of 32 elements),
// byte for byte as in GGUF files. Scales are IEEE half bit patterns (read them
// with fp16_to_fp32). 4-bit codes are packed two per byte: byte j holds element
// j in its low nibble and element j + 16 in its high nibble. The 5-bit formats
// add the fifth bit of element j as bit j of the little-endian 32-bit qh.
//
// Dequantized value of element j (code c_j, unsigned unless stated):
//   Q4_0   d * (c_j - 8)            Q4_1   d * c_j + m
//   Q5_0   d * (c_j - 16)           Q5_1   d * c_j + m
//   Q8_0   d * qs[j] (signed)       Q8_1   d * qs[j] (signed), s = d * sum(qs)
//   IQ4_NL d * kIq4nlValues[c_j]
//
// The structs have no padding (every member is a 16-bit or byte array, 2-byte
// aligned); code that reads blocks from a byte buffer of unknown alignment
// copies them out with memcpy.
#pragma once

#include <cstdint>

namespace qlens::quant {

inline constexpr int kLegacyBlock = 32;  // elements per block of every legacy format

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;  // fp16 of d * sum(qs), d before its rounding to fp16 (as ggml)
  int8_t qs[32];
};
struct BlockIq4nl {
  uint16_t d;
  uint8_t qs[16];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockIq4nl) == 18);

}  // namespace qlens::quant

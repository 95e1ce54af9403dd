// Block layouts of ggml's one-scale low-bit formats, byte for byte as in
// GGUF files (fp16 fields are raw IEEE half bits). The value of element j of
// a block with scale d:
//   Q1_0   (128)  bit j of qs ? d : -d
//   Q2_0   (64)   d * (c_j - 1), c_j the 2-bit code at bits 2(j % 4) of byte j / 4
//   TQ2_0  (256)  d * (c - 1), c 2 bits: byte 32 (j / 128) + j % 32, bits 2 ((j / 32) % 4)
//   TQ1_0  (256)  d * (t - 1), t a base-3 digit (0..2): 5 per byte of qs, 4 per byte of qh
// TQ1_0 packs digits t_0 .. t_4 as the byte ceil(256 * sum t_n 3^(4 - n) / 243);
// digit n comes back as the top bits of (byte * 3^n mod 256) * 3 / 256. Its
// qs bytes 0-31 hold elements 0-159 (digit n of byte m: element 32n + m),
// bytes 32-47 elements 160-239 (digit n of byte 32 + m: 160 + 16n + m), and
// qh digit n of byte m element 240 + 4n + m.
#pragma once

#include <cstdint>

#include "quant/levels.h"

namespace qlens::quant {
// TQ1_0's and TQ2_0's integer view (levels.h), or nullptr for other types.
const LevelFormat* lowbit_level_format(DType type);
// Q1_0's and Q2_0's (levels.h), or nullptr.
const ScaledFormat* lowbit_scaled_format(DType type);
}  // namespace qlens::quant

namespace qlens::quant::lowbit {

struct BlockQ1_0 {
  uint16_t d;
  uint8_t qs[128 / 8];
};
struct BlockQ2_0 {
  uint16_t d;
  uint8_t qs[64 / 4];
};
struct BlockTQ1_0 {
  uint8_t qs[48];
  uint8_t qh[4];
  uint16_t d;
};
struct BlockTQ2_0 {
  uint8_t qs[64];
  uint16_t d;
};

static_assert(sizeof(BlockQ1_0) == 18);
static_assert(sizeof(BlockQ2_0) == 18);
static_assert(sizeof(BlockTQ1_0) == 54);
static_assert(sizeof(BlockTQ2_0) == 66);

}  // namespace qlens::quant::lowbit

// Block layouts of ggml's i-quants on lattice grids (super-blocks of 256),
// byte for byte as in GGUF files; fp16 fields are raw IEEE half bits. Each
// super-block is 8 groups of 32 elements, each 4 groups of 8 whose values
// are one lattice point (iq_grids.h) times a scale, with signs (2- and 3-bit
// formats) or a shift of +-1/8 (1-bit formats). The value of element j of
// point p in group g of a super-block with scale d:
//   IQ2_XXS  d * (0.5 + s_g) / 4 * level * sign   s_g: 4 bits, points of 256
//   IQ2_XS   as IQ2_XXS with a 4-bit scale per 16 elements, points of 512
//   IQ2_S    as IQ2_XS, points of 1024, signs stored whole
//   IQ3_XXS  d * (0.5 + s_g) / 2 * level * sign   half-points (4 coordinates) of 256
//   IQ3_S    d * (1 + 2 s) * level * sign       a 4-bit s per 64 elements, half-points of 512
//   IQ1_S    d * (2 s_g + 1) * (level + delta)   s_g 3 bits, delta +-1/8 per group
//   IQ1_M    as IQ1_S with a scale per 16 elements, a delta per 8, and d
//            spread over the top nibbles of the four 16-bit scale words
// The fields' bit layouts are at the decoders (iquants.cpp).
#pragma once

#include <cstdint>

namespace qlens::quant::iq {

inline constexpr int kQK = 256;  // elements per super-block

struct BlockIQ2XXS {
  uint16_t d;
  uint16_t qs[kQK / 8];  // per group of 32: 4 point indices (bytes), then 4 x 7 sign bits and a 4-bit scale
};
struct BlockIQ2XS {
  uint16_t d;
  uint16_t qs[kQK / 8];      // per 8 elements: a 9-bit point index and 7 sign bits
  uint8_t scales[kQK / 32];  // per group: two 4-bit scales (16 elements each)
};
struct BlockIQ2S {
  uint16_t d;
  uint8_t qs[kQK / 4];  // low 8 bits of the 32 point indices, then 32 sign bytes
  uint8_t qh[kQK / 32];  // per group: the indices' top 2 bits
  uint8_t scales[kQK / 32];
};
struct BlockIQ3XXS {
  uint16_t d;
  uint8_t qs[3 * kQK / 8];  // 64 half-point indices, then per group 4 x 7 sign bits and a 4-bit scale
};
struct BlockIQ3S {
  uint16_t d;
  uint8_t qs[kQK / 4];  // low 8 bits of the 64 half-point indices
  uint8_t qh[kQK / 32];  // their 9th bits
  uint8_t signs[kQK / 8];
  uint8_t scales[kQK / 64];  // two 4-bit scales per byte
};
struct BlockIQ1S {
  uint16_t d;
  uint8_t qs[kQK / 8];   // low 8 bits of the 32 point indices
  uint16_t qh[kQK / 32];  // per group: 4 x 3 index bits, a 3-bit scale, the delta's sign
};
struct BlockIQ1M {
  uint8_t qs[kQK / 8];      // low 8 bits of the 32 point indices
  uint8_t qh[kQK / 16];     // per 16 elements: 2 x (3 index bits, the delta's sign)
  uint8_t scales[kQK / 32];  // 16 3-bit scales and the fp16 super-block scale in the top nibbles
};

static_assert(sizeof(BlockIQ2XXS) == 66);
static_assert(sizeof(BlockIQ2XS) == 74);
static_assert(sizeof(BlockIQ2S) == 82);
static_assert(sizeof(BlockIQ3XXS) == 98);
static_assert(sizeof(BlockIQ3S) == 110);
static_assert(sizeof(BlockIQ1S) == 50);
static_assert(sizeof(BlockIQ1M) == 56);

}  // namespace qlens::quant::iq

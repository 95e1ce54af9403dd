// Block layouts of the 4-bit float formats, byte for byte as in GGUF files.
// Codes are E2M1 (sign, 2 exponent bits, 1 mantissa bit: 0, 0.5, 1, 1.5, 2,
// 3, 4, 6 and their negatives), two per byte: byte j holds element j in its
// low nibble and element j + half in its high nibble (half: 16 in MXFP4's
// blocks of 32, 8 in each of NVFP4's sub-blocks of 16). ggml computes with the codes
// doubled (kE2M1Doubled, integers) and halves the scale instead:
//   MXFP4 (32)  2^(e - 127) / 2 * doubled(c), e the E8M0 exponent byte
//   NVFP4 (64)  ue4m3(d_s) / 2 * doubled(c), one UE4M3 scale byte per 16
//               elements (unsigned, 4 exponent bits biased by 7, 3 mantissa
//               bits; 0 and 0x7F read as 0)
// A published NVFP4 tensor may also carry a per-tensor float scale (a
// "<name>.scale" tensor) that the model multiplies the product by.
#pragma once

#include <cstdint>

#include "qlens/types.h"

namespace qlens::quant::fp4 {

// E2M1 code c's value times 2.
inline constexpr int8_t kE2M1Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[16];
};
struct BlockNVFP4 {
  uint8_t d[4];
  uint8_t qs[32];
};

static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockNVFP4) == 36);

// 2^(e - 128) (half the E8M0 value), exactly: subnormal floats for e < 2.
float e8m0_half(uint8_t e);
// Half the UE4M3 value of x, exactly.
float ue4m3_half(uint8_t x);
// The UE4M3 code of x as ggml rounds it (mantissa half up; 0 for x <= 0 or
// NaN, 0x7E, the largest, from 448 up).
uint8_t ue4m3_from_float(float x);

}  // namespace qlens::quant::fp4

namespace qlens::quant {
struct ScaledFormat;
// MXFP4's and NVFP4's integer view (levels.h), or nullptr.
const ScaledFormat* fp4_scaled_format(DType type);
}  // namespace qlens::quant

// The integer view of the super-block formats whose values are a scale times
// small integers (the i-quants, TQ1_0, TQ2_0): the dot kernels' input, and
// the base of their to_float.
//
// A super-block decodes to its scale d, each run's scale code l and every
// element's signed integer level v (the grid's level times its sign; IQ1_*'s
// 8 times its level plus its shift's sign; TQ's -1, 0, 1). An element's
// value is d * factor * (2l + 1) * v, computed as ggml computes it:
// run_scale(d, l) * (v * unit), run_scale in ggml's float order (IQ2_*:
// d * (0.5 + l) * 0.25; IQ3_XXS: d * (0.5 + l) * 0.5; IQ3_S: d * (1 + 2l);
// IQ1_*: d * (2l + 1) with unit 1/8; TQ: d), so that to_float is ggml's bit
// for bit. A dot product with Q8_K activations is
// d_x * d * factor * sum over runs (2l + 1) * sum v q, the integer sums exact.
#pragma once

#include <cstddef>
#include <cstdint>

#include "qlens/types.h"

namespace qlens::quant {

struct Levels {
  float d = 0;
  uint8_t l[16] = {};  // per run
  int8_t v[256];
};

struct LevelFormat {
  void (*decode)(const void* block, Levels& out);
  int run;                             // elements per scale code
  float factor;                        // the dot product's d * factor * (2l + 1)
  float (*run_scale)(float d, int l);  // to_float's, in ggml's float order
  float unit;                          // to_float's v * unit
};

// The format of a type that decodes to Levels, or nullptr.
const LevelFormat* level_format(DType type);

// to_float of such a type (blocks of kBlockBytes), from its Levels.
template <const LevelFormat& kFormat, size_t kBlockBytes>
void levels_to_float(const void* src, float* y, int64_t n) {
  Levels L;
  for (int64_t i = 0; i < n / 256; ++i) {
    kFormat.decode(static_cast<const char*>(src) + i * kBlockBytes, L);
    for (int r = 0; r < 256 / kFormat.run; ++r) {
      const float scale = kFormat.run_scale(L.d, L.l[r]);
      for (int e = r * kFormat.run; e < (r + 1) * kFormat.run; ++e)
        *y++ = scale * (static_cast<float>(L.v[e]) * kFormat.unit);
    }
  }
}

// The types whose dot products take Q8_0 activations and whose blocks are
// small integer levels times float scales (Q1_0, Q2_0, MXFP4, NVFP4): a block
// of `block` elements decodes to its levels v (Q1_0's -1, +1; Q2_0's -1..2;
// the FP4 types' E2M1 values times 2) and a scale per `sub` elements, the
// value scale * v as ggml computes it (so to_float is ggml's bit for bit).
struct ScaledLevels {
  float scale[8];
  int8_t v[128];
};

struct ScaledFormat {
  void (*decode)(const void* block, ScaledLevels& out);
  int block;         // elements per block (32, 64 or 128)
  int sub;           // elements per scale (16 or 32; one Q8_0 block holds whole ones)
  size_t bytes;      // bytes per block
};

// The format of such a type, or nullptr.
const ScaledFormat* scaled_format(DType type);

template <const ScaledFormat& kFormat>
void scaled_to_float(const void* src, float* y, int64_t n) {
  ScaledLevels L;
  for (int64_t i = 0; i < n / kFormat.block; ++i) {
    kFormat.decode(static_cast<const char*>(src) + i * kFormat.bytes, L);
    for (int e = 0; e < kFormat.block; ++e) *y++ = static_cast<float>(L.v[e]) * L.scale[e / kFormat.sub];
  }
}

}  // namespace qlens::quant

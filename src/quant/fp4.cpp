// The 4-bit float formats MXFP4 and NVFP4 (layouts: fp4.h). Blocks decode to
// integer levels and scales (levels.h), and to_float and from_float are the
// plain reference, with ggml's float operations, so that they equal its
// dequantization and reference quantization bit for bit
// (tests/test_quant_lowbit.cpp). ggml's quantizers ignore importance and take
// the scale from the block's largest magnitude; the weighted quantizers here
// try the scales around that one (E8M0: 2^-2 .. 2^2 times it; UE4M3: 8 codes
// either side) and keep the one with the least sum_j w_j (x_j - y_j)^2, each
// element on its nearest code (as ggml chooses it) for that scale.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "qlens/error.h"

#include "qlens/types.h"
#include "quant/fp4.h"
#include "quant/levels.h"
#include "quant/block_rows.h"
#include "quant/registry.h"

namespace qlens::quant {

namespace fp4 {

float e8m0_half(uint8_t e) {
  // 2^(e - 128): exponent field e - 1 for e >= 2; below, the subnormals 2^-128 and 2^-127.
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  return std::bit_cast<float>(bits);
}

uint8_t ue4m3_from_float(float x) {
  if (!(x > 0.0f)) return 0;
  x = std::min(x, 448.0f);
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  int exponent = static_cast<int>((bits >> 23) & 0xFF) - 127 + 7;
  if (exponent <= 0) {  // subnormal: mantissa round(x * 2^9), 1..7
    const int mantissa = std::min(static_cast<int>(x * 512.0f + 0.5f), 7);
    return mantissa < 1 ? 0 : static_cast<uint8_t>(mantissa);
  }
  if (exponent >= 15) return 0x7E;
  int mantissa = static_cast<int>((bits >> 20) & 7) + static_cast<int>((bits >> 19) & 1);  // half up
  if (mantissa > 7) {
    mantissa = 0;
    if (++exponent >= 15) return 0x7E;
  }
  return static_cast<uint8_t>((exponent << 3) | mantissa);
}

float ue4m3_half(uint8_t x) {
  if (x == 0 || x == 0x7F) return 0.0f;
  const int exponent = (x >> 3) & 0xF, mantissa = x & 7;
  const float raw = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                  : std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  return raw * 0.5f;
}

}  // namespace fp4

namespace {

using namespace fp4;

void decode_mxfp4(const void* block, ScaledLevels& L) {
  const auto b = load_block<BlockMXFP4>(block, 0);
  L.scale[0] = e8m0_half(b.e);
  for (int j = 0; j < 16; ++j) {
    L.v[j] = kE2M1Doubled[b.qs[j] & 0xF];
    L.v[j + 16] = kE2M1Doubled[b.qs[j] >> 4];
  }
}

void decode_nvfp4(const void* block, ScaledLevels& L) {
  const auto b = load_block<BlockNVFP4>(block, 0);
  for (int s = 0; s < 4; ++s) {
    L.scale[s] = ue4m3_half(b.d[s]);
    for (int j = 0; j < 8; ++j) {
      L.v[16 * s + j] = kE2M1Doubled[b.qs[8 * s + j] & 0xF];
      L.v[16 * s + j + 8] = kE2M1Doubled[b.qs[8 * s + j] >> 4];
    }
  }
}

constexpr ScaledFormat kMxfp4Levels{decode_mxfp4, 32, 32, sizeof(BlockMXFP4)};
constexpr ScaledFormat kNvfp4Levels{decode_nvfp4, 64, 16, sizeof(BlockNVFP4)};

// The code of x nearest to value * d, the first of equals (ggml's order:
// +0 before -0, smaller magnitudes first).
uint8_t nearest_code(float x, float d) {
  uint8_t best = 0;
  float best_err = std::fabs(static_cast<float>(kE2M1Doubled[0]) * d - x);
  for (uint8_t c = 1; c < 16; ++c) {
    const float err = std::fabs(static_cast<float>(kE2M1Doubled[c]) * d - x);
    if (err < best_err) {
      best = c;
      best_err = err;
    }
  }
  return best;
}

// n elements (n / 2 code bytes, low nibbles first) on their nearest codes for d.
void encode_codes(const float* x, int n, float d, uint8_t* qs) {
  for (int j = 0; j < n / 2; ++j)
    qs[j] = static_cast<uint8_t>(nearest_code(x[j], d) | (nearest_code(x[j + n / 2], d) << 4));
}

// ggml's exponent for a block: floor(log2(amax)) - 2 + 127 (0 for a zero block), kept in range.
uint8_t mxfp4_exponent(float amax) {
  if (!(amax > 0.0f)) return 0;
  const float e = std::floor(std::log2(amax)) - 2 + 127;
  return static_cast<uint8_t>(std::clamp(e, 0.0f, 254.0f));
}

void mxfp4_from_float(const float* x, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    BlockMXFP4 b{};
    b.e = mxfp4_exponent(block_amax(x, 32));
    encode_codes(x, 32, e8m0_half(b.e), b.qs);
    std::memcpy(static_cast<char*>(dst) + i * sizeof b, &b, sizeof b);
  }
}

void nvfp4_from_float(const float* x, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / 64; ++i) {
    BlockNVFP4 b{};
    for (int s = 0; s < 4; ++s, x += 16) {
      b.d[s] = ue4m3_from_float(block_amax(x, 16) / 6.0f);
      encode_codes(x, 16, ue4m3_half(b.d[s]), b.qs + 8 * s);
    }
    std::memcpy(static_cast<char*>(dst) + i * sizeof b, &b, sizeof b);
  }
}

// sum w (x - y)^2 with each element on its nearest code for d.
double coded_error(const float* x, const float* w, int n, float d) {
  double err = 0;
  for (int j = 0; j < n; ++j) {
    const double e = static_cast<double>(x[j]) - static_cast<double>(kE2M1Doubled[nearest_code(x[j], d)]) * d;
    err += w[j] * e * e;
  }
  return err;
}

// The scale byte in [lo, hi] (valid codes of the format) with the least error.
template <float (*kScale)(uint8_t)>
uint8_t best_scale_byte(const float* x, const float* w, int n, int lo, int hi) {
  int best = lo;
  double best_err = INFINITY;
  for (int c = lo; c <= hi; ++c) {
    const double err = coded_error(x, w, n, kScale(static_cast<uint8_t>(c)));
    if (err < best_err) {
      best_err = err;
      best = c;
    }
  }
  return static_cast<uint8_t>(best);
}

void fit_mxfp4(const float* x, const float* w, BlockMXFP4& b) {
  const int e = mxfp4_exponent(block_amax(x, 32));
  b.e = e == 0 ? 0 : best_scale_byte<e8m0_half>(x, w, 32, std::max(e - 2, 0), std::min(e + 2, 254));
  encode_codes(x, 32, e8m0_half(b.e), b.qs);
}

void fit_nvfp4(const float* x, const float* w, BlockNVFP4& b) {
  for (int s = 0; s < 4; ++s) {
    const float* xs = x + 16 * s;
    const int c = ue4m3_from_float(block_amax(xs, 16) / 6.0f);
    b.d[s] = c == 0 ? 0 : best_scale_byte<ue4m3_half>(xs, w + 16 * s, 16, std::max(c - 8, 1), std::min(c + 8, 0x7E));
    encode_codes(xs, 16, ue4m3_half(b.d[s]), b.qs + 8 * s);
  }
}


}  // namespace

const ScaledFormat* fp4_scaled_format(DType type) {
  if (type == DType::MXFP4) return &kMxfp4Levels;
  if (type == DType::NVFP4) return &kNvfp4Levels;
  return nullptr;
}

std::span<const Binding> fp4_bindings() {
  static constexpr Binding kTable[] = {
      {DType::MXFP4, {scaled_to_float<kMxfp4Levels>, mxfp4_from_float, quantize_block_rows<32, BlockMXFP4, fit_mxfp4>, DType::Q8_0,
                      alignof(BlockMXFP4)}},
      {DType::NVFP4, {scaled_to_float<kNvfp4Levels>, nvfp4_from_float, quantize_block_rows<64, BlockNVFP4, fit_nvfp4>, DType::Q8_0,
                      alignof(BlockNVFP4)}},
  };
  return kTable;
}

}  // namespace qlens::quant

// ggml's one-scale low-bit formats: Q1_0, Q2_0 and the ternary TQ1_0 and
// TQ2_0 (layouts: lowbit.h). Blocks decode to integer levels (levels.h) and
// to_float and from_float are the plain reference, with ggml's float
// operations, so that they equal its dequantization and its reference
// quantization bit for bit
// (tests/test_quant_lowbit.cpp). The weighted quantizers minimize
// sum_j w_j (x_j - y_j)^2 with w the importance (1 without an imatrix),
// which ggml's quantizers for these types ignore:
//   Q1_0   signs, and the scale that is optimal for them (closed form);
//   Q2_0   fit_scaled on the levels -1..2 (scaled_search.h);
//   TQ1_0, TQ2_0  the exact optimum on the levels -1, 0, 1: at the best
//          scale an element is nonzero iff |x| passes d / 2, so the best of
//          the n + 1 sets "the k largest |x|" is the optimum.
// Each scale is then rounded to fp16, the neighbouring fp16 values tried,
// and the codes chosen again for the scale kept.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "qlens/error.h"

#include "qlens/types.h"
#include "quant/lowbit.h"
#include "quant/block_rows.h"
#include "quant/registry.h"
#include "quant/scaled_search.h"

namespace qlens::quant {
namespace {

using namespace lowbit;

void decode_q1_0(const void* block, ScaledLevels& L) {
  const auto b = load_block<BlockQ1_0>(block, 0);
  std::fill(L.scale, L.scale + 4, fp16_to_fp32(b.d));
  for (int j = 0; j < 128; ++j) L.v[j] = static_cast<int8_t>(b.qs[j / 8] >> (j % 8) & 1 ? 1 : -1);
}

void decode_q2_0(const void* block, ScaledLevels& L) {
  const auto b = load_block<BlockQ2_0>(block, 0);
  std::fill(L.scale, L.scale + 2, fp16_to_fp32(b.d));
  for (int j = 0; j < 64; ++j) L.v[j] = static_cast<int8_t>((b.qs[j / 4] >> (2 * (j % 4)) & 3) - 1);
}

constexpr ScaledFormat kQ1_0Levels{decode_q1_0, 128, 32, sizeof(BlockQ1_0)};
constexpr ScaledFormat kQ2_0Levels{decode_q2_0, 64, 32, sizeof(BlockQ2_0)};

// TQ2_0: byte 32 (e / 128) + e % 32, bits 2 ((e / 32) % 4) hold c, level c - 1.
void decode_tq2_0(const void* block, Levels& L) {
  const auto b = load_block<BlockTQ2_0>(block, 0);
  L.d = fp16_to_fp32(b.d);
  for (int e = 0; e < 256; ++e) L.v[e] = static_cast<int8_t>((b.qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4)) & 3) - 1);
}

// Base-3 digit n of a TQ1_0 byte, 0..2.
int ternary_digit(uint8_t byte, int n) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const auto shifted = static_cast<uint8_t>(byte * kPow3[n]);
  return (shifted * 3) >> 8;
}

void decode_tq1_0(const void* block, Levels& L) {
  const auto b = load_block<BlockTQ1_0>(block, 0);
  L.d = fp16_to_fp32(b.d);
  int8_t* v = L.v;
  auto put = [&](const uint8_t* bytes, int count, int digits) {
    for (int n = 0; n < digits; ++n)
      for (int m = 0; m < count; ++m) *v++ = static_cast<int8_t>(ternary_digit(bytes[m], n) - 1);
  };
  put(b.qs, 32, 5);
  put(b.qs + 32, 16, 5);
  put(b.qh, 4, 4);
}

float whole(float d, int) { return d; }

constexpr LevelFormat kTq1Levels{decode_tq1_0, 256, 1.0f, whole, 1.0f};
constexpr LevelFormat kTq2Levels{decode_tq2_0, 256, 1.0f, whole, 1.0f};

// ---- ggml's reference quantizers (from_float) ---------------------------------

void q1_0_from_float(const float* x, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / 128; ++i, x += 128) {
    BlockQ1_0 b{};
    float sum_abs = 0.0f;
    for (int j = 0; j < 128; ++j) sum_abs += std::fabs(x[j]);
    b.d = fp32_to_fp16(scaled::saturate_half(sum_abs / 128));
    for (int j = 0; j < 128; ++j)
      if (x[j] >= 0.0f) b.qs[j / 8] |= static_cast<uint8_t>(1 << (j % 8));
    std::memcpy(static_cast<char*>(dst) + i * sizeof b, &b, sizeof b);
  }
}

// C's lroundf(v) + 1 for v in [-1, 1] (and NaN), clamped to lo..hi: a code.
int round_code(float v, int lo, int hi) {
  if (v != v) return 1;
  return std::clamp(static_cast<int>(std::round(scaled::clampf(v, -4.0f, 4.0f))) + 1, lo, hi);
}

void q2_0_from_float(const float* x, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / 64; ++i, x += 64) {
    BlockQ2_0 b{};
    const float d = scaled::saturate_half(block_amax(x, 64));
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    b.d = fp32_to_fp16(d);
    for (int j = 0; j < 64; ++j) b.qs[j / 4] |= static_cast<uint8_t>(round_code(x[j] * id, 0, 3) << (2 * (j % 4)));
    std::memcpy(static_cast<char*>(dst) + i * sizeof b, &b, sizeof b);
  }
}

// TQ1_0's byte for base-3 digits t[0..count) (t[0] most significant), as
// ceil(256 * value / 243); a qh byte has 4 digits, shifted up by one.
uint8_t pack_ternary(const int* t, int count) {
  int q = 0;
  for (int k = 0; k < count; ++k) q = q * 3 + t[k];
  for (int k = count; k < 5; ++k) q *= 3;
  return static_cast<uint8_t>((q * 256 + 242) / 243);
}

// Codes 0..2 (level + 1) of a TQ block into its bytes.
void pack_tq1_0(const uint8_t* codes, BlockTQ1_0& b) {
  int t[5];
  for (int m = 0; m < 32; ++m) {
    for (int k = 0; k < 5; ++k) t[k] = codes[32 * k + m];
    b.qs[m] = pack_ternary(t, 5);
  }
  for (int m = 0; m < 16; ++m) {
    for (int k = 0; k < 5; ++k) t[k] = codes[160 + 16 * k + m];
    b.qs[32 + m] = pack_ternary(t, 5);
  }
  for (int m = 0; m < 4; ++m) {
    for (int k = 0; k < 4; ++k) t[k] = codes[240 + 4 * k + m];
    b.qh[m] = pack_ternary(t, 4);
  }
}
void pack_tq2_0(const uint8_t* codes, BlockTQ2_0& b) {
  std::fill(std::begin(b.qs), std::end(b.qs), 0);
  for (int e = 0; e < 256; ++e) b.qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(codes[e] << (2 * ((e / 32) % 4)));
}
void pack_q2_0(const uint8_t* codes, BlockQ2_0& b) {
  std::fill(std::begin(b.qs), std::end(b.qs), 0);
  for (int j = 0; j < 64; ++j) b.qs[j / 4] |= static_cast<uint8_t>(codes[j] << (2 * (j % 4)));
}

template <class Block, void (*kPack)(const uint8_t*, Block&)>
void ternary_from_float(const float* x, void* dst, int64_t n) {
  uint8_t codes[256];
  for (int64_t i = 0; i < n / 256; ++i, x += 256) {
    Block b{};
    const float d = scaled::saturate_half(block_amax(x, 256));
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b.d = fp32_to_fp16(d);
    for (int j = 0; j < 256; ++j) codes[j] = static_cast<uint8_t>(round_code(x[j] * id, 0, 2));
    kPack(codes, b);
    std::memcpy(static_cast<char*>(dst) + i * sizeof b, &b, sizeof b);
  }
}

// ---- weighted quantizers ---------------------------------------------------------

// sum w (x - d * level)^2 for the nearest levels lo..hi of x / d; the codes (level - lo).
double nearest_levels(const float* x, const float* w, int n, float d, int lo, int hi, uint8_t* codes) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  double err = 0;
  for (int j = 0; j < n; ++j) {
    const int l = scaled::round_clamp(x[j] * id, lo, hi);
    codes[j] = static_cast<uint8_t>(l - lo);
    const double e = static_cast<double>(x[j]) - static_cast<double>(d) * l;
    err += w[j] * e * e;
  }
  return err;
}

// The fp16 scale nearest to d or one of its two neighbours, whichever gives
// the nearest levels lo..hi the least error; their codes. Returns the bits.
uint16_t best_half_scale(const float* x, const float* w, int n, float d, int lo, int hi, uint8_t* codes) {
  const uint16_t h = fp32_to_fp16(scaled::saturate_half(d));
  uint8_t cand[256];
  uint16_t best = h;
  double best_err = nearest_levels(x, w, n, fp16_to_fp32(h), lo, hi, codes);
  for (int step : {-1, 1}) {
    const auto other = static_cast<uint16_t>(h + step);
    if ((other & 0x7fff) >= 0x7c00 || ((other ^ h) & 0x8000)) continue;  // not past Inf or through 0
    const double err = nearest_levels(x, w, n, fp16_to_fp32(other), lo, hi, cand);
    if (err < best_err) {
      best_err = err;
      best = other;
      std::copy(cand, cand + n, codes);
    }
  }
  return best;
}

// Q1_0: the signs, and d = sum w |x| / sum w (the least-squares scale for them).
void fit_q1_0(const float* x, const float* w, BlockQ1_0& b) {
  double swx = 0, sw = 0;
  for (int j = 0; j < 128; ++j) {
    swx += static_cast<double>(w[j]) * std::fabs(x[j]);
    sw += w[j];
  }
  const float d = sw > 0 ? static_cast<float>(swx / sw) : 0.0f;
  // The signs are fixed by x; only the scale is rounded (levels -1 and +1).
  uint8_t codes[128];
  float ax[128];
  for (int j = 0; j < 128; ++j) ax[j] = std::fabs(x[j]);
  b.d = best_half_scale(ax, w, 128, d, 1, 1, codes);
  std::fill(std::begin(b.qs), std::end(b.qs), 0);
  for (int j = 0; j < 128; ++j)
    if (x[j] >= 0.0f) b.qs[j / 8] |= static_cast<uint8_t>(1 << (j % 8));
}

void fit_q2_0(const float* x, const float* w, BlockQ2_0& b) {
  uint8_t codes[64];
  const float d = fp16_to_fp32(scaled::fit_scaled<64>(x, w, scaled::IntGrid{-1, 2}, codes));
  b.d = best_half_scale(x, w, 64, d, -1, 2, codes);
  pack_q2_0(codes, b);
}

// The least-squares scale of the best ternary assignment (see the top).
float best_ternary_scale(const float* x, const float* w) {
  int order[256];
  std::iota(order, order + 256, 0);
  std::sort(order, order + 256, [&](int a, int c) { return std::fabs(x[a]) > std::fabs(x[c]); });
  double swx = 0, sw = 0, best_gain = 0, best_d = 0;
  for (int k = 0; k < 256; ++k) {
    const int j = order[k];
    swx += static_cast<double>(w[j]) * std::fabs(x[j]);
    sw += w[j];
    if (sw > 0 && swx * swx / sw > best_gain) {
      best_gain = swx * swx / sw;
      best_d = swx / sw;
    }
  }
  return static_cast<float>(best_d);
}

template <class Block, void (*kPack)(const uint8_t*, Block&)>
void fit_ternary(const float* x, const float* w, Block& b) {
  uint8_t codes[256];
  b.d = best_half_scale(x, w, 256, best_ternary_scale(x, w), -1, 1, codes);
  kPack(codes, b);
}


}  // namespace

const ScaledFormat* lowbit_scaled_format(DType type) {
  if (type == DType::Q1_0) return &kQ1_0Levels;
  if (type == DType::Q2_0) return &kQ2_0Levels;
  return nullptr;
}

const LevelFormat* lowbit_level_format(DType type) {
  if (type == DType::TQ1_0) return &kTq1Levels;
  if (type == DType::TQ2_0) return &kTq2Levels;
  return nullptr;
}

std::span<const Binding> lowbit_bindings() {
  static constexpr Binding kTable[] = {
      {DType::Q1_0, {scaled_to_float<kQ1_0Levels>, q1_0_from_float, quantize_block_rows<128, BlockQ1_0, fit_q1_0>, DType::Q8_0,
                     alignof(BlockQ1_0)}},
      {DType::Q2_0, {scaled_to_float<kQ2_0Levels>, q2_0_from_float, quantize_block_rows<64, BlockQ2_0, fit_q2_0>, DType::Q8_0,
                     alignof(BlockQ2_0)}},
      {DType::TQ1_0, {levels_to_float<kTq1Levels, sizeof(BlockTQ1_0)>, ternary_from_float<BlockTQ1_0, pack_tq1_0>,
                      quantize_block_rows<256, BlockTQ1_0, fit_ternary<BlockTQ1_0, pack_tq1_0>>, DType::Q8_K,
                      alignof(BlockTQ1_0)}},
      {DType::TQ2_0, {levels_to_float<kTq2Levels, sizeof(BlockTQ2_0)>, ternary_from_float<BlockTQ2_0, pack_tq2_0>,
                      quantize_block_rows<256, BlockTQ2_0, fit_ternary<BlockTQ2_0, pack_tq2_0>>, DType::Q8_K,
                      alignof(BlockTQ2_0)}},
  };
  return kTable;
}

}  // namespace qlens::quant

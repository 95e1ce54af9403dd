// K-quant tests (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_XS).
//
//  - Layout: super-blocks assembled byte by byte from the ggml format's
//    description (written here independently of src/quant), dequantized and
//    compared bit for bit with values computed from the format's formulas;
//    literal 6-bit scale packings decoded by hand.
//  - Q8_K from_float against a reference written here (ggml's rules).
//  - Round trips: RMSE / rms(x) on Gaussian and outlier rows under the bounds
//    of docs/QUANTIZATION.md, ordered by bits per weight.
//  - Importance: weighted error (sum imp (x - y)^2) lower with the importance
//    than without, on real rows of stories260K and synthetic outlier rows.
//  - Edge cases: zero and constant rows, huge and tiny magnitudes, extreme
//    finite values, several super-blocks per row.
//  - gguf-py: our to_float bit-identical to gguf.quants.dequantize (skipped
//    when python3 with gguf and numpy is missing).
//  - mul_mat with each weight type equals mul_mat with its dequantized F32
//    weight.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/isa.h"
#include "backend/cpu/matmul.h"
#include "qlens/backend.h"
#include "qlens/gguf.h"
#include "qlens/tensor.h"
#include "qlens/types.h"
#include "quant/kquants.h"
#include "quant/search_simd.h"
#include "test_util.h"

namespace qlens {
namespace {

constexpr int64_t QK = 256;
const DType kWeightTypes[] = {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS};
const DType kAllTypes[] = {DType::Q2_K, DType::Q3_K, DType::Q4_K,  DType::Q5_K,
                           DType::Q6_K, DType::Q8_K, DType::IQ4_XS};

// ggml's kvalues_iq4nl, typed from the format description.
constexpr int kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

std::vector<uint8_t> quantize(DType t, const std::vector<float>& x, int64_t nrows, const float* imp) {
  const int64_t n = static_cast<int64_t>(x.size()) / nrows;
  std::vector<uint8_t> q(row_bytes(t, n) * nrows);
  type_traits(t).quantize(x.data(), q.data(), nrows, n, imp);
  return q;
}
std::vector<uint8_t> from_float(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
  type_traits(t).from_float(x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}
std::vector<float> dequantize(DType t, const std::vector<uint8_t>& q) {
  const TypeTraits& tt = type_traits(t);
  std::vector<float> y(q.size() / tt.block_bytes * tt.block_size);
  tt.to_float(q.data(), y.data(), static_cast<int64_t>(y.size()));
  return y;
}

// sqrt(sum w (x - y)^2 / sum w x^2); w = nullptr: all 1. w is per column of rows of length n.
double rel_error(const std::vector<float>& x, const std::vector<float>& y, const float* w = nullptr, int64_t n = 1) {
  double e = 0, s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double wi = w ? w[i % n] : 1.0;
    e += wi * (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    s += wi * static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(e / s);
}

std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, sigma);
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng);
  return x;
}
// Gaussian with 1% of the values 10x larger (as outlier columns of real weights).
std::vector<float> with_outliers(size_t n, uint32_t seed) {
  std::vector<float> x = gaussian(n, seed);
  std::mt19937 rng(seed + 1);
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  for (size_t k = 0; k < n / 100; ++k) x[pick(rng)] *= 10.0f;
  return x;
}
// Random positive importance; one column in ten is 100x more important.
std::vector<float> importance(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.2f, 1.0f);
  std::vector<float> imp(n);
  for (auto& v : imp) v = u(rng);
  for (int64_t i = 0; i < n; i += 10) imp[(i + seed) % n] *= 100.0f;
  return imp;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// ---------------------------------------------------------------------------
// Layout: blocks assembled by hand

// One hand-assembled super-block and the values the format says it holds.
struct HandBlock {
  std::vector<uint8_t> bytes;
  std::vector<float> expected;
};

void put16(std::vector<uint8_t>& b, size_t off, uint16_t v) {
  b[off] = static_cast<uint8_t>(v & 0xff);
  b[off + 1] = static_cast<uint8_t>(v >> 8);
}
// A random normal, positive fp16 scale between 2^-8 and 2^2.
uint16_t random_half(std::mt19937& rng) {
  std::uniform_int_distribution<int> exp(7, 17), mant(0, 1023);
  return static_cast<uint16_t>((exp(rng) << 10) | mant(rng));
}
int rnd(std::mt19937& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

// Q2_K, 84 bytes: scales[16] at 0 (scale | min << 4), qs[64] at 16, d at 80, dmin at 82.
// Byte 16 + 32 h + l of qs holds elements 128 h + l, +32, +64, +96 in bits 0-1, 2-3, 4-5, 6-7.
// x = d * scale_j * q - dmin * min_j for sub-block j = e / 16.
HandBlock hand_q2k(std::mt19937& rng) {
  HandBlock h{std::vector<uint8_t>(84, 0), std::vector<float>(QK)};
  int sc[16], mn[16], q[QK];
  for (int j = 0; j < 16; ++j) sc[j] = rnd(rng, 0, 15), mn[j] = rnd(rng, 0, 15);
  for (int& v : q) v = rnd(rng, 0, 3);
  const uint16_t d = random_half(rng), dmin = random_half(rng);
  for (int j = 0; j < 16; ++j) h.bytes[j] = static_cast<uint8_t>(sc[j] | (mn[j] << 4));
  for (int half = 0; half < 2; ++half)
    for (int l = 0; l < 32; ++l)
      for (int k = 0; k < 4; ++k) h.bytes[16 + 32 * half + l] |= static_cast<uint8_t>(q[128 * half + 32 * k + l] << (2 * k));
  put16(h.bytes, 80, d);
  put16(h.bytes, 82, dmin);
  for (int e = 0; e < QK; ++e) {
    const float dl = fp16_to_fp32(d) * sc[e / 16], ml = fp16_to_fp32(dmin) * mn[e / 16];
    h.expected[e] = dl * q[e] - ml;
  }
  return h;
}

// Q3_K, 110 bytes: hmask[32] at 0, qs[64] at 32, scales[12] at 96, d at 108.
// Value v in -4..3: low 2 bits (v, or v + 4 when v < 0) in qs as in Q2_K; the
// hmask bit (set when v >= 0) of element 32 k + l is bit k of hmask byte l.
// Scale j (6 bits, minus 32): low 4 bits in byte 96 + j (j < 8) or the high
// nibble of byte 96 + j - 8; high 2 bits in byte 104 + j % 4 at bit 2 (j / 4).
HandBlock hand_q3k(std::mt19937& rng) {
  HandBlock h{std::vector<uint8_t>(110, 0), std::vector<float>(QK)};
  int s[16], v[QK];
  for (int& x : s) x = rnd(rng, 0, 63);
  for (int& x : v) x = rnd(rng, -4, 3);
  const uint16_t d = random_half(rng);
  for (int k = 0; k < 8; ++k)
    for (int l = 0; l < 32; ++l)
      if (v[32 * k + l] >= 0) h.bytes[l] |= static_cast<uint8_t>(1 << k);
  for (int half = 0; half < 2; ++half)
    for (int l = 0; l < 32; ++l)
      for (int k = 0; k < 4; ++k) {
        const int x = v[128 * half + 32 * k + l];
        h.bytes[32 + 32 * half + l] |= static_cast<uint8_t>((x < 0 ? x + 4 : x) << (2 * k));
      }
  for (int j = 0; j < 16; ++j) {
    if (j < 8)
      h.bytes[96 + j] |= static_cast<uint8_t>(s[j] & 15);
    else
      h.bytes[96 + j - 8] |= static_cast<uint8_t>((s[j] & 15) << 4);
    h.bytes[104 + j % 4] |= static_cast<uint8_t>((s[j] >> 4) << (2 * (j / 4)));
  }
  put16(h.bytes, 108, d);
  for (int e = 0; e < QK; ++e) h.expected[e] = fp16_to_fp32(d) * (s[e / 16] - 32) * v[e];
  return h;
}

// Q4_K (144 bytes: d at 0, dmin at 2, scales[12] at 4, qs[128] at 16) and Q5_K
// (176 bytes: the same, then qh[32] at 16 and qs[128] at 48). Scales and mins
// (6 bits each), for j < 4: byte 4 + j = scale_j | (scale_{j+4} >> 4) << 6,
// byte 8 + j = min_j | (min_{j+4} >> 4) << 6, byte 12 + j = (scale_{j+4} & 15)
// | (min_{j+4} & 15) << 4. qs byte 32 c + l: element 64 c + l in the low
// nibble, 64 c + 32 + l in the high one. Q5_K's 5th bit of element 32 k + l:
// bit k of qh byte l. x = d * scale_j * q - dmin * min_j, j = e / 32.
HandBlock hand_q45k(std::mt19937& rng, bool five) {
  const size_t qs_at = five ? 48 : 16;
  HandBlock h{std::vector<uint8_t>(five ? 176 : 144, 0), std::vector<float>(QK)};
  int sc[8], mn[8], q[QK];
  for (int j = 0; j < 8; ++j) sc[j] = rnd(rng, 0, 63), mn[j] = rnd(rng, 0, 63);
  for (int& v : q) v = rnd(rng, 0, five ? 31 : 15);
  const uint16_t d = random_half(rng), dmin = random_half(rng);
  put16(h.bytes, 0, d);
  put16(h.bytes, 2, dmin);
  for (int j = 0; j < 4; ++j) {
    h.bytes[4 + j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    h.bytes[8 + j] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    h.bytes[12 + j] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      h.bytes[qs_at + 32 * c + l] = static_cast<uint8_t>((q[64 * c + l] & 15) | ((q[64 * c + 32 + l] & 15) << 4));
  if (five)
    for (int k = 0; k < 8; ++k)
      for (int l = 0; l < 32; ++l) h.bytes[16 + l] |= static_cast<uint8_t>((q[32 * k + l] >> 4) << k);
  for (int e = 0; e < QK; ++e) {
    const float dl = fp16_to_fp32(d) * sc[e / 32], ml = fp16_to_fp32(dmin) * mn[e / 32];
    h.expected[e] = dl * q[e] - ml;
  }
  return h;
}

// Q6_K, 210 bytes: ql[128] at 0, qh[64] at 128, int8 scales[16] at 192, d at 208.
// u = v + 32 (v in -32..31). For each half h (elements 128 h ..) and l < 32:
// ql[64 h + l] = low4(u[l]) | low4(u[l + 64]) << 4, ql[64 h + 32 + l] =
// low4(u[l + 32]) | low4(u[l + 96]) << 4, qh[32 h + l] = high2 of u[l], u[l + 32],
// u[l + 64], u[l + 96] at bits 0, 2, 4, 6 (indices within the half).
// x = d * scale_j * v, j = e / 16.
HandBlock hand_q6k(std::mt19937& rng) {
  HandBlock h{std::vector<uint8_t>(210, 0), std::vector<float>(QK)};
  int sc[16], v[QK];
  for (int& x : sc) x = rnd(rng, -128, 127);
  for (int& x : v) x = rnd(rng, -32, 31);
  const uint16_t d = random_half(rng);
  for (int half = 0; half < 2; ++half) {
    const int* u0 = v + 128 * half;
    auto u = [&](int i) { return u0[i] + 32; };
    for (int l = 0; l < 32; ++l) {
      h.bytes[64 * half + l] = static_cast<uint8_t>((u(l) & 15) | ((u(l + 64) & 15) << 4));
      h.bytes[64 * half + 32 + l] = static_cast<uint8_t>((u(l + 32) & 15) | ((u(l + 96) & 15) << 4));
      h.bytes[128 + 32 * half + l] =
          static_cast<uint8_t>((u(l) >> 4) | ((u(l + 32) >> 4) << 2) | ((u(l + 64) >> 4) << 4) | ((u(l + 96) >> 4) << 6));
    }
  }
  for (int j = 0; j < 16; ++j) h.bytes[192 + j] = static_cast<uint8_t>(static_cast<int8_t>(sc[j]));
  put16(h.bytes, 208, d);
  for (int e = 0; e < QK; ++e) h.expected[e] = fp16_to_fp32(d) * sc[e / 16] * v[e];
  return h;
}

// IQ4_XS, 136 bytes: d at 0, scales_h (u16, little endian) at 2, scales_l[4]
// at 4, qs[128] at 8. Scale j (6 bits, minus 32): low 4 bits in scales_l[j / 2]
// (low nibble for even j), high 2 bits at bit 2 j of scales_h. qs byte
// 8 + 16 b + l: element 32 b + l (low nibble), 32 b + 16 + l (high).
// x = d * (scale_j - 32) * kvalues[index], j = e / 32.
HandBlock hand_iq4xs(std::mt19937& rng) {
  HandBlock h{std::vector<uint8_t>(136, 0), std::vector<float>(QK)};
  int s[8], idx[QK];
  for (int& x : s) x = rnd(rng, 0, 63);
  for (int& x : idx) x = rnd(rng, 0, 15);
  const uint16_t d = random_half(rng);
  put16(h.bytes, 0, d);
  uint16_t scales_h = 0;
  for (int j = 0; j < 8; ++j) {
    h.bytes[4 + j / 2] |= static_cast<uint8_t>((s[j] & 15) << (4 * (j % 2)));
    scales_h = static_cast<uint16_t>(scales_h | ((s[j] >> 4) << (2 * j)));
  }
  put16(h.bytes, 2, scales_h);
  for (int b = 0; b < 8; ++b)
    for (int l = 0; l < 16; ++l) h.bytes[8 + 16 * b + l] = static_cast<uint8_t>(idx[32 * b + l] | (idx[32 * b + 16 + l] << 4));
  for (int e = 0; e < QK; ++e) h.expected[e] = fp16_to_fp32(d) * (s[e / 32] - 32) * kIq4Levels[idx[e]];
  return h;
}

// Q8_K, 292 bytes: float d at 0, int8 qs[256] at 4, int16 bsums[16] at 260. x = d * q.
HandBlock hand_q8k(std::mt19937& rng) {
  HandBlock h{std::vector<uint8_t>(292, 0), std::vector<float>(QK)};
  const float d = std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng);
  std::memcpy(h.bytes.data(), &d, 4);
  for (int e = 0; e < QK; ++e) {
    const int q = rnd(rng, -128, 127);
    h.bytes[4 + e] = static_cast<uint8_t>(static_cast<int8_t>(q));
    h.expected[e] = d * q;
  }
  return h;
}

HandBlock hand_block(DType t, std::mt19937& rng) {
  switch (t) {
    case DType::Q2_K: return hand_q2k(rng);
    case DType::Q3_K: return hand_q3k(rng);
    case DType::Q4_K: return hand_q45k(rng, false);
    case DType::Q5_K: return hand_q45k(rng, true);
    case DType::Q6_K: return hand_q6k(rng);
    case DType::Q8_K: return hand_q8k(rng);
    default: return hand_iq4xs(rng);
  }
}

TEST(KQuantLayout, TraitsAndSizes) {
  static_assert(sizeof(quant::kq::BlockQ2K) == 84 && sizeof(quant::kq::BlockQ3K) == 110 &&
                sizeof(quant::kq::BlockQ4K) == 144 && sizeof(quant::kq::BlockQ5K) == 176 &&
                sizeof(quant::kq::BlockQ6K) == 210 && sizeof(quant::kq::BlockQ8K) == 292 &&
                sizeof(quant::kq::BlockIQ4XS) == 136);
  const size_t bytes[] = {84, 110, 144, 176, 210, 292, 136};
  for (size_t i = 0; i < std::size(kAllTypes); ++i) {
    const TypeTraits& tt = type_traits(kAllTypes[i]);
    SCOPED_TRACE(tt.name);
    EXPECT_EQ(tt.block_size, 256);
    EXPECT_EQ(tt.block_bytes, bytes[i]);
    EXPECT_TRUE(tt.to_float && tt.from_float && tt.quantize);
    EXPECT_EQ(tt.vec_dot_type, kAllTypes[i] == DType::Q8_K ? DType::F32 : DType::Q8_K);
  }
}

TEST(KQuantLayout, HandBuiltBlocks) {
  for (DType t : kAllTypes) {
    SCOPED_TRACE(type_name(t));
    std::mt19937 rng(static_cast<uint32_t>(t) * 7919u);
    // Three blocks back to back (block stride), each fully random.
    std::vector<uint8_t> bytes;
    std::vector<float> expected;
    for (int b = 0; b < 3; ++b) {
      const HandBlock h = hand_block(t, rng);
      ASSERT_EQ(h.bytes.size(), type_traits(t).block_bytes);
      bytes.insert(bytes.end(), h.bytes.begin(), h.bytes.end());
      expected.insert(expected.end(), h.expected.begin(), h.expected.end());
    }
    const std::vector<float> got = dequantize(t, bytes);
    int bad = 0;
    for (size_t e = 0; e < expected.size(); ++e)
      if (!same_bits(got[e], expected[e]) && bad++ < 5)
        ADD_FAILURE() << "element " << e << ": got " << got[e] << ", expected " << expected[e];
    EXPECT_EQ(bad, 0);
  }
}

// Literal packings, decoded by hand from the byte values.
TEST(KQuantLayout, PackedScalesByHand) {
  const uint16_t one = 0x3c00;  // fp16 1.0
  {  // Q4_K: all quants 1, d = 1, dmin = 0: x = scale of the sub-block; then d = 0, dmin = 1: x = -min.
    std::vector<uint8_t> b(144, 0x11);
    const uint8_t scales[12] = {0xC1, 0x42, 0x83, 0x04, 0x45, 0xC6, 0x07, 0x88, 0x9A, 0xBC, 0xDE, 0xF0};
    std::memcpy(&b[4], scales, 12);
    put16(b, 0, one);
    put16(b, 2, 0);
    // scale_j = byte j & 63 (j < 4); (byte j + 4 & 15) | (byte j - 4 >> 6) << 4 (j >= 4)
    const float sc[8] = {1, 2, 3, 4, 0xA + 3 * 16, 0xC + 1 * 16, 0xE + 2 * 16, 0};
    // min_j = byte j + 4 & 63 (j < 4); (byte j + 4 >> 4) | (byte j >> 6) << 4 (j >= 4)
    const float mn[8] = {5, 6, 7, 8, 0x9 + 1 * 16, 0xB + 3 * 16, 0xD, 0xF + 2 * 16};
    std::vector<float> y = dequantize(DType::Q4_K, b);
    for (int e = 0; e < QK; ++e) ASSERT_EQ(y[e], sc[e / 32]) << e;
    put16(b, 0, 0);
    put16(b, 2, one);
    y = dequantize(DType::Q4_K, b);
    for (int e = 0; e < QK; ++e) ASSERT_EQ(y[e], -mn[e / 32]) << e;
  }
  {  // Q3_K: hmask all set, every 2-bit quant 1: x = scale_j - 32.
    std::vector<uint8_t> b(110, 0);
    std::fill(b.begin(), b.begin() + 32, 0xff);
    std::fill(b.begin() + 32, b.begin() + 96, 0x55);
    const uint8_t scales[12] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE, 0xE4, 0x1B, 0x00, 0xFF};
    std::memcpy(&b[96], scales, 12);
    put16(b, 108, one);
    // Low nibbles 0, 2, .., 14 (bytes 0..7 low), 1, 3, .., 15 (high); high bits from
    // 0xE4 (0,1,2,3 by j / 4), 0x1B (3,2,1,0), 0x00, 0xFF for j % 4 = 0, 1, 2, 3.
    const float expect[16] = {-32, 18, -28, 22, -8, 10, -20, 30, 1, -13, -27, 23, 25, -21, -19, 31};
    const std::vector<float> y = dequantize(DType::Q3_K, b);
    for (int e = 0; e < QK; ++e) ASSERT_EQ(y[e], expect[e / 16]) << e;
  }
  {  // IQ4_XS: every index 8 (level 1), d = 1: x = scale_j - 32.
    std::vector<uint8_t> b(136, 0x88);
    put16(b, 0, one);
    put16(b, 2, 0xE41B);  // high bits 3, 2, 1, 0, 0, 1, 2, 3
    const uint8_t scales_l[4] = {0x10, 0x32, 0x54, 0x76};
    std::memcpy(&b[4], scales_l, 4);
    const float expect[8] = {16, 1, -14, -29, -28, -11, 6, 23};
    const std::vector<float> y = dequantize(DType::IQ4_XS, b);
    for (int e = 0; e < QK; ++e) ASSERT_EQ(y[e], expect[e / 32]) << e;
  }
}

// ---------------------------------------------------------------------------
// Q8_K: ggml's quantize_row_q8_K_ref, written out here

std::vector<uint8_t> q8k_reference(const std::vector<float>& x) {
  std::vector<uint8_t> out;
  for (size_t b = 0; b < x.size() / QK; ++b) {
    const float* v = x.data() + b * QK;
    float amax = 0, max = 0;
    for (int i = 0; i < QK; ++i)
      if (std::fabs(v[i]) > amax) amax = std::fabs(v[i]), max = v[i];
    float d = 0;
    int8_t q[QK] = {};
    int16_t bsums[16] = {};
    if (amax != 0) {
      const float iscale = -127.0f / max;  // the largest magnitude maps to -127
      for (int i = 0; i < QK; ++i) q[i] = static_cast<int8_t>(std::min(127.0f, std::nearbyint(iscale * v[i])));
      for (int g = 0; g < 16; ++g)
        for (int i = 0; i < 16; ++i) bsums[g] = static_cast<int16_t>(bsums[g] + q[16 * g + i]);
      d = 1 / iscale;  // so d has the opposite sign of that value
    }
    const size_t at = out.size();
    out.resize(at + 292);
    std::memcpy(&out[at], &d, 4);
    std::memcpy(&out[at + 4], q, QK);
    std::memcpy(&out[at + 260], bsums, 32);
  }
  return out;
}

TEST(KQuantQ8K, MatchesReference) {
  std::vector<float> x = gaussian(QK * 40, 11);
  // Block 1: all zero. Block 2: the largest magnitude negative, halves that must
  // round to even. Block 3: two values of equal largest magnitude (the first wins).
  std::fill(x.begin() + QK, x.begin() + 2 * QK, 0.0f);
  float* b2 = x.data() + 2 * QK;
  b2[5] = -127.0f;
  b2[6] = 0.5f, b2[7] = 1.5f, b2[8] = 2.5f, b2[9] = -0.5f, b2[10] = -3.5f;
  float* b3 = x.data() + 3 * QK;
  b3[0] = 9.0f, b3[1] = -9.0f;
  for (int k = 4; k < 40; ++k)  // and a spread of magnitudes
    for (int i = 0; i < QK; ++i) x[k * QK + i] *= std::ldexp(1.0f, k - 20);
  const std::vector<uint8_t> got = from_float(DType::Q8_K, x);
  const std::vector<uint8_t> want = q8k_reference(x);
  ASSERT_EQ(got.size(), want.size());
  for (size_t b = 0; b < want.size() / 292; ++b) {
    const uint8_t* g = &got[b * 292];
    const uint8_t* w = &want[b * 292];
    EXPECT_EQ(std::memcmp(g, w, 4), 0) << "d of block " << b;
    EXPECT_EQ(std::memcmp(g + 4, w + 4, 256), 0) << "qs of block " << b;
    EXPECT_EQ(std::memcmp(g + 260, w + 260, 32), 0) << "bsums of block " << b;
  }
  // Spot checks of the conventions: block 2 has d = 1 (max -127 -> q -127, d = -(-127)/127).
  float d2;
  std::memcpy(&d2, &got[2 * 292], 4);
  EXPECT_EQ(d2, 1.0f);
  const auto* q2 = reinterpret_cast<const int8_t*>(&got[2 * 292 + 4]);
  EXPECT_EQ(q2[5], -127);
  EXPECT_EQ(q2[6], 0);    // iscale = 1: 0.5 -> 0 (ties to even)
  EXPECT_EQ(q2[7], 2);    // 1.5 -> 2
  EXPECT_EQ(q2[8], 2);    // 2.5 -> 2
  EXPECT_EQ(q2[9], 0);    // -0.5 -> 0
  EXPECT_EQ(q2[10], -4);  // -3.5 -> -4
  float d3;
  std::memcpy(&d3, &got[3 * 292], 4);
  EXPECT_EQ(d3, 1 / (-127.0f / 9.0f));  // the first of +-9 is +9: it becomes -127, d < 0
  EXPECT_EQ(reinterpret_cast<const int8_t*>(&got[3 * 292 + 4])[0], -127);
  EXPECT_EQ(reinterpret_cast<const int8_t*>(&got[3 * 292 + 4])[1], 127);
  // quantize ignores importance and equals from_float.
  const std::vector<float> imp = importance(QK * 40, 3);
  EXPECT_EQ(quantize(DType::Q8_K, x, 1, imp.data()), got);
  // to_float: d * q.
  const std::vector<float> y = dequantize(DType::Q8_K, got);
  EXPECT_LT(rel_error(x, y), 0.01);
}

// ---------------------------------------------------------------------------
// Round trips

struct Bound {
  DType type;
  double gaussian;  // RMSE / rms(x), Gaussian rows
  double outliers;  // rows with 1% outliers (10x)
};
// The largest of from_float and quantize measured on these rows (see
// docs/QUANTIZATION.md), plus a margin of about 5%.
const Bound kBounds[] = {
    {DType::Q2_K, 0.315, 0.330},    {DType::Q3_K, 0.158, 0.189},   {DType::Q4_K, 0.076, 0.094},
    {DType::Q5_K, 0.038, 0.049},    {DType::Q6_K, 0.0185, 0.0295}, {DType::IQ4_XS, 0.079, 0.114},
    {DType::Q8_K, 0.0073, 0.025},
};

TEST(KQuantRoundTrip, ErrorBounds) {
  const int64_t n = 1024, rows = 48;
  const std::vector<float> g = gaussian(n * rows, 21), o = with_outliers(n * rows, 22);
  for (const Bound& b : kBounds) {
    SCOPED_TRACE(type_name(b.type));
    const double eg_ref = rel_error(g, dequantize(b.type, from_float(b.type, g)));
    const double eg = rel_error(g, dequantize(b.type, quantize(b.type, g, rows, nullptr)));
    const double eo_ref = rel_error(o, dequantize(b.type, from_float(b.type, o)));
    const double eo = rel_error(o, dequantize(b.type, quantize(b.type, o, rows, nullptr)));
    std::printf("  %-6s gaussian: from_float %.5f quantize %.5f | outliers: from_float %.5f quantize %.5f\n",
                std::string(type_name(b.type)).c_str(), eg_ref, eg, eo_ref, eo);
    EXPECT_LT(eg_ref, b.gaussian);
    EXPECT_LT(eg, b.gaussian);
    EXPECT_LT(eo_ref, b.outliers);
    EXPECT_LT(eo, b.outliers);
  }
}

TEST(KQuantRoundTrip, MoreBitsLessError) {
  const DType order[] = {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  const int64_t n = 512, rows = 32;
  for (uint32_t seed : {31u, 32u, 33u}) {
    for (bool outliers : {false, true}) {
      const std::vector<float> x = outliers ? with_outliers(n * rows, seed) : gaussian(n * rows, seed);
      double prev = INFINITY;
      for (DType t : order) {
        const double e = rel_error(x, dequantize(t, quantize(t, x, rows, nullptr)));
        EXPECT_LT(e, prev) << type_name(t) << " seed " << seed << (outliers ? " (outliers)" : "");
        // each extra bit should roughly halve the error
        if (t != DType::Q2_K) {
          EXPECT_LT(e, 0.7 * prev) << type_name(t);
        }
        prev = e;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Importance

// Total weighted error of rows quantized with and without the importance.
struct WeightedResult {
  double with_imp = 0, without = 0;
  int rows_better = 0, rows = 0;
};
WeightedResult weighted_errors(DType t, const std::vector<float>& x, int64_t n, const std::vector<float>& imp) {
  const int64_t rows = static_cast<int64_t>(x.size()) / n;
  const std::vector<float> yi = dequantize(t, quantize(t, x, rows, imp.data()));
  const std::vector<float> yn = dequantize(t, quantize(t, x, rows, nullptr));
  WeightedResult r;
  r.rows = static_cast<int>(rows);
  for (int64_t row = 0; row < rows; ++row) {
    double ei = 0, en = 0;
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(row * n + i);
      ei += imp[i] * (static_cast<double>(x[k]) - yi[k]) * (static_cast<double>(x[k]) - yi[k]);
      en += imp[i] * (static_cast<double>(x[k]) - yn[k]) * (static_cast<double>(x[k]) - yn[k]);
    }
    r.with_imp += ei;
    r.without += en;
    r.rows_better += ei < en;
  }
  return r;
}

void expect_importance_helps(const std::vector<float>& x, int64_t n, uint32_t seed, const char* what) {
  const std::vector<float> imp = importance(n, seed);
  for (DType t : kWeightTypes) {
    const WeightedResult r = weighted_errors(t, x, n, imp);
    std::printf("  %-6s %s: weighted error with importance / without = %.3f, better on %d of %d rows\n",
                std::string(type_name(t)).c_str(), what, r.with_imp / r.without, r.rows_better, r.rows);
    EXPECT_LT(r.with_imp, 0.9 * r.without) << type_name(t) << " " << what;
    EXPECT_GT(r.rows_better, r.rows * 3 / 4) << type_name(t) << " " << what;
  }
}

TEST(KQuantImportance, SyntheticRows) {
  expect_importance_helps(gaussian(512 * 64, 41), 512, 42, "gaussian");
  expect_importance_helps(with_outliers(1024 * 32, 43), 1024, 44, "outliers");
}

TEST(KQuantImportance, Stories260KRows) {
  QLENS_REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto file = gguf::File::open(path);
  // Its rows are 64 or 172 long: concatenate the 2-D weights into rows of 256.
  std::vector<float> all;
  for (const gguf::TensorInfo& t : file->tensors()) {
    if (t.type != DType::F32 || t.n_dims != 2) continue;
    const auto* p = reinterpret_cast<const float*>(file->tensor_data(t));
    all.insert(all.end(), p, p + t.nelements());
  }
  const int64_t n = 256;
  ASSERT_GE(all.size(), static_cast<size_t>(n * 512));
  all.resize(n * 512);
  expect_importance_helps(all, n, 45, "stories260K");
}

// An importance row of zeros in one sub-block must not zero that sub-block out.
TEST(KQuantImportance, ZeroImportanceSubBlock) {
  const std::vector<float> x = gaussian(QK * 4, 47);
  std::vector<float> imp = importance(QK, 48);
  std::fill(imp.begin(), imp.begin() + 32, 0.0f);
  for (DType t : kWeightTypes) {
    const std::vector<float> y = dequantize(t, quantize(t, x, 4, imp.data()));
    std::vector<float> xs, ys;
    for (int r = 0; r < 4; ++r)
      for (int i = 0; i < 32; ++i) xs.push_back(x[r * QK + i]), ys.push_back(y[r * QK + i]);
    EXPECT_LT(rel_error(xs, ys), 0.5) << type_name(t);
  }
}

// The scale searches' AVX2 loops give the plain loops' bytes, for every
// type with and without importance (the quantized file must not depend on the
// CPU), on Gaussian rows, rows with outliers and rows of repeated values.
TEST(KQuantSearch, SimdLoopsGiveThePlainLoopsBytes) {
  std::vector<float> x = gaussian(QK * 6, 91);
  for (int i = 0; i < QK; i += 7) x[QK + i] *= 40;  // outliers in row 1
  for (int i = 0; i < QK; ++i) x[2 * QK + i] = static_cast<float>(i % 5) * 0.25f;  // repeated levels in row 2
  const std::vector<float> imp = importance(QK, 93);
  for (DType t : kWeightTypes)
    for (const float* w : {static_cast<const float*>(nullptr), imp.data()}) {
      SCOPED_TRACE(std::string(type_name(t)) + (w ? " with importance" : ""));
      const bool before = quant::set_search_simd(false);
      const auto plain = quantize(t, x, 6, w);
      quant::set_search_simd(true);
      const auto simd = quantize(t, x, 6, w);
      quant::set_search_simd(before);
      EXPECT_EQ(plain, simd);
    }
}

// ---------------------------------------------------------------------------
// Edge cases

TEST(KQuantEdge, ZeroRows) {
  const std::vector<float> x(QK * 3, 0.0f);
  const std::vector<float> imp = importance(QK * 3, 5);
  for (DType t : kAllTypes) {
    SCOPED_TRACE(type_name(t));
    for (const auto& q : {from_float(t, x), quantize(t, x, 1, nullptr), quantize(t, x, 1, imp.data())})
      for (float v : dequantize(t, q)) ASSERT_EQ(v, 0.0f);
  }
}

TEST(KQuantEdge, ConstantRows) {
  for (float c : {1.0f, -2.5f, 0.037f, 300.0f}) {
    const std::vector<float> x(QK * 2, c);
    for (DType t : kAllTypes) {
      SCOPED_TRACE(std::string(type_name(t)) + " c = " + std::to_string(c));
      EXPECT_LT(rel_error(x, dequantize(t, from_float(t, x))), 0.01);
      EXPECT_LT(rel_error(x, dequantize(t, quantize(t, x, 2, nullptr))), 0.01);
    }
  }
}

// The formats are scale-free as long as the fp16 scales are normal numbers:
// the relative error stays under the Gaussian bound from 1e-2 to 1e4.
TEST(KQuantEdge, Magnitudes) {
  for (float sigma : {1e-2f, 1e2f, 1e4f}) {
    const std::vector<float> x = gaussian(QK * 16, 51, sigma);
    for (const Bound& b : kBounds) {
      SCOPED_TRACE(std::string(type_name(b.type)) + " sigma " + std::to_string(sigma));
      EXPECT_LT(rel_error(x, dequantize(b.type, quantize(b.type, x, 4, nullptr))), b.gaussian);
      EXPECT_LT(rel_error(x, dequantize(b.type, from_float(b.type, x))), b.gaussian);
    }
  }
  // Below fp16's normal range the scales lose precision, but the error stays
  // bounded and the output finite.
  const std::vector<float> tiny = gaussian(QK * 4, 52, 1e-5f);
  for (DType t : kAllTypes) {
    const std::vector<float> y = dequantize(t, quantize(t, tiny, 1, nullptr));
    for (float v : y) ASSERT_TRUE(std::isfinite(v)) << type_name(t);
    EXPECT_LE(rel_error(tiny, y), 1.0) << type_name(t);
  }
}

// Any finite input gives finite output (values beyond a format's range saturate).
TEST(KQuantEdge, ExtremeFiniteValuesGiveNoNaN) {
  std::vector<float> x = gaussian(QK * 8, 53);
  const float specials[] = {FLT_MAX, -FLT_MAX, 1e30f, -1e20f, FLT_MIN, -FLT_MIN, 1e-40f, -1e-45f, 0.0f, -0.0f, 65504.0f, 1e8f};
  std::mt19937 rng(54);
  for (int b = 0; b < 8; ++b)
    for (int k = 0; k < 1 + 20 * b; ++k)
      x[b * QK + rnd(rng, 0, QK - 1)] = specials[rnd(rng, 0, static_cast<int>(std::size(specials)) - 1)];
  // one block of only denormals, one of only huge values
  for (int i = 0; i < QK; ++i) x[6 * QK + i] = (i % 3 - 1) * 1e-41f, x[7 * QK + i] = (i % 2 ? 1 : -1) * 3e38f;
  const std::vector<float> imp = importance(QK * 8, 55);
  for (DType t : kAllTypes) {
    int path = 0;
    for (const auto& q : {from_float(t, x), quantize(t, x, 1, nullptr), quantize(t, x, 1, imp.data())}) {
      const std::vector<float> y = dequantize(t, q);
      // Q8_K follows ggml's reference exactly: d = max / 127 times 127 may round
      // past FLT_MAX to Inf for values within an ulp of it (never NaN).
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_TRUE(t == DType::Q8_K ? !std::isnan(y[i]) : std::isfinite(y[i]))
            << type_name(t) << " path " << path << " element " << i << " x " << x[i];
      ++path;
    }
  }
}

// Rows of several super-blocks: each block uses its own slice of the
// importance, and rows are laid out back to back.
TEST(KQuantEdge, SeveralSuperBlocksPerRow) {
  const int64_t n = 4 * QK, rows = 3;
  const std::vector<float> x = with_outliers(n * rows, 61);
  const std::vector<float> imp = importance(n, 62);
  for (DType t : kAllTypes) {
    SCOPED_TRACE(type_name(t));
    const TypeTraits& tt = type_traits(t);
    for (const float* w : {static_cast<const float*>(nullptr), imp.data()}) {
      const std::vector<uint8_t> whole = quantize(t, x, rows, w);
      std::vector<uint8_t> pieces;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < n / QK; ++b) {
          std::vector<uint8_t> one(tt.block_bytes);
          tt.quantize(x.data() + r * n + b * QK, one.data(), 1, QK, w ? w + b * QK : nullptr);
          pieces.insert(pieces.end(), one.begin(), one.end());
        }
      EXPECT_EQ(whole, pieces);
    }
    std::vector<uint8_t> pieces;
    for (int64_t b = 0; b < n * rows / QK; ++b) {
      const std::vector<float> part(x.begin() + b * QK, x.begin() + (b + 1) * QK);
      const std::vector<uint8_t> one = from_float(t, part);
      pieces.insert(pieces.end(), one.begin(), one.end());
    }
    EXPECT_EQ(from_float(t, x), pieces);
  }
}

// ---------------------------------------------------------------------------
// Independent check: gguf-py's dequantizer

TEST(KQuantReference, GgufPyDequantizeBitIdentical) {
  if (test::run_command("python3 -c 'import gguf.quants, numpy'", nullptr) != 0)
    GTEST_SKIP() << "python3 with the gguf and numpy packages is not available";
  const std::string dir = test::temp_dir();
  const std::string script = std::string(QLENS_SOURCE_DIR) + "/tests/quant_reference_check.py";
  const int64_t n = 1024, rows = 64;
  std::vector<float> x = with_outliers(n * rows, 71);
  for (int64_t i = 0; i < n; ++i) x[i] *= 1e-3f;  // small scales too
  for (int64_t i = n; i < 2 * n; ++i) x[i] = std::fabs(x[i]);  // all-positive (mins of 0)
  const std::vector<float> imp = importance(n, 72);
  for (DType t : kWeightTypes) {
    SCOPED_TRACE(type_name(t));
    std::vector<uint8_t> q = quantize(t, x, rows, imp.data());
    const std::vector<uint8_t> r = from_float(t, x);
    q.insert(q.end(), r.begin(), r.end());
    std::mt19937 rng(73);  // and random bytes: every bit pattern of the quants and scales
    std::vector<uint8_t> noise(type_traits(t).block_bytes * 64);
    for (auto& v : noise) v = static_cast<uint8_t>(rnd(rng, 0, 255));
    for (size_t b = 0; b < 64; ++b) {  // keep d and dmin finite: fp16 bits below the Inf/NaN exponent
      const size_t bb = type_traits(t).block_bytes;
      const size_t at = t == DType::Q2_K ? 80 : t == DType::Q3_K ? 108 : t == DType::Q6_K ? 208 : 0;
      const size_t nd = (t == DType::Q2_K || t == DType::Q4_K || t == DType::Q5_K) ? 2 : 1;
      for (size_t k = 0; k < nd; ++k) noise[b * bb + at + 2 * k + 1] &= 0xfb;
    }
    q.insert(q.end(), noise.begin(), noise.end());
    const std::vector<float> y = dequantize(t, q);
    const std::string qpath = dir + "/" + std::string(type_name(t)) + ".bin";
    const std::string ypath = dir + "/" + std::string(type_name(t)) + ".f32";
    std::ofstream(qpath, std::ios::binary).write(reinterpret_cast<const char*>(q.data()), static_cast<std::streamsize>(q.size()));
    std::ofstream(ypath, std::ios::binary)
        .write(reinterpret_cast<const char*>(y.data()), static_cast<std::streamsize>(y.size() * sizeof(float)));
    std::string out;
    const int rc = test::run_command("python3 '" + script + "' " + std::string(type_name(t)) + " '" + qpath + "' '" +
                                         ypath + "' " + std::to_string(y.size()),
                                     &out);
    EXPECT_EQ(rc, 0) << out;
  }
}

// ---------------------------------------------------------------------------
// mul_mat through the CPU backend

// r = mul_mat(w, x) for a weight [K, M] of type t (its bytes given) and x [K, N].
std::vector<float> run_mul_mat(Backend& backend, DType t, const void* w, int64_t K, int64_t M, const std::vector<float>& x) {
  const int64_t N = static_cast<int64_t>(x.size()) / K;
  Graph g;
  Tensor* a = g.new_tensor(t, {K, M}, "w");
  a->data = const_cast<void*>(w);
  Tensor* b = g.new_tensor(DType::F32, {K, N}, "x");
  b->data = const_cast<float*>(x.data());
  Tensor* r = mul_mat(g, a, b);
  r->flags |= kFlagOutput;
  g.build(r);
  const MemoryPlan plan = plan_memory(g);
  std::vector<char> buf(plan.size + 64);
  char* base = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64;
  apply_memory_plan(g, plan, base);
  backend.compute(g);
  const auto* p = static_cast<const float*>(r->data);
  return std::vector<float>(p, p + M * N);
}

TEST(KQuantMulMat, EqualsDequantizedF32Weight) {
  std::unique_ptr<Backend> cpu = make_cpu_backend(2);
  std::unique_ptr<Backend> ref = make_reference_backend();
  const int64_t M = 7;
  for (DType t : kAllTypes) {
    for (int64_t K : {256, 512, 4096}) {
      for (int64_t N : {1, 5, 33}) {  // odd; the larger takes the GEMM path
        SCOPED_TRACE(std::string(type_name(t)) + " K " + std::to_string(K) + " N " + std::to_string(N));
        const std::vector<float> wf = with_outliers(K * M, static_cast<uint32_t>(K + N));
        const std::vector<uint8_t> wq = quantize(t, wf, M, nullptr);
        const std::vector<float> wd = dequantize(t, wq);
        const std::vector<float> x = gaussian(K * N, static_cast<uint32_t>(3 * K + N));
        const std::vector<float> got = run_mul_mat(*cpu, t, wq.data(), K, M, x);
        // Both paths multiply with activations quantized to vec_dot_type
        // (Q8_K), as ggml does (the GEMM path rounds them through it): the
        // reference has the activations round-tripped through that type.
        const DType xt = type_traits(t).vec_dot_type;
        std::vector<float> xr = x;
        if (xt != DType::F32) {
          std::vector<uint8_t> xq(row_bytes(xt, K * N));
          type_traits(xt).from_float(x.data(), xq.data(), K * N);
          type_traits(xt).to_float(xq.data(), xr.data(), K * N);
        }
        const std::vector<float> want = run_mul_mat(*ref, DType::F32, wd.data(), K, M, xr);
        double num = 0, den = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
          den += static_cast<double>(want[i]) * want[i];
        }
        EXPECT_LE(num / den, 1e-10);
      }
    }
  }
}

}  // namespace
}  // namespace qlens

// Tests of the legacy block formats (src/quant/legacy.cpp): Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q8_1, IQ4_NL.
//
//  - Layout: blocks assembled byte by byte from ggml's spec, dequantized, and
//    compared with values worked out by hand here.
//  - Q8_0/Q8_1 from_float equals a reference rounding written out here.
//  - Round-trip error bounds (RMSE / rms(x)) on Gaussian rows and rows with
//    outliers; the table is in docs/QUANTIZATION.md.
//  - Importance: the weighted error sum imp_j (x_j - q_j)^2 is lower when
//    quantize gets the importance than when it does not (real rows of
//    stories260K and synthetic rows), for every type whose quantizer searches.
//  - Edge cases: zero, constant, huge, tiny and subnormal rows; row lengths
//    that are multiples of 32 but not of 256; lengths that are not multiples.
//  - gguf-py (PyPI) dequantizes our blocks to the same floats, bit for bit,
//    and its reference quantizers produce our from_float bytes.
//  - mul_mat on the CPU backend with a quantized weight equals mul_mat with
//    the dequantized F32 weight.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/isa.h"
#include "qlens/backend.h"
#include "qlens/error.h"
#include "qlens/gguf.h"
#include "qlens/tensor.h"
#include "qlens/types.h"
#include "quant/legacy.h"
#include "quant/registry.h"
#include "quant/search_simd.h"
#include "test_util.h"

namespace qlens {
namespace {

constexpr DType kTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                            DType::Q8_0, DType::Q8_1, DType::IQ4_NL};
// Types whose quantize searches with the importance (Q8_0 and Q8_1 round as
// from_float does).
constexpr DType kSearched[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL};

std::string name_of(DType t) { return std::string(type_name(t)); }

// ---- conversions through the type traits ----

std::vector<uint8_t> from_float(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
  type_traits(t).from_float(x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

std::vector<uint8_t> quantize(DType t, const std::vector<float>& x, int64_t n_per_row, const float* importance) {
  const int64_t nrows = static_cast<int64_t>(x.size()) / n_per_row;
  std::vector<uint8_t> q(row_bytes(t, n_per_row) * nrows);
  type_traits(t).quantize(x.data(), q.data(), nrows, n_per_row, importance);
  return q;
}

std::vector<float> to_float(DType t, const std::vector<uint8_t>& q) {
  const TypeTraits& tt = type_traits(t);
  const int64_t n = static_cast<int64_t>(q.size() / tt.block_bytes) * tt.block_size;
  std::vector<float> y(n);
  tt.to_float(q.data(), y.data(), n);
  return y;
}

double rel_rmse(const std::vector<float>& x, const std::vector<float>& y) {
  double e = 0, s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    s += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(e / s);
}

// sum_j imp[j % n] (x_j - y_j)^2 over elements [begin, end).
double weighted_error(const std::vector<float>& x, const std::vector<float>& y, const std::vector<float>& imp,
                      size_t begin, size_t end) {
  double e = 0;
  for (size_t i = begin; i < end; ++i) {
    const double d = static_cast<double>(x[i]) - y[i];
    e += imp[i % imp.size()] * d * d;
  }
  return e;
}

std::vector<float> gaussian(std::mt19937& rng, size_t n, float sigma = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// Gaussian rows where about 1 element in 32 is an outlier 10-30x larger.
std::vector<float> with_outliers(std::mt19937& rng, size_t n) {
  std::vector<float> v = gaussian(rng, n);
  std::uniform_real_distribution<float> u(10.0f, 30.0f);
  for (float& x : v)
    if (rng() % 32 == 0) x = (rng() % 2 ? 1.0f : -1.0f) * u(rng);
  return v;
}

// Positive importance, with about one column in 8 100x more important.
std::vector<float> random_importance(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  std::vector<float> imp(n);
  for (float& w : imp) w = u(rng) * (rng() % 8 == 0 ? 100.0f : 1.0f);
  return imp;
}

void put16(std::vector<uint8_t>& b, size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v & 0xff);
  b[at + 1] = static_cast<uint8_t>(v >> 8);
}

// ---- registry -----------------------------------------------------------------

// The searches' AVX2 loops give the plain loops' bytes (a quantized file must
// not depend on the CPU), with and without importance, on Gaussian rows, rows
// with outliers, and exact grid levels (ties).
TEST(QuantLegacy, SimdSearchGivesThePlainSearchsBytes) {
  std::mt19937 rng(17);
  const int64_t n = 256;
  std::vector<float> x = gaussian(rng, n * 4);
  const std::vector<float> out = with_outliers(rng, n * 2);
  x.insert(x.end(), out.begin(), out.end());
  for (int64_t i = 0; i < n; ++i) x.push_back(static_cast<float>(i % 16 - 8) * 0.5f);
  const std::vector<float> imp = random_importance(rng, n);
  for (DType t : kTypes)
    for (const float* w : {static_cast<const float*>(nullptr), imp.data()}) {
      SCOPED_TRACE(std::string(type_name(t)) + (w ? " with importance" : ""));
      const bool before = quant::set_search_simd(false);
      const auto plain = quantize(t, x, n, w);
      quant::set_search_simd(true);
      const auto simd = quantize(t, x, n, w);
      quant::set_search_simd(before);
      EXPECT_EQ(plain, simd);
    }
}

TEST(QuantLegacy, Registry) {
  const std::map<DType, std::pair<size_t, DType>> expect = {
      {DType::Q4_0, {18, DType::Q8_0}}, {DType::Q4_1, {20, DType::Q8_1}}, {DType::Q5_0, {22, DType::Q8_0}},
      {DType::Q5_1, {24, DType::Q8_1}}, {DType::Q8_0, {34, DType::Q8_0}}, {DType::Q8_1, {36, DType::Q8_1}},
      {DType::IQ4_NL, {18, DType::Q8_0}}};
  for (DType t : kTypes) {
    SCOPED_TRACE(name_of(t));
    const TypeTraits& tt = type_traits(t);
    EXPECT_EQ(tt.block_size, 32);
    EXPECT_EQ(tt.block_bytes, expect.at(t).first);
    EXPECT_TRUE(tt.is_quantized);
    EXPECT_NE(tt.to_float, nullptr);
    EXPECT_NE(tt.from_float, nullptr);
    EXPECT_NE(tt.quantize, nullptr);
    EXPECT_EQ(tt.vec_dot_type, expect.at(t).second);
  }
  EXPECT_EQ(quant::legacy_bindings().size(), std::size(kTypes));
  EXPECT_EQ(sizeof(quant::BlockQ5_1), 24u);
}

// Every type the engine reads converts blocks in place from an address that
// is only a multiple of its data_alignment (what the GGUF reader demands of
// files aligned below 8): the same floats as from an aligned copy, and under
// UBSan no misaligned load.
TEST(QuantTypes, ToFloatReadsBlocksAtTheirDataAlignment) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (uint32_t id = 0; id < kDTypeCount; ++id) {
    const TypeTraits* tt = find_type_traits(id);
    if (!tt || !tt->to_float || !(tt->from_float || tt->quantize)) continue;
    SCOPED_TRACE(tt->name);
    const size_t a = tt->data_alignment;
    EXPECT_TRUE(a == 1 || a == 2 || a == 4 || a == 8);
    if (tt->is_quantized) {
      // Q8_K's float scale; blocks of bytes only (the FP4 types, IQ1_M); an fp16 field.
      const DType t = DType(id);
      EXPECT_EQ(a, t == DType::Q8_K ? 4u : t == DType::MXFP4 || t == DType::NVFP4 || t == DType::IQ1_M ? 1u : 2u);
    }
    const int64_t n = 512;  // two K super-blocks, sixteen legacy blocks
    std::vector<float> x(n);
    for (float& v : x) v = g(rng);
    const size_t bytes = row_bytes(DType(id), n);
    std::vector<uint64_t> aligned(bytes / 8 + 1), shifted(bytes / 8 + 2);
    if (tt->from_float) {
      tt->from_float(x.data(), aligned.data(), n);
    } else {
      tt->quantize(x.data(), aligned.data(), 1, n, nullptr);
    }
    // a bytes past a multiple of 8: aligned to a, to nothing larger.
    char* at = reinterpret_cast<char*>(shifted.data()) + (a < 8 ? a : 0);
    std::memcpy(at, aligned.data(), bytes);
    std::vector<float> want(n), got(n);
    tt->to_float(aligned.data(), want.data(), n);
    tt->to_float(at, got.data(), n);
    EXPECT_EQ(std::memcmp(want.data(), got.data(), n * sizeof(float)), 0);
  }
}

// ---- layouts from the spec, by hand --------------------------------------------
//
// fp16 bit patterns used: 0x3800 = 0.5, 0xB800 = -0.5, 0x3400 = 0.25,
// 0x3C00 = 1.0, 0x3E00 = 1.5, 0x4000 = 2.0, 0xBC00 = -1.0, 0xC000 = -2.0.
// Nibble pattern P: byte j = j | (15 - j) << 4, so element j has low nibble j
// and element j + 16 has low nibble 15 - j.

void fill_nibble_pattern(std::vector<uint8_t>& b, size_t at) {
  for (int j = 0; j < 16; ++j) b[at + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
}

void expect_values(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "element " << i;
}

TEST(QuantLegacyLayout, Q4_0) {
  // Block 0: d = 0.5, pattern P. Block 1: d = -2.0, every byte 0x80 (element
  // j < 16 has code 0 -> level -8, element j >= 16 code 8 -> level 0).
  std::vector<uint8_t> b(36);
  put16(b, 0, 0x3800);
  fill_nibble_pattern(b, 2);
  put16(b, 18, 0xC000);
  for (int j = 0; j < 16; ++j) b[20 + j] = 0x80;
  std::vector<float> want = {-4.0f, -3.5f, -3.0f, -2.5f, -2.0f, -1.5f, -1.0f, -0.5f,   // codes 0..7
                             0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  2.5f,  3.0f,  3.5f,    // codes 8..15
                             3.5f,  3.0f,  2.5f,  2.0f,  1.5f,  1.0f,  0.5f,  0.0f,    // codes 15..8
                             -0.5f, -1.0f, -1.5f, -2.0f, -2.5f, -3.0f, -3.5f, -4.0f};  // codes 7..0
  for (int j = 0; j < 16; ++j) want.push_back(16.0f);
  for (int j = 0; j < 16; ++j) want.push_back(0.0f);
  expect_values(to_float(DType::Q4_0, b), want);
}

TEST(QuantLegacyLayout, Q4_1) {
  // d = 0.25, m = -1.0 (d first, then m), pattern P: value = code/4 - 1.
  std::vector<uint8_t> b(20);
  put16(b, 0, 0x3400);
  put16(b, 2, 0xBC00);
  fill_nibble_pattern(b, 4);
  const std::vector<float> want = {-1.0f,  -0.75f, -0.5f,  -0.25f, 0.0f,   0.25f,  0.5f,   0.75f,
                                   1.0f,   1.25f,  1.5f,   1.75f,  2.0f,   2.25f,  2.5f,   2.75f,
                                   2.75f,  2.5f,   2.25f,  2.0f,   1.75f,  1.5f,   1.25f,  1.0f,
                                   0.75f,  0.5f,   0.25f,  0.0f,   -0.25f, -0.5f,  -0.75f, -1.0f};
  expect_values(to_float(DType::Q4_1, b), want);
}

TEST(QuantLegacyLayout, Q5_0) {
  // d = -0.5; qh bytes 0F F0 01 80 = 0x8001F00F little-endian: fifth bit set
  // for elements 0-3, 12-15, 16 and 31; pattern P for the low nibbles.
  // level = code - 16.
  std::vector<uint8_t> b(22);
  put16(b, 0, 0xB800);
  b[2] = 0x0F;
  b[3] = 0xF0;
  b[4] = 0x01;
  b[5] = 0x80;
  fill_nibble_pattern(b, 6);
  const std::vector<int> level = {0,   1,  2,  3,  -12, -11, -10, -9, -8, -7, -6, -5, 12, 13, 14, 15,
                                  15, -2, -3, -4, -5,  -6,  -7,  -8, -9, -10, -11, -12, -13, -14, -15, 0};
  std::vector<float> want;
  for (int l : level) want.push_back(-0.5f * static_cast<float>(l));
  expect_values(to_float(DType::Q5_0, b), want);
}

TEST(QuantLegacyLayout, Q5_1) {
  // d = 1.0, m = 1.5; qh bytes FF 00 00 FF: fifth bit set for elements 0-7
  // and 24-31; pattern P. value = code + 1.5.
  std::vector<uint8_t> b(24);
  put16(b, 0, 0x3C00);
  put16(b, 2, 0x3E00);
  b[4] = 0xFF;
  b[5] = 0x00;
  b[6] = 0x00;
  b[7] = 0xFF;
  fill_nibble_pattern(b, 8);
  const std::vector<int> code = {16, 17, 18, 19, 20, 21, 22, 23, 8,  9,  10, 11, 12, 13, 14, 15,
                                 15, 14, 13, 12, 11, 10, 9,  8,  23, 22, 21, 20, 19, 18, 17, 16};
  std::vector<float> want;
  for (int c : code) want.push_back(static_cast<float>(c) + 1.5f);
  expect_values(to_float(DType::Q5_1, b), want);
}

TEST(QuantLegacyLayout, Q8_0) {
  // d = 0.25, qs[j] = j*8 - 128 as signed bytes: value = 2j - 32.
  std::vector<uint8_t> b(34);
  put16(b, 0, 0x3400);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));
  std::vector<float> want;
  for (int j = 0; j < 32; ++j) want.push_back(static_cast<float>(2 * j - 32));
  expect_values(to_float(DType::Q8_0, b), want);
}

TEST(QuantLegacyLayout, Q8_1) {
  // d = 2.0, s = arbitrary (dequantization does not read it), qs[0] = -128,
  // qs[j] = j - 16 otherwise: value = 2 qs.
  std::vector<uint8_t> b(36);
  put16(b, 0, 0x4000);
  put16(b, 2, 0x1234);
  b[4] = 0x80;
  for (int j = 1; j < 32; ++j) b[4 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  std::vector<float> want = {-256.0f};
  for (int j = 1; j < 32; ++j) want.push_back(static_cast<float>(2 * (j - 16)));
  expect_values(to_float(DType::Q8_1, b), want);
}

TEST(QuantLegacyLayout, Iq4nl) {
  // ggml's kvalues_iq4nl, typed from the spec; d = 2.0, pattern P.
  const int kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(quant::kIq4nlValues[i], kv[i]);
  std::vector<uint8_t> b(18);
  put16(b, 0, 0x4000);
  fill_nibble_pattern(b, 2);
  std::vector<float> want;
  for (int j = 0; j < 16; ++j) want.push_back(2.0f * static_cast<float>(kv[j]));
  for (int j = 0; j < 16; ++j) want.push_back(2.0f * static_cast<float>(kv[15 - j]));
  expect_values(to_float(DType::IQ4_NL, b), want);
}

// The quantizers write what the layout tests read: a block whose values sit
// exactly on the levels comes back exactly, through from_float and quantize.
TEST(QuantLegacyLayout, ExactLevelsRoundTrip) {
  std::vector<float> x(32);
  for (DType t : kTypes) {
    SCOPED_TRACE(name_of(t));
    for (int j = 0; j < 32; ++j) {
      switch (t) {
        case DType::Q4_0: x[j] = 0.5f * static_cast<float>((j * 7) % 16 - 8); break;  // max |.| -4 present
        case DType::Q5_0: x[j] = 0.5f * static_cast<float>((j * 7) % 32 - 16); break;
        case DType::Q4_1: x[j] = 0.25f * static_cast<float>((j * 7) % 16) - 1.0f; break;
        case DType::Q5_1: x[j] = 0.25f * static_cast<float>((j * 7) % 32) - 1.0f; break;
        case DType::IQ4_NL: x[j] = 0.5f * static_cast<float>(quant::kIq4nlValues[(j * 7) % 16]); break;
        default: x[j] = 0.5f * static_cast<float>((j * 9) % 255 - 127); break;  // Q8: contains -127
      }
    }
    expect_values(to_float(t, quantize(t, x, 32, nullptr)), x);
    expect_values(to_float(t, from_float(t, x)), x);
  }
}

// ---- Q8_0 / Q8_1 reference rounding ------------------------------------------------

// ggml's quantize_row_q8_{0,1}_ref written out (weights: quantize): d = amax / 127,
// q = roundf(x / d) with roundf rounding ties away from zero, s = fp16(sum(q) * d).
// activation: ggml-cpu's x86 quantize_row_q8_{0,1} (activations: from_float),
// q = nearbyint(x * (127 / amax)), ties to even.
std::vector<uint8_t> hand_q8(const std::vector<float>& x, bool with_sum, bool activation = false) {
  std::vector<uint8_t> out;
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    const float d = amax / 127;
    const float id = activation ? (amax != 0 ? 127.0f / amax : 0.0f) : d != 0 ? 1.0f / d : 0.0f;
    int8_t q[32];
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      q[j] = static_cast<int8_t>(activation ? std::nearbyint(x[b + j] * id) : std::round(x[b + j] * id));
      sum += q[j];
    }
    const uint16_t dh = fp32_to_fp16(d);
    out.push_back(static_cast<uint8_t>(dh & 0xff));
    out.push_back(static_cast<uint8_t>(dh >> 8));
    if (with_sum) {
      const uint16_t sh = fp32_to_fp16(static_cast<float>(sum) * d);
      out.push_back(static_cast<uint8_t>(sh & 0xff));
      out.push_back(static_cast<uint8_t>(sh >> 8));
    }
    for (int j = 0; j < 32; ++j) out.push_back(static_cast<uint8_t>(q[j]));
  }
  return out;
}

TEST(QuantLegacy, Q8ReferenceRounding) {
  std::mt19937 rng(11);
  std::vector<float> x = gaussian(rng, 32 * 512);
  const std::vector<float> outl = with_outliers(rng, 32 * 256);
  x.insert(x.end(), outl.begin(), outl.end());
  // Exact ties: amax = 127 makes d = 1, so k + 0.5 lands on a tie.
  for (int b = 0; b < 8; ++b) {
    x.push_back(127.0f);
    for (int j = 1; j < 32; ++j) x.push_back(static_cast<float>((j * 37 + b * 11) % 253 - 126) + 0.5f * (j % 2 ? 1 : -1));
  }
  x.push_back(-127.0f);
  for (int j = 1; j < 32; ++j) x.push_back(j % 2 ? 0.5f : -0.5f);
  for (int j = 0; j < 32; ++j) x.push_back(0.0f);  // d = 0
  for (DType t : {DType::Q8_0, DType::Q8_1}) {
    SCOPED_TRACE(name_of(t));
    const std::vector<uint8_t> want = hand_q8(x, t == DType::Q8_1);
    const std::vector<uint8_t> got = from_float(t, x);
    const std::vector<uint8_t> want_act = hand_q8(x, t == DType::Q8_1, true);
    ASSERT_EQ(got.size(), want.size());
    size_t first_bad = got.size();
    for (size_t i = 0; i < got.size() && first_bad == got.size(); ++i)
      if (got[i] != want_act[i]) first_bad = i;
    EXPECT_EQ(first_bad, got.size()) << "from_float: first differing byte " << first_bad << " (block "
                                     << first_bad / type_traits(t).block_bytes << ")";
    // quantize (weights) is the reference rounding, importance or not.
    const std::vector<float> imp = random_importance(rng, 32);
    EXPECT_TRUE(quantize(t, x, 32, nullptr) == want);
    EXPECT_TRUE(quantize(t, x, 32, imp.data()) == want);
    EXPECT_FALSE(want == want_act) << "the two roundings differ on these inputs";
  }
  // The tie rules: quantize 2.5 -> 3, -2.5 -> -3, 0.5 -> 1, -0.5 -> -1;
  // from_float 2.5 -> 2, -2.5 -> -2, 0.5 -> 0, -0.5 -> -0.
  std::vector<float> ties(32, 0.0f);
  ties[0] = 127.0f;
  ties[1] = 2.5f;
  ties[2] = -2.5f;
  ties[3] = 0.5f;
  ties[4] = -0.5f;
  const std::vector<uint8_t> w = quantize(DType::Q8_0, ties, 32, nullptr);
  EXPECT_EQ(static_cast<int8_t>(w[3]), 3);
  EXPECT_EQ(static_cast<int8_t>(w[4]), -3);
  EXPECT_EQ(static_cast<int8_t>(w[5]), 1);
  EXPECT_EQ(static_cast<int8_t>(w[6]), -1);
  const std::vector<uint8_t> a = from_float(DType::Q8_0, ties);
  EXPECT_EQ(static_cast<int8_t>(a[3]), 2);
  EXPECT_EQ(static_cast<int8_t>(a[4]), -2);
  EXPECT_EQ(static_cast<int8_t>(a[5]), 0);
  EXPECT_EQ(static_cast<int8_t>(a[6]), 0);
}

// ---- round-trip error bounds ---------------------------------------------------------
//
// Bounds on RMSE / rms(x) over 64 rows of 4096, measured values in
// docs/QUANTIZATION.md (with margin ~15%).
struct Bound {
  DType type;
  double gauss_ref, gauss_q, outl_ref, outl_q;  // from_float and quantize (no importance)
};
constexpr Bound kBounds[] = {
    {DType::Q4_0, 0.100, 0.095, 0.100, 0.098},   {DType::Q4_1, 0.090, 0.081, 0.135, 0.084},
    {DType::Q5_0, 0.049, 0.047, 0.080, 0.079},   {DType::Q5_1, 0.044, 0.039, 0.064, 0.055},
    {DType::Q8_0, 0.0062, 0.0062, 0.0138, 0.0138}, {DType::Q8_1, 0.0062, 0.0062, 0.0138, 0.0138},
    {DType::IQ4_NL, 0.091, 0.086, 0.102, 0.099},
};

TEST(QuantLegacy, RoundTripBounds) {
  std::mt19937 rng(5);
  const int64_t n = 4096, rows = 64;
  const std::vector<float> gauss = gaussian(rng, n * rows);
  std::vector<float> outl(n * rows);
  {  // small Gaussian background with sparse large values, as in trained weights
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : outl) v = nd(rng) * 0.02f + (rng() % 64 == 0 ? nd(rng) : 0.0f);
  }
  for (const Bound& b : kBounds) {
    SCOPED_TRACE(name_of(b.type));
    const double g_ref = rel_rmse(gauss, to_float(b.type, from_float(b.type, gauss)));
    const double g_q = rel_rmse(gauss, to_float(b.type, quantize(b.type, gauss, n, nullptr)));
    const double o_ref = rel_rmse(outl, to_float(b.type, from_float(b.type, outl)));
    const double o_q = rel_rmse(outl, to_float(b.type, quantize(b.type, outl, n, nullptr)));
    std::printf("%-7s gauss: from_float %.5f quantize %.5f | outliers: from_float %.5f quantize %.5f\n",
                name_of(b.type).c_str(), g_ref, g_q, o_ref, o_q);
    EXPECT_LE(g_ref, b.gauss_ref);
    EXPECT_LE(g_q, b.gauss_q);
    EXPECT_LE(o_ref, b.outl_ref);
    EXPECT_LE(o_q, b.outl_q);
    // The search starts from the reference's scale: it is never worse on average.
    EXPECT_LE(g_q, g_ref * 1.0001);
    EXPECT_LE(o_q, o_ref * 1.0001);
  }
}

// ---- importance ---------------------------------------------------------------------

struct WeightedResult {
  double with = 0, without = 0;  // summed weighted error
  int rows = 0, rows_better = 0, rows_worse = 0;
};

// Quantizes rows of n_per_row with and without imp; accumulates sum imp (x - q)^2.
void compare_importance(DType t, const std::vector<float>& x, int64_t n_per_row, const std::vector<float>& imp,
                        WeightedResult& r) {
  const std::vector<float> yw = to_float(t, quantize(t, x, n_per_row, imp.data()));
  const std::vector<float> yn = to_float(t, quantize(t, x, n_per_row, nullptr));
  for (size_t row = 0; row < x.size() / n_per_row; ++row) {
    const size_t b = row * n_per_row, e = b + n_per_row;
    const double ew = weighted_error(x, yw, imp, b, e), en = weighted_error(x, yn, imp, b, e);
    r.with += ew;
    r.without += en;
    ++r.rows;
    r.rows_better += ew < en;
    r.rows_worse += ew > en;
  }
}

void expect_importance_helps(DType t, const WeightedResult& r, double min_gain, double min_better_fraction) {
  std::printf("%-7s weighted error with/without importance %.4f (%d rows: %d better, %d worse)\n",
              name_of(t).c_str(), r.with / r.without, r.rows, r.rows_better, r.rows_worse);
  EXPECT_LT(r.with, r.without * (1.0 - min_gain));
  EXPECT_GE(r.rows_better, min_better_fraction * r.rows);
}

TEST(QuantLegacy, ImportanceHelpsOnModelRows) {
  QLENS_REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto file = gguf::File::open(path);
  std::mt19937 rng(21);
  std::map<DType, WeightedResult> results;
  int tensors = 0;
  for (const gguf::TensorInfo& ti : file->tensors()) {
    if (ti.type != DType::F32 || ti.n_dims != 2 || ti.ne[0] % 32 != 0) continue;
    ++tensors;
    const auto* p = reinterpret_cast<const float*>(file->tensor_data(ti));  // GGUF data is aligned
    const std::vector<float> x(p, p + ti.nelements());
    const std::vector<float> imp = random_importance(rng, ti.ne[0]);
    for (DType t : kSearched) compare_importance(t, x, ti.ne[0], imp, results[t]);
  }
  ASSERT_GT(tensors, 10);
  for (DType t : kSearched) {
    SCOPED_TRACE(name_of(t));
    expect_importance_helps(t, results[t], 0.05, 0.9);
  }
}

TEST(QuantLegacy, ImportanceHelpsOnSyntheticRows) {
  std::mt19937 rng(22);
  const int64_t n = 256;
  std::map<DType, WeightedResult> results;
  for (int rep = 0; rep < 8; ++rep) {
    const std::vector<float> x = rep % 2 ? with_outliers(rng, n * 32) : gaussian(rng, n * 32);
    const std::vector<float> imp = random_importance(rng, n);
    for (DType t : kSearched) compare_importance(t, x, n, imp, results[t]);
  }
  for (DType t : kSearched) {
    SCOPED_TRACE(name_of(t));
    expect_importance_helps(t, results[t], 0.05, 0.9);
  }
}

// Importance concentrated on one column per block: that column is kept far
// more precisely than without importance.
TEST(QuantLegacy, ImportanceProtectsAColumn) {
  std::mt19937 rng(23);
  const int64_t n = 128;
  const std::vector<float> x = gaussian(rng, n * 64);
  std::vector<float> imp(n, 1.0f);
  for (int64_t j = 5; j < n; j += 32) imp[j] = 1000.0f;
  for (DType t : kSearched) {
    SCOPED_TRACE(name_of(t));
    const std::vector<float> yw = to_float(t, quantize(t, x, n, imp.data()));
    const std::vector<float> yn = to_float(t, quantize(t, x, n, nullptr));
    double ew = 0, en = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (imp[i % n] < 10) continue;
      ew += (x[i] - yw[i]) * (x[i] - yw[i]);
      en += (x[i] - yn[i]) * (x[i] - yn[i]);
    }
    EXPECT_LT(ew, 0.5 * en) << "error on the important columns: with " << ew << " without " << en;
  }
}

// ---- edge cases ---------------------------------------------------------------------

bool all_finite(const std::vector<float>& y) {
  return std::all_of(y.begin(), y.end(), [](float v) { return std::isfinite(v); });
}

// Runs from_float, quantize without and with importance.
template <class F>
void for_each_conversion(DType t, const std::vector<float>& x, int64_t n_per_row, F&& check) {
  std::mt19937 rng(31);
  const std::vector<float> imp = random_importance(rng, n_per_row);
  check("from_float", to_float(t, from_float(t, x)));
  check("quantize", to_float(t, quantize(t, x, n_per_row, nullptr)));
  check("quantize+importance", to_float(t, quantize(t, x, n_per_row, imp.data())));
}

TEST(QuantLegacyEdge, ZeroRows) {
  const std::vector<float> x(96 * 3, 0.0f);
  for (DType t : kTypes) {
    for_each_conversion(t, x, 96, [&](const char* how, const std::vector<float>& y) {
      for (float v : y) ASSERT_EQ(v, 0.0f) << name_of(t) << " " << how;
    });
  }
}

TEST(QuantLegacyEdge, ConstantRows) {
  for (float c : {1.0f, -0.3f, 1000.0f, -7e-3f, 6e4f}) {
    const std::vector<float> x(64, c);
    for (DType t : kTypes) {
      for_each_conversion(t, x, 64, [&](const char* how, const std::vector<float>& y) {
        // Only the fp16 rounding of the scale (or of m) is lost: 2^-11 relative.
        for (float v : y) ASSERT_NEAR(v, c, std::fabs(c) * 1e-3) << name_of(t) << " " << how << " c=" << c;
      });
    }
  }
}

TEST(QuantLegacyEdge, Magnitudes) {
  std::mt19937 rng(32);
  const std::vector<float> g = gaussian(rng, 256 * 8);
  for (float s : {1e-2f, 1e3f}) {  // scales well inside fp16: the usual bounds hold
    std::vector<float> x = g;
    for (float& v : x) v *= s;
    for (const Bound& b : kBounds) {
      for_each_conversion(b.type, x, 256, [&](const char* how, const std::vector<float>& y) {
        EXPECT_LE(rel_rmse(x, y), 1.2 * std::max(b.gauss_ref, b.gauss_q)) << name_of(b.type) << " " << how << " s=" << s;
      });
    }
  }
  // Beyond fp16's range the scale saturates at 65504: finite output, no NaN,
  // and the saturated values keep their sign.
  for (float s : {1e7f, 1e30f, 3e38f}) {
    std::vector<float> x = g;
    for (float& v : x) v = std::clamp(v * s, -FLT_MAX, FLT_MAX);
    for (DType t : kTypes) {
      for_each_conversion(t, x, 256, [&](const char* how, const std::vector<float>& y) {
        ASSERT_TRUE(all_finite(y)) << name_of(t) << " " << how << " s=" << s;
        size_t same_sign = 0;
        for (size_t i = 0; i < x.size(); ++i) same_sign += (x[i] > 0) == (y[i] > 0);
        EXPECT_GE(same_sign, x.size() * 9 / 10) << name_of(t) << " " << how << " s=" << s;
      });
    }
  }
  // Tiny values: fp16 subnormal scales, then zero; never NaN.
  for (float s : {1e-6f, 1e-9f, 1e-20f, 1e-40f}) {
    std::vector<float> x = g;
    for (float& v : x) v *= s;
    for (DType t : kTypes) {
      for_each_conversion(t, x, 256, [&](const char* how, const std::vector<float>& y) {
        ASSERT_TRUE(all_finite(y)) << name_of(t) << " " << how << " s=" << s;
        if (s <= 1e-9f) {
          for (size_t i = 0; i < y.size(); ++i) ASSERT_LE(std::fabs(y[i]), 1e-6f) << name_of(t) << " " << how;
        }
      });
    }
  }
  // One outlier per block next to tiny values, and blocks mixing signs at the
  // extremes of float.
  std::vector<float> x(64, 1e-30f);
  x[3] = 5.0f;
  x[40] = -FLT_MAX;
  x[41] = FLT_MAX;
  for (DType t : kTypes)
    for_each_conversion(t, x, 64, [&](const char* how, const std::vector<float>& y) {
      ASSERT_TRUE(all_finite(y)) << name_of(t) << " " << how;
    });
}

TEST(QuantLegacyEdge, RowLengthsNotMultipleOf256) {
  std::mt19937 rng(33);
  for (int64_t n : {32, 96, 160, 544}) {
    const int64_t rows = 5;
    const std::vector<float> x = with_outliers(rng, n * rows);
    const std::vector<float> imp = random_importance(rng, n);
    for (DType t : kTypes) {
      SCOPED_TRACE(name_of(t) + " n=" + std::to_string(n));
      const std::vector<uint8_t> all = quantize(t, x, n, imp.data());
      ASSERT_EQ(all.size(), row_bytes(t, n) * rows);
      // Row by row gives the same bytes: rows start at row_bytes multiples and
      // importance is indexed by column.
      for (int64_t r = 0; r < rows; ++r) {
        const std::vector<float> row(x.begin() + r * n, x.begin() + (r + 1) * n);
        const std::vector<uint8_t> one = quantize(t, row, n, imp.data());
        EXPECT_TRUE(std::equal(one.begin(), one.end(), all.begin() + r * row_bytes(t, n))) << "row " << r;
      }
      EXPECT_LE(rel_rmse(x, to_float(t, all)), 0.25);
    }
  }
  // 172 (stories260K's FFN width) is not a multiple of 32: refused.
  std::vector<float> x(172 * 2, 1.0f);
  std::vector<uint8_t> out(1024);
  for (DType t : kTypes) {
    EXPECT_THROW(type_traits(t).quantize(x.data(), out.data(), 2, 172, nullptr), Error) << name_of(t);
  }
}

// ---- gguf-py cross-check ---------------------------------------------------------------

bool have_gguf_py() { return test::run_command("python3 -c 'import gguf.quants, numpy'", nullptr) == 0; }

template <class T>
void write_file(const std::string& path, const std::vector<T>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
  ASSERT_TRUE(f.good()) << path;
}

// Runs tests/quant_reference_check.py; returns its exit status (3: gguf-py lacks the type).
int reference_check(DType t, const std::vector<uint8_t>& blocks, const std::vector<float>& floats, bool quantize_mode,
                    std::string* out) {
  const std::string dir = test::temp_dir();
  write_file(dir + "/blocks.bin", blocks);
  write_file(dir + "/floats.bin", floats);
  const std::string cmd = "python3 '" + std::string(QLENS_SOURCE_DIR) + "/tests/quant_reference_check.py' " +
                          name_of(t) + " '" + dir + "/blocks.bin' '" + dir + "/floats.bin' " +
                          std::to_string(floats.size()) + (quantize_mode ? " --quantize" : "");
  return test::run_command(cmd, out);
}

TEST(QuantLegacy, GgufPyDequantizesTheSame) {
  if (!have_gguf_py()) GTEST_SKIP() << "python3 with the gguf and numpy packages (PyPI) is not available";
  std::mt19937 rng(41);
  for (DType t : kTypes) {
    SCOPED_TRACE(name_of(t));
    const TypeTraits& tt = type_traits(t);
    // Blocks from our quantizers (with and without importance, Gaussian and
    // outlier rows), then blocks of random bytes with a finite random scale.
    const int64_t n = 256;
    std::vector<uint8_t> blocks;
    for (int rep = 0; rep < 4; ++rep) {
      const std::vector<float> x = rep % 2 ? with_outliers(rng, n * 16) : gaussian(rng, n * 16, 0.1f);
      const std::vector<float> imp = random_importance(rng, n);
      for (const auto& q : {from_float(t, x), quantize(t, x, n, nullptr), quantize(t, x, n, imp.data())})
        blocks.insert(blocks.end(), q.begin(), q.end());
    }
    for (int b = 0; b < 512; ++b) {
      std::vector<uint8_t> blk(tt.block_bytes);
      for (auto& byte : blk) byte = static_cast<uint8_t>(rng());
      // The fp16 fields finite (exponent bits 0x7c of the high byte not all
      // set): d at bytes 0-1, and m or s at bytes 2-3 in Q4_1, Q5_1, Q8_1.
      const bool second_half = t == DType::Q4_1 || t == DType::Q5_1 || t == DType::Q8_1;
      for (size_t hi : {size_t{1}, size_t{3}})
        if ((hi == 1 || second_half) && (blk[hi] & 0x7c) == 0x7c) blk[hi] &= 0xbf;
      blocks.insert(blocks.end(), blk.begin(), blk.end());
    }
    const std::vector<float> y = to_float(t, blocks);
    std::string out;
    const int rc = reference_check(t, blocks, y, false, &out);
    if (rc == 3) {
      std::printf("%s: %s", name_of(t).c_str(), out.c_str());  // gguf-py has no Q8_1 dequantizer
      continue;
    }
    EXPECT_EQ(rc, 0) << out;
  }
}

TEST(QuantLegacy, GgufPyReferenceQuantizersMatchFromFloat) {
  if (!have_gguf_py()) GTEST_SKIP() << "python3 with the gguf and numpy packages (PyPI) is not available";
  std::mt19937 rng(42);
  std::vector<float> x = gaussian(rng, 32 * 2048);
  const std::vector<float> o = with_outliers(rng, 32 * 1024);
  x.insert(x.end(), o.begin(), o.end());
  x.insert(x.end(), 64, 0.0f);
  x.insert(x.end(), 32, 0.75f);
  for (DType t : kTypes) {
    SCOPED_TRACE(name_of(t));
    std::string out;
    // Q8_0's from_float is the activation form; gguf-py's is the reference.
    const bool q8 = t == DType::Q8_0 || t == DType::Q8_1;
    const int rc = reference_check(t, q8 ? quantize(t, x, 32, nullptr) : from_float(t, x), x, true, &out);
    if (rc == 3) {
      std::printf("%s: %s", name_of(t).c_str(), out.c_str());  // no Python reference quantizer
      continue;
    }
    EXPECT_EQ(rc, 0) << out;
  }
}

// ---- mul_mat with quantized weights -------------------------------------------------------

struct MatMulRun {
  Graph g;
  std::vector<std::vector<char>> storage;
  std::vector<char> buf;

  void* alloc(size_t n) {
    auto& s = storage.emplace_back(n + 64, 0);
    return s.data() + (64 - reinterpret_cast<uintptr_t>(s.data()) % 64) % 64;
  }
  // out[M, N] = weight[K, M] (of type wt, bytes given) x act[K, N].
  std::vector<float> run(Backend& backend, DType wt, const void* weight, int64_t K, int64_t M,
                         const std::vector<float>& act, int64_t N) {
    Tensor* a = g.new_tensor(wt, {K, M}, "w");
    a->data = alloc(a->nbytes());
    std::memcpy(a->data, weight, a->nbytes());
    Tensor* b = g.new_tensor(DType::F32, {K, N}, "x");
    b->data = alloc(b->nbytes());
    std::memcpy(b->data, act.data(), b->nbytes());
    Tensor* r = mul_mat(g, a, b);
    r->flags |= kFlagOutput;
    g.build(r);
    const MemoryPlan plan = plan_memory(g);
    buf.assign(plan.size + 64, 0);
    char* base = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64;
    apply_memory_plan(g, plan, base);
    backend.compute(g);
    const auto* o = static_cast<const float*>(r->data);
    return std::vector<float>(o, o + M * N);
  }
};

double nmse(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? num / den : num;
}

TEST(QuantLegacy, MulMatMatchesDequantizedWeight) {
  std::vector<std::pair<std::string, std::unique_ptr<Backend>>> backends;
  for (cpu::Isa isa : {cpu::Isa::Scalar, cpu::Isa::Avx2, cpu::Isa::Avx512})
    if (cpu::isa_supported(isa)) backends.emplace_back(cpu::isa_name(isa), cpu::make_cpu_backend(2, isa));
  backends.emplace_back("reference", make_reference_backend());
  std::unique_ptr<Backend> oracle = make_reference_backend();
  std::mt19937 rng(51);
  const int64_t M = 19;
  for (DType t : kTypes) {
    for (int64_t K : {32, 96, 4096}) {
      const std::vector<float> wf = with_outliers(rng, K * M);
      const std::vector<uint8_t> wq = quantize(t, wf, K, nullptr);
      const std::vector<float> wd = to_float(t, wq);  // the dequantized weight, as F32
      for (int64_t N : {1, 7, 37}) {
        SCOPED_TRACE(name_of(t) + " K=" + std::to_string(K) + " N=" + std::to_string(N));
        const std::vector<float> act = gaussian(rng, K * N);
        MatMulRun ref_run;
        const std::vector<float> want = ref_run.run(*oracle, DType::F32, wd.data(), K, M, act, N);
        // The CPU backend multiplies with activations quantized to vec_dot_type
        // (Q8_0 / Q8_1) on both paths, as ggml does (the GEMM path rounds them
        // through it): its reference has the activations round-tripped through
        // that type; the reference backend keeps F32 activations. Q4_1 / Q5_1 use the Q8_1 block's stored s = d * sum(q)
        // (d before its fp16 rounding) for the offset term, which differs from
        // the dequantized activations' sum by up to 2^-10 relative of m * s: 1e-4 there.
        const DType xt = type_traits(t).vec_dot_type;
        const std::vector<float> act_q = to_float(xt, from_float(xt, act));
        MatMulRun ref_q_run;
        const std::vector<float> want_q = ref_q_run.run(*oracle, DType::F32, wd.data(), K, M, act_q, N);
        for (auto& [name, backend] : backends) {
          MatMulRun run;
          const std::vector<float> got = run.run(*backend, t, wq.data(), K, M, act, N);
          // The offset term's bound holds on every path that multiplies
          // quantized activations: the dot kernels and the int8 GEMM (the F32
          // GEMM, without VNNI, meets 1e-10 as well).
          const bool offset = t == DType::Q4_1 || t == DType::Q5_1;
          // (Q8_1 has no quantized dot kernel as a weight type: rows go through
          // to_float, and the activations are still rounded through Q8_1.)
          if (name == "reference")
            EXPECT_LE(nmse(got, want), 1e-10) << name;
          else
            EXPECT_LE(nmse(got, want_q), offset ? 1e-4 : 1e-10) << name;
        }
      }
    }
  }
}

}  // namespace
}  // namespace qlens

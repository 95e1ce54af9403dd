// The level types (the i-quants IQ1_S .. IQ3_S, TQ1_0, TQ2_0; their integer
// view: src/quant/levels.h) as K super-blocks for the K kernels of
// simd_qdot_k.h (dot with Q8_K activations, F32 panels) and
// simd_gemm_int8.h (int8 panels): each decodes a chunk of 32 elements into
// its signed integer levels v in one vector, and gives the chunk's run
// multipliers 2l + 1 as the int16 scales of madd, with d = d_w * factor. So
//   sum over runs (2l + 1) * sum v q  = sum over chunks madd(maddubs(|v|, sign(q, v)), 2l + 1)
// and the float math is the K types' (the sub-block scales d * (2l + 1),
// exact, equal to to_float's run scales times the format's unit).
//
// No int16 or int32 sum overflows: |v| <= 62, |q| <= 127, so a maddubs pair
// is at most 2 * 62 * 127; times 2l + 1 <= 31, and summed over 128 pairs,
// under 2^27.
//
// A chunk's points come from the grid tables (iq_grids.h) by scalar
// lookups, 4 or 8 per chunk, as ggml's kernels read them; what is not a
// lookup (7-bit sign fields and their parity, run codes, index bits kept
// apart from their low bytes) is decoded in vectors once per super-block. The
// signed grids' chunks come as the points' levels and a bit per minus sign,
// which the dot kernel applies to the activations (ggml's trick; on AVX-512 a
// masked subtraction). The IQ1 types and TQ2_0 keep
// unsigned codes (level + offset) and take the offset out with the Q8_K
// bsums, as Q3_K does. TQ1_0's base-3 digits decode through the scalar
// decoder (levels.h) once per super-block.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/simd_qdot_k.h"
#include "quant/iq_grids.h"
#include "quant/iquants.h"
#include "quant/levels.h"
#include "quant/lowbit.h"

namespace qlens::cpu {
namespace {

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

inline uint32_t load_u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// A chunk of the signed grids as its points' levels (unsigned magnitudes)
// and a bit per element that negates it (bit j: element j): v = g, negated
// where set. The dot kernels negate the activations instead, sum g * (-q or
// q), as ggml's do: on AVX-512 a masked subtraction, on AVX2 the bits
// widened to +-1 bytes for vpsignb.
inline __m256i negate_where(__m256i x, uint32_t bits) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  return _mm256_mask_sub_epi8(x, _cvtu32_mask32(bits), _mm256_setzero_si256(), x);
#else
  return _mm256_sign_epi8(x, _mm256_or_si256(bytes_of_bits(bits), _mm256_set1_epi8(1)));
#endif
}
struct SignedChunk {
  __m256i g;
  uint32_t neg;
  __m256i apply(__m256i q) const { return negate_where(q, neg); }
  __m256i levels() const { return negate_where(g, neg); }
};
// Four 8-element points of a 64-bit grid.
inline __m256i grid_points(const uint64_t* grid, const int (&idx)[4]) {
  return _mm256_setr_epi64x(static_cast<long long>(grid[idx[0]]), static_cast<long long>(grid[idx[1]]),
                            static_cast<long long>(grid[idx[2]]), static_cast<long long>(grid[idx[3]]));
}
// Eight 4-element half-points of a 32-bit grid: eight loads, or one gather
// (the indices widened to 32 bits).
template <GridRead R, class I>
inline __m256i grid_halves(const uint32_t* grid, const I* idx) {
  if constexpr (R == GridRead::Gathers) {
    const __m256i idx32 =
        sizeof(I) == 1 ? _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(idx)))
                       : _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(idx)));
    return _mm256_i32gather_epi32(reinterpret_cast<const int*>(grid), idx32, 4);
  } else {
    auto at = [&](int j) { return static_cast<int>(grid[idx[j]]); };
    return _mm256_setr_epi32(at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7));
  }
}

// Bytes of 7 sign bits with bit 7 set where their count is odd (kSigns: the
// formats keep an even count of minus signs per 8 elements). The shifts cross
// bytes, but bits 0..3 of each byte only ever take bits of their own byte.
inline __m256i with_parity_bits(__m256i m) {
  __m256i p = _mm256_xor_si256(m, _mm256_srli_epi32(m, 4));
  p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 2));
  p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 1));
  return _mm256_or_si256(m, _mm256_slli_epi32(_mm256_and_si256(p, _mm256_set1_epi8(1)), 7));
}
// Run codes in the top 4 bits of 8 words as bytes, in word order.
inline __m128i top_nibbles(__m256i w) {
  const __m256i l = _mm256_shuffle_epi8(_mm256_srli_epi32(w, 28),
                                        _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                                         0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
  return _mm_unpacklo_epi32(_mm256_castsi256_si128(l), _mm256_extracti128_si256(l, 1));
}

// Sign words of 4 x 7 bits (IQ2_XXS, IQ3_XXS: bits 7k .. 7k+6 for point k)
// as the 32 negation bits of their chunk, 8 words at once: each field in its
// own byte, and bit 7 the parity that makes the count of minus signs even.
inline __m256i parity_signs(__m256i w) {
  const __m256i f = _mm256_set1_epi32(0x7f);
  __m256i m = _mm256_and_si256(w, f);
  m = _mm256_or_si256(m, _mm256_and_si256(_mm256_slli_epi32(w, 1), _mm256_slli_epi32(f, 8)));
  m = _mm256_or_si256(m, _mm256_and_si256(_mm256_slli_epi32(w, 2), _mm256_slli_epi32(f, 16)));
  m = _mm256_or_si256(m, _mm256_and_si256(_mm256_slli_epi32(w, 3), _mm256_slli_epi32(f, 24)));
  return with_parity_bits(m);
}

// What every level block shares: d (d_w * factor), the multipliers 2l + 1
// per run of kRun (32: 8 of them in both lanes; 16: even runs in the low
// lane, odd in the high, as the K types' sub-blocks of 16; 256: one, 1).
template <int kRun>
struct LevelBlock {
  static constexpr bool kSigned = true, kMins = false, kFold = false;
  static constexpr int kLevel = 0, kSub = kRun;
  float d = 0.0f, dmin = 0.0f;
  __m256i sc = _mm256_set1_epi16(1);
  __m128i odd = _mm_setzero_si128();  // 2l + 1 per run, as bytes
  // l: the run codes as bytes, in run order.
  void set_runs(__m128i l) {
    odd = _mm_add_epi8(_mm_add_epi8(l, l), _mm_set1_epi8(1));
    if constexpr (kRun == 32) {
      sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(odd));
    } else if constexpr (kRun == 16) {
      sc = even_odd_scales(odd);
    }
  }
  __m256i scales(int i) const {
    if constexpr (kRun == 256) return sc;
    return int16_at(sc, i);
  }
  __m256i mins() const { return _mm256_setzero_si256(); }
  void sub_scales(float* dl, float*) const {
    if constexpr (kRun == 256) {
      dl[0] = d;
    } else {
      scaled_floats(_mm_cvtepu8_epi16(odd), d, dl);
      if constexpr (kRun == 16) scaled_floats(_mm_cvtepu8_epi16(_mm_srli_si128(odd, 8)), d, dl + 8);
    }
  }
};

// IQ2_XXS: per group of 32, 4 index bytes and a word of 4 x 7 sign bits and
// the scale (top 4 bits); the 8 words' signs and codes decoded at once.
template <>
struct KBlock<DType::IQ2_XXS> : LevelBlock<32> {
  const uint8_t* q;
  alignas(32) uint32_t neg[8];
  KBlock(const char* b, const float* f16) : q(reinterpret_cast<const uint8_t*>(b) + 2) {
    d = f16[load_u16(b)] * 0.125f;
    // Words 2g + 1 of qs, in group order: the odd words of each lane, then
    // the lanes' 64-bit halves put back in order.
    const __m256 lo = _mm256_castsi256_ps(load256(b + 2)), hi = _mm256_castsi256_ps(load256(b + 34));
    const __m256i w = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8);
    _mm256_store_si256(reinterpret_cast<__m256i*>(neg), parity_signs(w));
    set_runs(top_nibbles(w));
  }
  __m256i codes(int i) const { return chunk(i).levels(); }
  SignedChunk chunk(int i) const {
    const uint8_t* g = q + 8 * i;
    const int idx[4] = {g[0], g[1], g[2], g[3]};
    return {grid_points(quant::iq::kIq2xxsGrid.data(), idx), neg[i]};
  }
};

// The 4-bit run codes of IQ2_XS and IQ2_S: two per byte, low nibble first.
inline __m128i nibble_runs(const char* scales) {
  const __m128i s = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales));
  const __m128i lo = _mm_and_si128(s, _mm_set1_epi8(0x0f));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(0x0f));
  return _mm_unpacklo_epi8(lo, hi);
}

// IQ2_XS: per 8 elements a 16-bit word, a 9-bit index and 7 sign bits.
template <>
struct KBlock<DType::IQ2_XS> : LevelBlock<16> {
  const uint8_t* q;
  alignas(32) uint32_t neg[8];
  KBlock(const char* b, const float* f16) : q(reinterpret_cast<const uint8_t*>(b) + 2) {
    d = f16[load_u16(b)] * 0.125f;
    set_runs(nibble_runs(b + offsetof(quant::iq::BlockIQ2XS, scales)));
    // The 32 words' sign fields as bytes in point order.
    const __m256i s = _mm256_packus_epi16(_mm256_srli_epi16(load256(b + 2), 9), _mm256_srli_epi16(load256(b + 34), 9));
    _mm256_store_si256(reinterpret_cast<__m256i*>(neg), with_parity_bits(_mm256_permute4x64_epi64(s, 0xD8)));
  }
  __m256i codes(int i) const { return chunk(i).levels(); }
  SignedChunk chunk(int i) const {
    uint16_t w[4];
    std::memcpy(w, q + 8 * i, sizeof w);
    const int idx[4] = {w[0] & 511, w[1] & 511, w[2] & 511, w[3] & 511};
    return {grid_points(quant::iq::kIq2xsGrid.data(), idx), neg[i]};
  }
};

// IQ2_S: 10-bit indices (low bytes, then 2 bits each from the group's qh
// byte: bits 2k, 2k + 1 for point k), whole sign bytes. The 32 indices are
// made in vectors once per super-block.
template <>
struct KBlock<DType::IQ2_S> : LevelBlock<16> {
  using B = quant::iq::BlockIQ2S;
  const uint8_t* q;
  alignas(32) uint16_t idx[32];
  KBlock(const char* b, const float* f16) : q(reinterpret_cast<const uint8_t*>(b + offsetof(B, qs))) {
    d = f16[load_u16(b)] * 0.125f;
    set_runs(nibble_runs(b + offsetof(B, scales)));
    // Lane k' of half h: qh byte 4h + k' / 4 shifted so that bits 2k, 2k + 1
    // (k = k' % 4) land at bits 8, 9.
    const __m256i spread = _mm256_setr_epi8(0, -1, 0, -1, 0, -1, 0, -1, 1, -1, 1, -1, 1, -1, 1, -1,  //
                                            2, -1, 2, -1, 2, -1, 2, -1, 3, -1, 3, -1, 3, -1, 3, -1);
    const __m256i shift = _mm256_setr_epi16(256, 64, 16, 4, 256, 64, 16, 4, 256, 64, 16, 4, 256, 64, 16, 4);
    for (int h = 0; h < 2; ++h) {
      const __m256i lo = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * h)));
      const __m256i qh = _mm256_shuffle_epi8(
          _mm256_set1_epi32(static_cast<int>(load_u32_at(reinterpret_cast<const uint8_t*>(b + offsetof(B, qh)) + 4 * h))),
          spread);
      const __m256i high = _mm256_and_si256(_mm256_mullo_epi16(qh, shift), _mm256_set1_epi16(0x300));
      _mm256_store_si256(reinterpret_cast<__m256i*>(idx + 16 * h), _mm256_or_si256(lo, high));
    }
  }
  __m256i codes(int i) const { return chunk(i).levels(); }
  SignedChunk chunk(int i) const {
    const uint16_t* j = idx + 4 * i;
    const int points[4] = {j[0], j[1], j[2], j[3]};
    return {grid_points(quant::iq::kIq2sGrid.data(), points), load_u32_at(q + 32 + 4 * i)};
  }
};

// IQ3_XXS: 64 index bytes of half-points, then per group a word of 4 x 7
// sign bits and the scale (top 4 bits); the 8 words decoded at once.
template <>
struct KBlock<DType::IQ3_XXS> : LevelBlock<32> {
  const uint8_t* q;
  alignas(32) uint32_t neg[8];
  KBlock(const char* b, const float* f16) : q(reinterpret_cast<const uint8_t*>(b) + 2) {
    d = f16[load_u16(b)] * 0.25f;
    const __m256i w = load256(b + 2 + 64);
    _mm256_store_si256(reinterpret_cast<__m256i*>(neg), parity_signs(w));
    set_runs(top_nibbles(w));
  }
  template <GridRead R = GridRead::Loads>
  __m256i codes(int i) const {
    return chunk<R>(i).levels();
  }
  template <GridRead R = GridRead::Loads>
  SignedChunk chunk(int i) const {
    return {grid_halves<R>(quant::iq::kIq3xxsGrid.data(), q + 8 * i), neg[i]};
  }
};

// IQ3_S: 9-bit half-point indices (low bytes, the 9th bits in the group's qh
// byte: bit j for index j), whole sign bytes, 4-bit scales two a byte. The
// 64 indices are made in vectors once per super-block.
template <>
struct KBlock<DType::IQ3_S> : LevelBlock<32> {
  using B = quant::iq::BlockIQ3S;
  const uint8_t* signs;
  alignas(32) uint16_t idx[64];
  KBlock(const char* b, const float* f16) : signs(reinterpret_cast<const uint8_t*>(b + offsetof(B, signs))) {
    d = f16[load_u16(b)];
    uint32_t sc;
    std::memcpy(&sc, b + offsetof(B, scales), sizeof sc);
    const __m128i s = _mm_cvtsi32_si128(static_cast<int>(sc));
    set_runs(_mm_unpacklo_epi8(_mm_and_si128(s, _mm_set1_epi8(0x0f)),
                               _mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(0x0f))));
    const __m256i bit = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
                                          static_cast<short>(32768));
    for (int h = 0; h < 4; ++h) {  // groups 2h and 2h + 1
      const __m256i lo = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + offsetof(B, qs) + 16 * h)));
      const __m256i qh = _mm256_set1_epi16(static_cast<short>(load_u16(b + offsetof(B, qh) + 2 * h)));
      const __m256i ninth = _mm256_and_si256(_mm256_cmpeq_epi16(_mm256_and_si256(qh, bit), bit), _mm256_set1_epi16(256));
      _mm256_store_si256(reinterpret_cast<__m256i*>(idx + 16 * h), _mm256_or_si256(lo, ninth));
    }
  }
  template <GridRead R = GridRead::Loads>
  __m256i codes(int i) const {
    return chunk<R>(i).levels();
  }
  template <GridRead R = GridRead::Loads>
  SignedChunk chunk(int i) const {
    return {grid_halves<R>(quant::iq::kIq3sGrid.data(), idx + 8 * i), load_u32_at(signs + 4 * i)};
  }
};

// The IQ1 types keep their levels v = 8 g + delta (g in -1..1, delta +-1)
// as unsigned codes v + 9 (0..18), the offset taken out with the Q8_K bsums
// as Q3_K's is (kFold): sum over runs s_r sum (u - 9) q = sum s_r sum u q -
// sum over bsum groups 9 s_r B_j. No sign operations per chunk.
inline constexpr int kIq1Offset = 9;

// The 1-bit grid's points as codes 8 g + 9 (bytes 1, 9, 17).
constexpr std::array<uint64_t, 2048> make_iq1_codes() {
  std::array<uint64_t, 2048> t{};
  for (size_t i = 0; i < t.size(); ++i)
    for (int j = 0; j < 8; ++j) {
      const int g = static_cast<int8_t>(quant::iq::kIq1sGrid[i] >> (8 * j) & 0xFF);
      t[i] |= static_cast<uint64_t>(8 * g + kIq1Offset) << (8 * j);
    }
  return t;
}
inline constexpr std::array<uint64_t, 2048> kIq1Codes = make_iq1_codes();

// The codes 8 g + 9 of four points: four loads, or one gather.
template <GridRead R>
inline __m256i iq1_points(const uint16_t* idx) {
  const uint64_t* t = kIq1Codes.data();
  if constexpr (R == GridRead::Gathers) {
    return _mm256_i32gather_epi64(reinterpret_cast<const long long*>(t),
                                  _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(idx))), 8);
  } else {
    return _mm256_setr_epi64x(static_cast<long long>(t[idx[0]]), static_cast<long long>(t[idx[1]]),
                              static_cast<long long>(t[idx[2]]), static_cast<long long>(t[idx[3]]));
  }
}
// The codes 8 g + delta + 9 of four points, delta +-1 per point (minus:
// 0xFF bytes where -1).
template <GridRead R>
inline __m256i shifted_points(const uint16_t* idx, __m256i minus) {
  return _mm256_add_epi8(iq1_points<R>(idx), _mm256_or_si256(minus, _mm256_set1_epi8(1)));
}

// IQ1_S: 11-bit indices (low bytes, 3 bits each from the group's qh word:
// bits 3k .. 3k+2 for point k), the scale in qh bits 12-14 and the shift's
// sign in bit 15. Indices, shift signs and run codes are made in vectors
// once per super-block.
template <>
struct KBlock<DType::IQ1_S> : LevelBlock<32> {
  static constexpr bool kSigned = false, kMins = true, kFold = true;
  static constexpr int kLevel = kIq1Offset;
  using B = quant::iq::BlockIQ1S;
  alignas(32) uint16_t idx[32];
  alignas(16) int8_t minus[16];  // per group: -1 where the shift is -1/8
  __m256i offsets;  // (9 - delta) s_r per bsum group (mins(), for dot_codes)
  KBlock(const char* b, const float* f16) {
    d = f16[load_u16(b)] * 0.125f;
    const __m128i qh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + offsetof(B, qh)));
    const __m128i l = _mm_and_si128(_mm_srli_epi16(qh, 12), _mm_set1_epi16(7));
    set_runs(_mm_packus_epi16(l, l));
    const __m128i runs = _mm_add_epi16(_mm_add_epi16(l, l), _mm_set1_epi16(1));
    const __m128i minus16 = _mm_srai_epi16(qh, 15);
    // 9 - delta: 8, or 10 where minus.
    offsets = mins_per_group(
        _mm_mullo_epi16(runs, _mm_sub_epi16(_mm_set1_epi16(kIq1Offset - 1), _mm_add_epi16(minus16, minus16))));
    _mm_store_si128(reinterpret_cast<__m128i*>(minus), _mm_packs_epi16(minus16, _mm_setzero_si128()));
    // Lane k' of half h: qh word 4h + k' / 4, its bits 3k .. 3k+2 (k = k' %
    // 4) moved to bits 8-10 (left 8, 5, 2; right 1 for k = 3).
    const __m256i spread = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3,  //
                                            4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7);
    const __m256i shift = _mm256_setr_epi16(256, 32, 4, 1, 256, 32, 4, 1, 256, 32, 4, 1, 256, 32, 4, 1);
    for (int h = 0; h < 2; ++h) {
      const __m256i lo = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + offsetof(B, qs) + 16 * h)));
      uint64_t words;
      std::memcpy(&words, b + offsetof(B, qh) + 8 * h, sizeof words);
      const __m256i w = _mm256_shuffle_epi8(_mm256_set1_epi64x(static_cast<long long>(words)), spread);
      const __m256i moved = _mm256_blend_epi16(_mm256_mullo_epi16(w, shift), _mm256_srli_epi16(w, 1), 0x88);
      _mm256_store_si256(reinterpret_cast<__m256i*>(idx + 16 * h),
                         _mm256_or_si256(lo, _mm256_and_si256(moved, _mm256_set1_epi16(0x700))));
    }
  }
  template <GridRead R = GridRead::Loads>
  __m256i codes(int i) const {
    return shifted_points<R>(idx + 4 * i, _mm256_set1_epi8(minus[i]));
  }
  // The dot kernel's: the group's delta (one per 32 elements, two bsum
  // groups) moves from the codes into the offsets, sum (u - 9 + delta) q =
  // sum u q - (9 - delta) sum q.
  template <GridRead R = GridRead::Loads>
  __m256i dot_codes(int i) const {
    return iq1_points<R>(idx + 4 * i);
  }
  __m256i mins() const { return offsets; }
};

// IQ1_M: per 16 elements a qh byte (two nibbles: 3 index bits, the shift's
// sign), 3-bit scales (four per 16-bit word, whose top nibbles together are
// the fp16 super-block scale).
template <>
struct KBlock<DType::IQ1_M> : LevelBlock<16> {
  static constexpr bool kSigned = false, kMins = true, kFold = true;
  static constexpr int kLevel = kIq1Offset;
  using B = quant::iq::BlockIQ1M;
  const uint8_t* q;
  const uint8_t* qh;
  __m256i offsets;  // 9 (2l + 1) per run (mins())
  alignas(32) uint16_t idx[32];
  alignas(16) int8_t minus[32];  // per point: -1 where its shift is -1/8
  KBlock(const char* b, const float* f16)
      : q(reinterpret_cast<const uint8_t*>(b + offsetof(B, qs))),
        qh(reinterpret_cast<const uint8_t*>(b + offsetof(B, qh))) {
    uint64_t scale_words;  // the 4 16-bit scale words
    std::memcpy(&scale_words, b + offsetof(B, scales), sizeof scale_words);
    const auto w = [&](int k) { return static_cast<int>(scale_words >> (16 * k) & 0xffff); };
    d = f16[(w(0) >> 12) | ((w(1) >> 8) & 0x00f0) | ((w(2) >> 4) & 0x0f00) | (w(3) & 0xf000)] * 0.125f;
    // Run r's code is bits 3 (r % 4) of word r / 4: int16 lane r gets word
    // r / 4, shifted left by 13 - 3 (r % 4) (a multiply) and right by 13.
    const __m256i words = _mm256_shuffle_epi8(_mm256_set1_epi64x(static_cast<long long>(scale_words)),
                                              _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3,  //
                                                               4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7));
    const __m256i l = _mm256_srli_epi16(
        _mm256_mullo_epi16(words, _mm256_setr_epi16(8192, 1024, 128, 16, 8192, 1024, 128, 16,  //
                                                    8192, 1024, 128, 16, 8192, 1024, 128, 16)),
        13);
    set_runs(_mm_packus_epi16(_mm256_castsi256_si128(l), _mm256_extracti128_si256(l, 1)));
    // The folded offsets 9 s_r (run r: bsum group r).
    offsets = _mm256_mullo_epi16(_mm256_cvtepu8_epi16(odd), _mm256_set1_epi16(kIq1Offset));
    // The indices: lane p of half h gets qh byte 8h + p / 2, its nibble p % 2
    // moved to bits 8-11 (left 8 or 4), of which bits 8-10 are kept.
    const __m256i spread = _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,  //
                                            4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
    const __m256i shift = _mm256_setr_epi16(256, 16, 256, 16, 256, 16, 256, 16, 256, 16, 256, 16, 256, 16, 256, 16);
    // Point p's shift sign: bit 3 (p even) or 7 (p odd) of qh byte p / 2.
    const __m128i bytes16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qh));
    const __m128i even = _mm_cmpeq_epi8(_mm_and_si128(bytes16, _mm_set1_epi8(0x08)), _mm_set1_epi8(0x08));
    const __m128i odd_p = _mm_cmpeq_epi8(_mm_and_si128(bytes16, _mm_set1_epi8(static_cast<char>(0x80))),
                                         _mm_set1_epi8(static_cast<char>(0x80)));
    _mm_store_si128(reinterpret_cast<__m128i*>(minus), _mm_unpacklo_epi8(even, odd_p));
    _mm_store_si128(reinterpret_cast<__m128i*>(minus + 16), _mm_unpackhi_epi8(even, odd_p));
    for (int h = 0; h < 2; ++h) {
      const __m256i lo = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * h)));
      uint64_t bytes;
      std::memcpy(&bytes, qh + 8 * h, sizeof bytes);
      const __m256i w = _mm256_shuffle_epi8(_mm256_set1_epi64x(static_cast<long long>(bytes)), spread);
      _mm256_store_si256(reinterpret_cast<__m256i*>(idx + 16 * h),
                         _mm256_or_si256(lo, _mm256_and_si256(_mm256_mullo_epi16(w, shift), _mm256_set1_epi16(0x700))));
    }
  }
  __m256i mins() const { return offsets; }
  template <GridRead R = GridRead::Loads>
  __m256i codes(int i) const {
    return shifted_points<R>(idx + 4 * i, _mm256_cvtepi8_epi64(_mm_cvtsi32_si128(static_cast<int>(load_u32_at(
                                              reinterpret_cast<const uint8_t*>(minus) + 4 * i)))));
  }
};

// TQ2_0: element e's 2-bit code at bits 2 ((e / 32) % 4) of byte
// 32 (e / 128) + e % 32; level = code - 1. The codes stay unsigned, the
// offset taken out with the Q8_K bsums as Q3_K's is (kFold: sum (c - 1) q =
// sum c q - sum q): no sign operations.
template <>
struct KBlock<DType::TQ2_0> : LevelBlock<256> {
  static constexpr bool kSigned = false, kMins = true, kFold = true;
  static constexpr int kLevel = 1;
  const char* q;
  KBlock(const char* b, const float* f16) : q(b) { d = f16[load_u16(b + offsetof(quant::lowbit::BlockTQ2_0, d))]; }
  __m256i codes(int i) const { return bits_at(load256(q + 32 * (i / 4)), 2 * (i % 4), 3); }
  __m256i mins() const { return _mm256_set1_epi16(1); }
};

// TQ1_0: base-3 digits in three layouts; the scalar decoder's levels.
template <>
struct KBlock<DType::TQ1_0> : LevelBlock<256> {
  quant::Levels levels;
  KBlock(const char* b, const float*) {
    static const quant::LevelFormat& f = *quant::level_format(DType::TQ1_0);
    f.decode(b, levels);
    d = levels.d;
  }
  __m256i codes(int i) const { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(levels.v + 32 * i)); }
};

#endif

}  // namespace
}  // namespace qlens::cpu

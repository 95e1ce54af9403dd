// The int8 GEMM path's kernels (see gemm_int8.h for the driver and the panel
// layouts): weight repacking per type, activation packing per family, and
// one micro-kernel template per family written over an integer-vector
// wrapper (AVX-512 VNNI: 16 lanes; AVX-VNNI: 8 lanes). Included only by the
// per-instruction-set files (through simd_matmul.h); internal linkage.
//
// The weights enter as unsigned 8-bit codes u (the u8 operand of vpdpbusd),
// the activations as their Q8 int8 values q (the s8 operand, broadcast 4 at a
// time). A weight's integer level is v = u - b for a per-type bias b (Q4_0:
// 8, Q5_0: 16, Q3_K: 4, Q6_K: 32, the signed types Q8_0 / IQ4_NL / IQ4_XS
// stored as v + 128: 128; the unsigned-code types: 0), so
//   sum v q = sum u q - b sum q,
// and -b sum q, per activation row and group, is where each group's int32
// accumulator starts (computed when activations are packed): the integer sums
// are those of the dot kernels exactly (|sum u q| <= 32 * 255 * 127 < 2^21).
// Per group (a legacy block, or a K sub-block of 16 / 32) the int32 sums are
// converted once to float and scaled:
//   legacy: acc += (float(isum) * d_w) * d_x  (+ m_w * s_x for Q4_1 / Q5_1)
//           (the scaled types, Q1_0 .. NVFP4, as legacy units of 32 with a
//           weight scale per group: NVFP4's groups of 16, one otherwise)
//   K:      sb  += float(isum) * (d * s_j)
//           and once per super-block  c += (sb - dmin * float(sum_j m_j B_j)) * d_x
// with d * s_j computed as to_float computes it, and the mins' sum (Q2_K,
// Q4_K, Q5_K; B_j the activations' sum over sub-block j, from the Q8_K
// bsums) exact in int32 as well, with vpdpwssd on int16 pairs (m_j, m_j+1) x
// (B_j, B_j+1) (|B_j| <= 32 * 127, m_j <= 63), as ggml's dot kernels do.
// Plain AVX2 takes the signed types (Q8_0, IQ4_NL, IQ4_XS) "wide": their
// levels v themselves (b = 0) as int16, and the activations as int16 (see
// I8Wide).
// The float sums differ from the dot kernels' only in their order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/matmul.h"
#include "backend/cpu/qdot.h"
#include "backend/cpu/qdot_k.h"
#include "backend/cpu/qdot_levels.h"
#include "backend/cpu/simd.h"
#include "backend/cpu/simd_qdot.h"
#include "backend/cpu/simd_qdot_k.h"
#include "backend/cpu/simd_qdot_levels.h"
#include "backend/cpu/simd_qdot_scaled.h"

namespace qlens::cpu {
namespace {

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

// ---- the per-type table ----------------------------------------------------

// unit: elements per panel unit (a legacy block, a K super-block); group:
// elements per integer scale; mins: a min term (legacy: m_w * s_x per block;
// K: the mins' sum above); bias: b above; wide: the codes are the signed
// levels v themselves (bias 0), and codes and activations are int16 (I8Wide);
// umax: the largest |code| the kernels see.
struct I8Format {
  bool legacy;
  int unit, group;
  bool mins;
  int bias;
  bool wide;
  int umax;
  constexpr int groups() const { return unit / group; }
  // Bytes of a unit's codes per panel row (weights and activations alike).
  constexpr int code_bytes() const { return wide ? 2 * unit : unit; }
};

// The format of type T; signed_codes: the kernel takes the signed types'
// levels as they are, wide (plain AVX2), instead of as v + 128 (vpdpbusd).
template <DType T, bool signed_codes>
constexpr I8Format i8_format() {
  if constexpr (T == DType::Q4_0 || T == DType::Q4_1 || T == DType::Q5_0 || T == DType::Q5_1 ||
                T == DType::Q8_0 || T == DType::IQ4_NL) {
    using F = QFormat<T>;
    const bool is_signed = F::kBits == 8 || F::kTable;
    const bool wide = is_signed && signed_codes;
    return {true,  quant::kLegacyBlock, quant::kLegacyBlock, F::kOffset, is_signed ? (wide ? 0 : 128) : F::kBias,
            wide,  is_signed ? 128 : (1 << F::kBits) - 1};
  } else if constexpr (is_scaled_qtype<T>()) {
    // Units of one Q8_0 block, a scale per 32 elements (NVFP4: per 16).
    constexpr int group = SBlock<T>::kGroup < 32 ? SBlock<T>::kGroup : 32;
    return {true, 32, group, false, signed_codes ? 0 : 128, signed_codes, 128};
  } else {
    using K = KBlock<T>;
    const bool wide = K::kSigned && signed_codes;
    // Unsigned codes: 2 bits (Q2_K, TQ2_0), 3 (Q3_K), 4 (Q4_K), 5 (Q5_K), 6 (Q6_K).
    const int bits = T == DType::Q2_K || T == DType::TQ2_0 ? 2
                     : T == DType::Q3_K                       ? 3
                     : T == DType::Q4_K                       ? 4
                     : T == DType::Q5_K                       ? 5
                                                              : 6;
    return {false, quant::kq::kQK, sub_block_size<T>(), K::kMins && !K::kFold,
            K::kSigned ? (wide ? 0 : 128) : K::kLevel, wide, K::kSigned ? 128 : (1 << bits) - 1};
  }
}

// Bytes of the min fields of a unit, per row of a panel: legacy m_w (f32); K
// the int16 pairs of m_j [groups / 2] and -dmin (f32).
constexpr size_t i8_min_bytes(I8Format f) {
  return !f.mins ? 0 : f.legacy ? 4 : 2 * static_cast<size_t>(f.groups()) + 4;
}
// Bytes of one unit of a weight panel of nr rows: codes [unit / 4][nr][4]
// (wide: int16 [unit / 2][nr][2]), scales [groups][nr] floats, then the mins
// (where the type has them): legacy [nr] floats; K pairs [groups / 2][nr]
// int16 x 2, -dmin [nr] floats.
constexpr size_t i8_w_unit_bytes(I8Format f, int nr) {
  return (static_cast<size_t>(f.code_bytes()) + 4 * static_cast<size_t>(f.groups()) + i8_min_bytes(f)) * nr;
}
// Bytes of one unit of an activation panel of mr rows: codes [unit / 4][mr][4]
// (wide: int16 [unit / 2][mr][2]), d_x [mr] floats, group starts [groups][mr]
// int32, then the min factors where the type has mins: legacy s_x [mr]
// floats; K the int16 pairs of B_j [groups / 2][mr].
constexpr size_t i8_x_unit_bytes(I8Format f, int mr) {
  const size_t mins = !f.mins ? 0 : f.legacy ? 4 : 2 * static_cast<size_t>(f.groups());
  return (static_cast<size_t>(f.code_bytes()) + 4 + 4 * static_cast<size_t>(f.groups()) + mins) * mr;
}

// ---- weight repacking --------------------------------------------------------

inline __m256i flip_sign(__m256i v) { return _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80))); }

// Codes of the 32 elements of a legacy block (format i8_format<T, SC>).
template <DType T, bool SC>
__m256i legacy_codes(const char* blk) {
  constexpr I8Format f = i8_format<T, SC>();
  if constexpr (f.wide) {
    return decode_block<T>(blk);  // the signed levels
  } else if constexpr (f.bias == 128) {
    return flip_sign(decode_block<T>(blk));
  } else {
    return decode_codes<T>(blk);  // unsigned codes (biased or offset types)
  }
}

// Interleaves 8 rows' 32 codes (r[t]: row t) as [8 dwords][nr][4 bytes] at
// dst (the group of 8 rows at row offset g8 within the nr rows).
template <int NR>
inline void interleave8(__m256i* r, uint8_t* dst, int g8) {
  __m256 f[8];
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) f[t] = _mm256_castsi256_ps(r[t]);
  Avx2::transpose8(f);  // f[j] = dword j of rows 0..7
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) _mm256_storeu_ps(reinterpret_cast<float*>(dst + (j * NR + g8) * 4), f[j]);
}

// The same 8 rows wide: [16 pairs][nr][2 int16], dword j of interleave8
// split into its rows' first two codes (pair 2j) and last two (pair 2j + 1).
template <int NR>
inline void interleave8_wide(__m256i* r, uint8_t* dst, int g8) {
  __m256 f[8];
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) f[t] = _mm256_castsi256_ps(r[t]);
  Avx2::transpose8(f);
  // Per 128-bit lane (4 rows of 4 codes): the rows' codes 0-1, then 2-3;
  // then the lanes' halves in order: rows 0-7's pair 2j, rows 0-7's pair 2j + 1.
  const __m256i pairs = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,  //
                                         0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    const __m256i v = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(_mm256_castps_si256(f[j]), pairs), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (2 * j * NR + g8) * 4),
                        _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + ((2 * j + 1) * NR + g8) * 4),
                        _mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1)));
  }
}

// Interleaves 8 rows' 32 codes in format f's layout.
template <I8Format f, int NR>
inline void interleave8_codes(__m256i* r, uint8_t* dst, int g8) {
  if constexpr (f.wide) {
    interleave8_wide<NR>(r, dst, g8);
  } else {
    interleave8<NR>(r, dst, g8);
  }
}

// The row loop of the legacy-like packings (a unit is one block of 32 per
// row): for each of nu units and each panel row i, row(u, i, scale) returns
// the row's 32 codes and writes its floats (scale[g * NR + i] per group, the
// legacy mins at scale[NR + i]); rows past nrows are zeros.
template <I8Format f, int NR, class Row>
void i8_pack_units(int64_t nrows, int64_t nu, uint8_t* out, Row row) {
  for (int64_t u = 0; u < nu; ++u, out += i8_w_unit_bytes(f, NR)) {
    float* scale = reinterpret_cast<float*>(out + f.code_bytes() * NR);
    for (int g8 = 0; g8 < NR; g8 += 8) {
      __m256i r[8];
      for (int t = 0; t < 8; ++t) {
        const int64_t i = g8 + t;
        if (i < nrows) {
          r[t] = row(u, i, scale);
          continue;
        }
        r[t] = _mm256_setzero_si256();
        for (int g = 0; g < f.groups() + (f.mins ? 1 : 0); ++g) scale[g * NR + i] = 0.0f;
      }
      interleave8_codes<f, NR>(r, out, g8);
    }
  }
}

// I8PackWFn for a legacy type: rows [0, nrows) (zeros past them), blocks
// [u0, u0 + nu).
template <DType T, int NR, bool SC>
void i8_pack_legacy(const char* row0, size_t row_stride, int64_t nrows, int64_t u0, int64_t nu, uint8_t* out) {
  constexpr I8Format f = i8_format<T, SC>();
  using B = typename QFormat<T>::Block;
  const float* f16 = fp16_table();
  i8_pack_units<f, NR>(nrows, nu, out, [&](int64_t u, int64_t i, float* scale) {
    const char* blk = row0 + i * row_stride + (u0 + u) * sizeof(B);
    scale[i] = f16[load_u16(blk + offsetof(B, d))];
    if constexpr (f.mins) scale[NR + i] = f16[load_u16(blk + offsetof(B, m))];
    return legacy_codes<T, SC>(blk);
  });
}

// The integer sub-block mins of a K super-block as int16 (Q4_K, Q5_K: 8;
// Q2_K: 16).
template <DType T>
__m256i int_mins(const KBlock<T>& kb) {
  if constexpr (T == DType::Q2_K) {
    return _mm256_cvtepu8_epi16(kb.m);
  } else {
    return _mm256_castsi128_si256(kb.m);
  }
}

// I8PackWFn for a K type: super-blocks [u0, u0 + nu).
template <DType T, int NR, bool SC, GridRead R>
void i8_pack_k(const char* row0, size_t row_stride, int64_t nrows, int64_t u0, int64_t nu, uint8_t* out) {
  constexpr I8Format f = i8_format<T, SC>();
  constexpr int G = f.groups();
  using K = KBlock<T>;
  const float* f16 = fp16_table();
  for (int64_t u = 0; u < nu; ++u, out += i8_w_unit_bytes(f, NR)) {
    float* scale = reinterpret_cast<float*>(out + f.code_bytes() * NR);
    uint32_t* pairs = reinterpret_cast<uint32_t*>(scale + G * NR);
    float* dmin = reinterpret_cast<float*>(pairs + G / 2 * NR);
    for (int g8 = 0; g8 < NR; g8 += 8) {
      __m256i codes[8][8];  // [chunk of 32][row]
      for (int t = 0; t < 8; ++t) {
        const int64_t i = g8 + t;
        if (i >= nrows) {
          for (int c = 0; c < 8; ++c) codes[c][t] = _mm256_setzero_si256();
          for (int j = 0; j < G; ++j) scale[j * NR + i] = 0.0f;
          if constexpr (f.mins) {
            for (int p = 0; p < G / 2; ++p) pairs[p * NR + i] = 0;
            dmin[i] = 0.0f;
          }
          continue;
        }
        const K kb(row0 + i * row_stride + (u0 + u) * kSuperBlockBytes<T>, f16);
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
          const __m256i v = codes_read<R>(kb, c);
          codes[c][t] = K::kSigned && !f.wide ? flip_sign(v) : v;
        }
        alignas(32) float dl[16], ml[16];
        kb.sub_scales(dl, ml);
        for (int j = 0; j < G; ++j) scale[j * NR + i] = dl[j];
        if constexpr (f.mins) {
          alignas(32) uint32_t m[8];  // the int16 mins, two per dword
          _mm256_store_si256(reinterpret_cast<__m256i*>(m), int_mins(kb));
          for (int p = 0; p < G / 2; ++p) pairs[p * NR + i] = m[p];
          dmin[i] = -kb.dmin;
        }
      }
      for (int c = 0; c < 8; ++c) interleave8_codes<f, NR>(codes[c], out + c * f.code_bytes() / 8 * NR, g8);
    }
  }
}

// ---- activation packing --------------------------------------------------------

// A unit's activation codes q into slot r of a panel of MR rows: 4 at a
// time, or (wide) int16 pairs.
template <I8Format f, int MR>
inline void pack_x_codes(const int8_t* q, int r, uint8_t* out) {
  if constexpr (f.wide) {
    for (int k2 = 0; k2 < f.unit / 2; ++k2) {
      const int16_t pair[2] = {q[2 * k2], q[2 * k2 + 1]};
      std::memcpy(out + (k2 * MR + r) * 4, pair, 4);
    }
  } else {
    for (int k4 = 0; k4 < f.unit / 4; ++k4) std::memcpy(out + (k4 * MR + r) * 4, q + 4 * k4, 4);
  }
}

// I8PackXFn for a legacy or scaled type: one row of XB (Q8_0 / Q8_1) blocks
// (nu) into slot r of an activation panel of MR rows (the other slots
// untouched); a group start per group of the unit (NVFP4: two).
template <DType T, class XB, int MR, bool SC>
void i8_pack_x_legacy(const char* xrow, int r, int64_t nu, uint8_t* out) {
  constexpr I8Format f = i8_format<T, SC>();
  constexpr int G = f.groups();
  const float* f16 = fp16_table();
  for (int64_t u = 0; u < nu; ++u, out += i8_x_unit_bytes(f, MR)) {
    const char* xb = xrow + u * sizeof(XB);
    const auto* q = reinterpret_cast<const int8_t*>(xb + qs_offset<XB>());
    pack_x_codes<f, MR>(q, r, out);
    float* dx = reinterpret_cast<float*>(out + f.code_bytes() * MR);
    dx[r] = f16[load_u16(xb + offsetof(XB, d))];
    for (int g = 0; g < G; ++g) {
      int sum = 0;
      for (int k = g * f.group; k < (g + 1) * f.group; ++k) sum += q[k];
      reinterpret_cast<int32_t*>(dx + MR)[g * MR + r] = -f.bias * sum;
    }
    if constexpr (f.mins) dx[(1 + G) * MR + r] = f16[load_u16(xb + offsetof(XB, s))];
  }
}

// I8PackWFn for a scaled type: units (chunks of 32 of its blocks) [u0, u0 + nu).
template <DType T, int NR, bool SC>
void i8_pack_scaled(const char* row0, size_t row_stride, int64_t nrows, int64_t u0, int64_t nu, uint8_t* out) {
  constexpr I8Format f = i8_format<T, SC>();
  using S = SBlock<T>;
  constexpr int kChunks = S::kElems / 32;
  const float* f16 = fp16_table();
  i8_pack_units<f, NR>(nrows, nu, out, [&](int64_t u, int64_t i, float* scale) {
    const int64_t block = (u0 + u) / kChunks;
    const int j = static_cast<int>((u0 + u) % kChunks);
    const S sb(row0 + i * row_stride + block * S::kBytes, f16);
    for (int g = 0; g < f.groups(); ++g) scale[g * NR + i] = sb.scale((32 * j + f.group * g) / S::kGroup);
    return f.wide ? sb.chunk(j) : flip_sign(sb.chunk(j));
  });
}

// I8PackXFn for a K type: one Q8_K row (nu super-blocks).
template <DType T, int MR, bool SC>
void i8_pack_x_k(const char* xrow, int r, int64_t nu, uint8_t* out) {
  constexpr I8Format f = i8_format<T, SC>();
  constexpr int G = f.groups();
  using XB = quant::kq::BlockQ8K;
  for (int64_t u = 0; u < nu; ++u, out += i8_x_unit_bytes(f, MR)) {
    const char* xb = xrow + u * sizeof(XB);
    pack_x_codes<f, MR>(reinterpret_cast<const int8_t*>(xb + offsetof(XB, qs)), r, out);
    float* dx = reinterpret_cast<float*>(out + f.code_bytes() * MR);
    std::memcpy(dx + r, xb + offsetof(XB, d), sizeof(float));
    int16_t bsums[16];
    std::memcpy(bsums, xb + offsetof(XB, bsums), sizeof bsums);
    int32_t* start = reinterpret_cast<int32_t*>(dx + MR);
    auto* pairs = reinterpret_cast<int16_t*>(start + G * MR);  // [G / 2][MR][2]
    for (int j = 0; j < G; ++j) {
      int b = 0;
      for (int s = 0; s < f.group / 16; ++s) b += bsums[j * f.group / 16 + s];
      start[j * MR + r] = -f.bias * b;
      if constexpr (f.mins) pairs[(j / 2 * MR + r) * 2 + j % 2] = static_cast<int16_t>(b);
    }
  }
}

// ---- the micro-kernel ------------------------------------------------------------

inline int32_t load_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The wrapper whose tile computes format F's products: Q itself, or the
// wide formats' (AVX2).
template <class Q, bool wide>
struct TileOf {
  using type = Q;
};

// The integer-vector wrappers of this file's instruction set.
//
// I8Vnni: one vpdpbusd per 4 code x activation pairs. It is a VNNI
// instruction, which the files' flags (AVX-512 F/BW/VL/DQ, or AVX2) do not
// enable: the wrapper and the micro-kernel are compiled with it added
// (AVX-512 VNNI, or AVX-VNNI), and chosen only where the CPU reports it
// (isa.h). The maddubs instantiations of the micro-kernel (below) are compiled
// with the same flags but contain no VNNI instruction: only the wrappers'
// intrinsics emit vector integer instructions.
//
// I8Madd (plain AVX2, the unsigned codes): vpmaddubsw multiplies codes by
// activations and adds pairs into int16, vpmaddwd with ones adds int16 pairs
// into int32. Nothing saturates: codes are at most umax, |q| <= 127, and an
// int16 lane sums at most 2 * i8_span(F) products (2 * span * umax * 127 <=
// 32767).
//
// I8Wide (plain AVX2, the signed types' levels, |v| <= 127, wide formats):
// codes and activations as int16, vpmaddwd alone, 2 products per int32 lane.
// One pair of such products already fills an int16, so vpmaddubsw would need
// the sign trick (|v| times q with v's sign, as ggml's dot kernels do) and a
// vpmaddwd for every 4 elements: 3.25 operations on the 2 ports of Zen 3
// that multiply (vpsignb and vpabsb among them) per 4 elements and 8 rows,
// where vpmaddwd on int16 takes 2. Its tile is 3 x 16 (I8Madd's 4 x 8) so
// that one broadcast of an activation pair feeds two weight vectors.
//
// The integer sums are those of I8Vnni and the dot kernels.
#pragma GCC push_options
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#pragma GCC target("avx512vnni")
#if defined(__clang__)  // clang ignores GCC's target pragma
#pragma clang attribute push(__attribute__((target("avx512vnni"))), apply_to = function)
#endif
struct I8Vnni {
  using I = __m512i;
  using F = __m512;
  static constexpr int L = 16;
  static constexpr int kMr = 6, kNv = 2;  // 12 int32 + 12 float accumulators, 2 weight vectors
  static constexpr bool kMaddubs = false;
  static bool available() { return cpu_has_avx512_vnni(); }
  static I iset1(int32_t x) { return _mm512_set1_epi32(x); }
  static I iload(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static I dpbusd(I acc, I u, I s) { return _mm512_dpbusd_epi32(acc, u, s); }
  static I dpwssd(I acc, I a, I b) { return _mm512_dpwssd_epi32(acc, a, b); }
  static I izero() { return _mm512_setzero_si512(); }
  static F cvt(I x) { return _mm512_cvtepi32_ps(x); }
  static F fzero() { return _mm512_setzero_ps(); }
  static F fset1(float x) { return _mm512_set1_ps(x); }
  static F fload(const float* p) { return _mm512_loadu_ps(p); }
  static void fstore(float* p, F x) { _mm512_storeu_ps(p, x); }
  static F fadd(F a, F b) { return _mm512_add_ps(a, b); }
  static F fmul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
};
#else
#pragma GCC target("avxvnni")
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avxvnni"))), apply_to = function)
#endif
// The float and int32 operations both AVX2 wrappers share.
struct I8Avx2Common {
  using I = __m256i;
  using F = __m256;
  static constexpr int L = 8;
  static I iset1(int32_t x) { return _mm256_set1_epi32(x); }
  static I iload(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static I izero() { return _mm256_setzero_si256(); }
  static F cvt(I x) { return _mm256_cvtepi32_ps(x); }
  static F fzero() { return _mm256_setzero_ps(); }
  static F fset1(float x) { return _mm256_set1_ps(x); }
  static F fload(const float* p) { return _mm256_loadu_ps(p); }
  static void fstore(float* p, F x) { _mm256_storeu_ps(p, x); }
  static F fadd(F a, F b) { return _mm256_add_ps(a, b); }
  static F fmul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
};
struct I8Vnni : I8Avx2Common {
  static constexpr int kMr = 3, kNv = 2;  // 6 + 6 accumulators, 2 weight vectors of 16 registers
  static constexpr bool kMaddubs = false;
  static bool available() { return cpu_has_avx_vnni(); }
  static I dpbusd(I acc, I u, I s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
  static I dpwssd(I acc, I a, I b) { return _mm256_dpwssd_avx_epi32(acc, a, b); }
};
struct I8Madd : I8Avx2Common {
  // 4 int32 sums, 4 int16 partial sums and 4 float accumulators; 1 weight
  // vector.
  static constexpr int kMr = 4, kNv = 1;
  static constexpr bool kMaddubs = true;
  static bool available() { return true; }
  static I maddubs(I u, I s) { return _mm256_maddubs_epi16(u, s); }
  // No sum saturates or wraps (i8_span).
  static I add16(I a, I b) { return add16_in_order(a, b); }
  static I widen_add(I acc, I p16) { return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1))); }
  static I dpwssd(I acc, I a, I b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
};
struct I8Wide : I8Avx2Common {
  // 6 int32 sums and 6 float accumulators, 2 weight vectors, 1 activation pair.
  static constexpr int kMr = 3, kNv = 2;
  static constexpr bool kMaddubs = false;
  static I dpwssd(I acc, I a, I b) { return add32_in_order(acc, _mm256_madd_epi16(a, b)); }
};
template <>
struct TileOf<I8Madd, true> {
  using type = I8Wide;
};
#endif

// Steps of 4 elements whose maddubs products an int16 lane may sum (see
// I8Madd): the largest divisor of a group's steps that cannot saturate.
constexpr int i8_span(I8Format f) {
  const int steps = f.group / 4;
  int span = 1;
  for (int d = 1; d <= steps; ++d)
    if (steps % d == 0 && 2 * d * f.umax * 127 <= 32767) span = d;
  return span;
}

// isum[r][v] = start[r] + the integer products of group g's codes (weight
// panel wp, rows v * L ..) and activations (xp, rows r), by wrapper Q.
template <class Q, I8Format F>
inline void i8_group_sums(const uint8_t* wp, const uint8_t* xp, int g, const int32_t* start,
                          typename Q::I (&isum)[Q::kMr][Q::kNv]) {
  using I = typename Q::I;
  constexpr int MR = Q::kMr, NV = Q::kNv, L = Q::L, NR = NV * L, S = F.group / 4;
  if constexpr (!Q::kMaddubs) {
    // One instruction per 32-bit lane and step: vpdpbusd on 4 codes, or
    // (wide) vpmaddwd on 2 int16 codes.
    constexpr int E = F.wide ? 2 : 4, steps = F.group / E;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) isum[r][v] = Q::iset1(start[r]);
#pragma GCC unroll 16
    for (int s = 0; s < steps; ++s) {
      const int k = g * steps + s;
      I w[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) w[v] = Q::iload(wp + (k * NR + v * L) * 4);
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const I x = Q::iset1(load_i32(xp + (k * MR + r) * 4));
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          if constexpr (F.wide)
            isum[r][v] = Q::dpwssd(isum[r][v], w[v], x);
          else
            isum[r][v] = Q::dpbusd(isum[r][v], w[v], x);
        }
      }
    }
  } else {
    // The int32 sums start at the first span's end, so that a single-span
    // group (the 4-bit types) holds only the int16 sums in registers.
    constexpr int SP = i8_span(F);
#pragma GCC unroll 8
    for (int s0 = 0; s0 < S; s0 += SP) {
      I p16[MR][NV];
#pragma GCC unroll 8
      for (int s = s0; s < s0 + SP; ++s) {
        const int k4 = g * S + s;
        I w[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) w[v] = Q::iload(wp + (k4 * NR + v * L) * 4);
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
          const I x = Q::iset1(load_i32(xp + (k4 * MR + r) * 4));
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) {
            const I prod = Q::maddubs(w[v], x);
            p16[r][v] = s == s0 ? prod : Q::add16(p16[r][v], prod);
          }
        }
      }
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) isum[r][v] = Q::widen_add(s0 == 0 ? Q::iset1(start[r]) : isum[r][v], p16[r][v]);
    }
  }
}

// The micro-kernel's float accumulators (see i8_micro).
template <class Q>
using I8Acc = typename Q::F[Q::kMr][Q::kNv];

// K formats: a super-block's sums times d_x into c (added when `add`), and
// the accumulators cleared for the next.
template <class Q>
[[gnu::always_inline]] inline void i8_store_super_block(I8Acc<Q>& acc, const float* dx, float* c, int64_t ldc,
                                                        bool add) {
  using R = typename Q::F;
  constexpr int MR = Q::kMr, NV = Q::kNv, L = Q::L;
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      // One explicit FMA: GCC contracts a multiply and an add of intrinsics
      // into one or not depending on register pressure, which made a row's
      // last bit depend on its place in the tile.
      float* p = c + r * ldc + v * L;
      const R dxr = Q::fset1(dx[r]);
      Q::fstore(p, add ? Q::fma(acc[r][v], dxr, Q::fload(p)) : Q::fmul(acc[r][v], dxr));
      acc[r][v] = Q::fzero();
    }
}

// Legacy formats: the products of every unit into c (added when `accumulate`).
template <class Q>
[[gnu::always_inline]] inline void i8_store_legacy(const I8Acc<Q>& acc, float* c, int64_t ldc, bool accumulate) {
  constexpr int MR = Q::kMr, NV = Q::kNv, L = Q::L;
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* p = c + r * ldc + v * L;
      Q::fstore(p, accumulate ? Q::fadd(Q::fload(p), acc[r][v]) : acc[r][v]);
    }
}

// For r < MR, i < NV * L: c[r * ldc + i] = (accumulate ? c[r * ldc + i] : 0) +
// the products of weight panel wp (rows i) and activation panel xp (rows r)
// over nu units of format F (see the top of the file); MR x NR = Q's kMr x
// kNv * L. The stores are forced inline: the accumulators stay in registers,
// and the kernel compiles instruction for instruction as it did in one piece
// (left to GCC, their later inlining reshuffled the K kernels' registers, and
// the kernels after them moved to other alignments, which timed differently).
template <class Q, I8Format F>
void i8_micro(int64_t nu, const uint8_t* wp, const uint8_t* xp, float* c, int64_t ldc, bool accumulate) {
  using I = typename Q::I;
  using R = typename Q::F;
  constexpr int MR = Q::kMr, NV = Q::kNv, L = Q::L, NR = NV * L, G = F.groups();
  I8Acc<Q> acc;  // legacy: the products so far; K: the current super-block's
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = Q::fzero();
  for (int64_t u = 0; u < nu; ++u) {
    const float* ws = reinterpret_cast<const float*>(wp + F.code_bytes() * NR);
    const float* dx = reinterpret_cast<const float*>(xp + F.code_bytes() * MR);
    const int32_t* start = reinterpret_cast<const int32_t*>(dx + MR);
    const float* xmin = dx + MR + G * MR;
    for (int g = 0; g < G; ++g) {
      I isum[MR][NV];
      i8_group_sums<Q, F>(wp, xp, g, start + g * MR, isum);
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          const R p = Q::cvt(isum[r][v]);
          const R scale = Q::fload(ws + g * NR + v * L);
          if constexpr (F.legacy) {
            acc[r][v] = Q::fma(Q::fmul(p, scale), Q::fset1(dx[r]), acc[r][v]);
          } else {
            acc[r][v] = Q::fma(p, scale, acc[r][v]);
          }
          if constexpr (F.legacy && F.mins)
            acc[r][v] = Q::fma(Q::fload(ws + NR + v * L), Q::fset1(xmin[r]), acc[r][v]);
        }
    }
    if constexpr (!F.legacy && F.mins) {  // - dmin * sum_j m_j B_j
      const uint8_t* wpairs = reinterpret_cast<const uint8_t*>(ws + G * NR);
      const float* wdmin = reinterpret_cast<const float*>(wpairs + G / 2 * NR * 4);
      const uint8_t* xpairs = reinterpret_cast<const uint8_t*>(xmin);
      I msum[MR][NV];
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) msum[r][v] = Q::izero();
#pragma GCC unroll 8
      for (int p = 0; p < G / 2; ++p) {
        I m[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) m[v] = Q::iload(wpairs + (p * NR + v * L) * 4);
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
          const I b = Q::iset1(load_i32(xpairs + (p * MR + r) * 4));
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) msum[r][v] = Q::dpwssd(msum[r][v], m[v], b);
        }
      }
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[r][v] = Q::fma(Q::cvt(msum[r][v]), Q::fload(wdmin + v * L), acc[r][v]);
    }
    if constexpr (!F.legacy) i8_store_super_block<Q>(acc, dx, c, ldc, accumulate || u > 0);
    wp += i8_w_unit_bytes(F, NR);
    xp += i8_x_unit_bytes(F, MR);
  }
  if constexpr (F.legacy) i8_store_legacy<Q>(acc, c, ldc, accumulate);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options

// ---- registration ------------------------------------------------------------------

// One table row per type: its repacking, its family's activation packing and
// micro-kernel, and the panel sizes, for wrapper Q.
template <class Q0, DType T, GridRead R>
Int8Gemm int8_entry() {
  constexpr bool SC = Q0::kMaddubs;
  constexpr I8Format f = i8_format<T, SC>();
  using Q = typename TileOf<Q0, f.wide>::type;
  constexpr int MR = Q::kMr, NR = Q::kNv * Q::L;
  Int8Gemm e{};
  if constexpr (is_scaled_qtype<T>()) {
    e.pack_w = i8_pack_scaled<T, NR, SC>;
    e.pack_x = i8_pack_x_legacy<T, quant::BlockQ8_0, MR, SC>;
  } else if constexpr (f.legacy) {
    e.pack_w = i8_pack_legacy<T, NR, SC>;
    e.pack_x = i8_pack_x_legacy<T, typename QFormat<T>::XBlock, MR, SC>;
  } else {
    e.pack_w = i8_pack_k<T, NR, SC, grid_read<T, R>>;
    e.pack_x = i8_pack_x_k<T, MR, SC>;
  }
  // The bias is the packing's only: one kernel per family and code range.
  e.micro = i8_micro<Q, I8Format{f.legacy, f.unit, f.group, f.mins, 0, f.wide, Q::kMaddubs ? f.umax : 0}>;
  e.mr = MR;
  e.nr = NR;
  e.unit = f.unit;
  e.w_unit_bytes = i8_w_unit_bytes(f, NR);
  e.x_unit_bytes = i8_x_unit_bytes(f, MR);
  return e;
}

template <class Q, GridRead R>
void add_int8_kernels_of(GemmKernels& g, int min_n_legacy, int min_n_k) {
  auto add = [&]<DType T>() {
    g.i8[static_cast<int>(T)] = int8_entry<Q, T, R>();
    g.min_n_type[static_cast<int>(T)] = i8_format<T, false>().legacy ? min_n_legacy : min_n_k;
  };
  for_each_legacy_qtype(add);
  for_each_k_qtype(add);
  for_each_level_qtype(add);
  for_each_scaled_qtype(add);
}

// Fills g.i8 for every quantized type: with the dot instruction where the CPU
// has it and the options allow it (allow_vnni: KernelOptions::vnni), else
// (AVX2) with maddubs; AVX-512 without VNNI keeps the F32 panels.
template <GridRead R>
void add_int8_kernels(GemmKernels& g, bool allow_vnni) {
  // The crossover with the dot path (K = M = 2048, 2 threads, weights from
  // memory below N = 16; dev-2c 2026-12-02): legacy types between N = 4 and
  // 8 (Q4_0 at 8: int8 GEMM 1.5-1.7x faster), K types between 8 and 12 (Q4_K
  // at 8: dot 1.35x faster with AVX-512, equal with AVX2; at 12 int8 1.15 /
  // 1.4x faster), on both instruction sets.
  if (allow_vnni && I8Vnni::available()) {
    add_int8_kernels_of<I8Vnni, R>(g, 6, 10);
    return;
  }
#if !(defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__))
  add_int8_kernels_of<I8Madd, R>(g, 6, 10);
#endif
}

#endif

}  // namespace
}  // namespace qlens::cpu

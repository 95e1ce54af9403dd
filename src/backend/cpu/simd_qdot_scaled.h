// The types whose blocks are small integer levels times float scales and
// whose activations are Q8_0 (Q1_0, Q2_0, MXFP4, NVFP4; their integer view:
// src/quant/levels.h's ScaledLevels) with 256-bit integer vectors (AVX2; the
// AVX-512 files use the same code). Included only by the per-instruction-set
// files; internal linkage.
//
// A weight block (32, 64 or 128 elements) decodes chunk by chunk, a chunk
// being the 32 elements of one Q8_0 activation block, into its signed levels
// v (Q1_0: -1, +1; Q2_0: -1..2; the FP4 types: E2M1 values times 2, |v| <=
// 12) and a float vector of its scales for madd's 8 int32 lanes (lanes 0-3
// sum elements 0-15, lanes 4-7 elements 16-31: NVFP4's two scales of 16).
// Per chunk and activation row:
//   acc += (scales * d_x) * float(madd(maddubs(|v|, sign(q, v)), 1))
// the integer sums exact, the float sums in this file's order (ggml's math).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/simd.h"
#include "backend/cpu/simd_qdot.h"
#include "quant/fp4.h"
#include "quant/legacy.h"
#include "quant/lowbit.h"

namespace qlens::cpu {
namespace {

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

// The FP4 types' scale bytes as floats (half their value: the levels are
// doubled), all 256 of each code.
inline std::array<float, 256> scale_table(float (*half)(uint8_t)) {
  std::array<float, 256> t{};
  for (int i = 0; i < 256; ++i) t[i] = half(static_cast<uint8_t>(i));
  return t;
}
inline const std::array<float, 256> kE8m0Half = scale_table(quant::fp4::e8m0_half);
inline const std::array<float, 256> kUe4m3Half = scale_table(quant::fp4::ue4m3_half);

// The E2M1 levels (doubled) of 32 nibble codes.
inline __m256i e2m1_levels(__m256i codes) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::fp4::kE2M1Doubled));
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(t), codes);
}

// Whether T is one of this file's types.
template <DType T>
constexpr bool is_scaled_qtype() {
  return T == DType::Q1_0 || T == DType::Q2_0 || T == DType::MXFP4 || T == DType::NVFP4;
}

// Block decoders: kElems, kBytes, kGroup (elements per scale); chunk(j), the
// levels of elements 32 j .. 32 j + 31; scales(j), their madd lanes' scales;
// scale(g), the float scale of group g (for the int8 panels).
template <DType T>
struct SBlock;

// MXFP4: an E8M0 exponent, then 16 bytes of nibbles (element j low, j + 16 high).
template <>
struct SBlock<DType::MXFP4> {
  static constexpr int kElems = 32, kGroup = 32;
  static constexpr size_t kBytes = sizeof(quant::fp4::BlockMXFP4);
  const char* b;
  SBlock(const char* blk, const float*) : b(blk) {}
  __m256i chunk(int) const { return e2m1_levels(unpack_nibbles(b + 1)); }
  float scale(int) const { return kE8m0Half[static_cast<uint8_t>(b[0])]; }
  __m256 scales(int) const { return _mm256_set1_ps(scale(0)); }
};

// NVFP4: 4 UE4M3 scales, then per 16 elements 8 bytes (low nibbles first).
template <>
struct SBlock<DType::NVFP4> {
  static constexpr int kElems = 64, kGroup = 16;
  static constexpr size_t kBytes = sizeof(quant::fp4::BlockNVFP4);
  const char* b;
  SBlock(const char* blk, const float*) : b(blk) {}
  __m256i chunk(int j) const {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4 + 16 * j));
    const __m128i lo = _mm_and_si128(bytes, _mm_set1_epi8(0x0f));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0f));
    return e2m1_levels(_mm256_setr_m128i(_mm_unpacklo_epi64(lo, hi), _mm_unpackhi_epi64(lo, hi)));
  }
  float scale(int g) const { return kUe4m3Half[static_cast<uint8_t>(b[g])]; }
  __m256 scales(int j) const { return _mm256_setr_m128(_mm_set1_ps(scale(2 * j)), _mm_set1_ps(scale(2 * j + 1))); }
};

// Q1_0's and Q2_0's: an fp16 scale d for the whole block, then the codes.
struct WholeBlockScale {
  const char* b;
  float d;
  WholeBlockScale(const char* blk, const float* f16) : b(blk), d(f16[load_u16(blk)]) {}
  float scale(int) const { return d; }
  __m256 scales(int) const { return _mm256_set1_ps(d); }
};

// Q1_0: one bit per element (set: +1, clear: -1).
template <>
struct SBlock<DType::Q1_0> : WholeBlockScale {
  static constexpr int kElems = 128, kGroup = 128;
  static constexpr size_t kBytes = sizeof(quant::lowbit::BlockQ1_0);
  using WholeBlockScale::WholeBlockScale;
  __m256i chunk(int j) const {
    uint32_t bits;
    std::memcpy(&bits, b + 2 + 4 * j, sizeof bits);
    // Byte k of the 4 into bytes 8 k .. 8 k + 7, each tested against its bit.
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                                               _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                                                2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_sub_epi8(_mm256_and_si256(set, _mm256_set1_epi8(2)), _mm256_set1_epi8(1));
  }
};

// Q2_0: 2-bit codes (element e at bits 2 (e % 4) of byte e / 4), level =
// code - 1.
template <>
struct SBlock<DType::Q2_0> : WholeBlockScale {
  static constexpr int kElems = 64, kGroup = 64;
  static constexpr size_t kBytes = sizeof(quant::lowbit::BlockQ2_0);
  using WholeBlockScale::WholeBlockScale;
  __m256i chunk(int j) const {
    uint32_t w[2];
    std::memcpy(w, b + 2 + 8 * j, sizeof w);
    // Lane h (elements 16 h ..): dword s = its 4 bytes >> 2 s, byte 4 s + k
    // holding element 4 k + s; then bytes into element order.
    const __m256i x = _mm256_setr_epi32(static_cast<int>(w[0]), static_cast<int>(w[0]), static_cast<int>(w[0]),
                                        static_cast<int>(w[0]), static_cast<int>(w[1]), static_cast<int>(w[1]),
                                        static_cast<int>(w[1]), static_cast<int>(w[1]));
    const __m256i codes = _mm256_and_si256(_mm256_srlv_epi32(x, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)),
                                           _mm256_set1_epi8(3));
    const __m256i order = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,  //
                                           0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm256_sub_epi8(_mm256_shuffle_epi8(codes, order), _mm256_set1_epi8(1));
  }
};

// NC activation rows (Q8_0) against one weight row.
template <DType T, int NC>
void qdot_scaled_rows(int64_t k, const char* w, const char* x, size_t xs, float* out) {
  using S = SBlock<T>;
  using XB = quant::BlockQ8_0;
  constexpr int kChunks = S::kElems / 32;
  const int64_t nb = k / S::kElems;
  const float* f16 = fp16_table();
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[NC];
#pragma GCC unroll 4
  for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const S blk(w + ib * S::kBytes, f16);
#pragma GCC unroll 4
    for (int j = 0; j < kChunks; ++j) {
      const __m256i v = blk.chunk(j);
      const __m256i av = _mm256_sign_epi8(v, v);
      const __m256 sc = blk.scales(j);
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) {
        const char* xb = x + c * xs + (ib * kChunks + j) * sizeof(XB);
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + offsetof(XB, qs)));
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(av, _mm256_sign_epi8(q, v)), ones);
        const __m256 dx = _mm256_broadcast_ss(f16 + load_u16(xb + offsetof(XB, d)));
        acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(sc, dx), _mm256_cvtepi32_ps(p), acc[c]);
      }
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < NC; ++c) out[c] = Avx2::hsum(acc[c]);
}

template <DType T>
void qdot_scaled_simd(int64_t k, const void* w, const void* x, size_t x_stride, int nc, float* out) {
  const char* wr = static_cast<const char*>(w);
  const char* xr = static_cast<const char*>(x);
  with_row_count(nc, [&]<int NC>() { qdot_scaled_rows<T, NC>(k, wr, xr, x_stride, out); });
}

#endif

}  // namespace
}  // namespace qlens::cpu

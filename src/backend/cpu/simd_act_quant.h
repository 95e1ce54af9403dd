// Activation quantizers with 256-bit vectors (AVX2; the AVX-512 table uses the
// same code): F32 rows to Q8_0, Q8_1 (the partners of the legacy weight types)
// and Q8_K (the K types'), bit for bit as the from_float of src/quant (the
// activation form of Q8_0 / Q8_1, ggml's quantize_row_q8_K_ref), NaN and
// infinity included.
// The dot path quantizes every activation row before a product; the scalar
// quantizers took about 3 ns per element, 4% of a Q4_0 token.
//
// Included only by the per-instruction-set files (through simd_vec.h);
// everything has internal linkage and calls no inline function of the
// standard library (see simd_vec.h).
#pragma once

#include <cfloat>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/simd.h"
#include "backend/cpu/vec.h"
#include "qlens/types.h"
#include "quant/kquants.h"
#include "quant/legacy.h"

namespace qlens::cpu {
namespace {

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

// |v|, lane by lane.
inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// The largest |v_i| of n vectors, NaN lanes ignored as the reference's
// std::max(amax, fabs(x)) does (maxps returns its second operand when either
// is NaN, and the running maximum is that operand).
inline float abs_max(const float* x, int nvec) {
  __m256 m = _mm256_setzero_ps();
  for (int r = 0; r < nvec; ++r) m = _mm256_max_ps(abs_ps(_mm256_loadu_ps(x + 8 * r)), m);
  return Avx2::hmax(m);
}

// round_even_clamp(v, -127, 127) of src/quant/legacy.cpp: NaN lanes zeroed,
// clamped, converted with the default rounding (to nearest, ties to even).
inline __m256i round_even_127(__m256 v) {
  v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
  v = _mm256_max_ps(_mm256_min_ps(v, _mm256_set1_ps(127.0f)), _mm256_set1_ps(-127.0f));
  return _mm256_cvtps_epi32(v);
}

// The K quantizers' nearest_int(v) (round half to even through the 1.5 * 2^23
// shift; |v| clamped to 2^22 - 1 with NaN passed through, as std::clamp
// does: minps / maxps return their second operand, v, for NaN).
inline __m256i nearest_int(__m256 v) {
  const __m256 lim = _mm256_set1_ps(4194303.0f);
  v = _mm256_min_ps(lim, _mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), lim), v));
  const __m256i bits = _mm256_castps_si256(_mm256_add_ps(v, _mm256_set1_ps(12582912.0f)));
  return _mm256_sub_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x00400000));
}

// Four vectors of int32 in [-128, 127] as 32 int8 in element order (the
// packs interleave the lanes; the permutation puts them back).
inline __m256i pack_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// fp32_to_fp16 of a finite float within the fp16 range (both round to
// nearest even), with F16C instead of the portable bit manipulation.
inline uint16_t half_rne(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

// Q8_0 / Q8_1 (B), the activation form (Q8Format::activation): per block of
// 32, d = amax / 127 (saturated to the fp16 range), q = round_even(x * id)
// with id = 127 / amax (0 when amax is 0 or id overflows), Q8_1's
// s = fp16(sum(q) * d) with the unrounded d.
template <class B>
void quantize_row_q8(const float* x, void* dst, int64_t n) {
  constexpr bool kSum = requires(B blk) { blk.s; };
  char* out = static_cast<char*>(dst);
  for (int64_t i = 0; i < n / quant::kLegacyBlock; ++i) {
    const float* xb = x + i * quant::kLegacyBlock;
    char* b = out + i * sizeof(B);
    const float amax = abs_max(xb, 4);
    const float a = amax / 127.0f;
    const float d = a > 65504.0f ? 65504.0f : a;
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    if (id > FLT_MAX) id = 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int r = 0; r < 4; ++r) q[r] = round_even_127(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * r), vid));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(b + offsetof(B, qs)), pack_i8(q[0], q[1], q[2], q[3]));
    const uint16_t dh = half_rne(d);
    std::memcpy(b + offsetof(B, d), &dh, sizeof dh);
    if constexpr (kSum) {
      const int sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
      float s = static_cast<float>(sum) * d;
      s = s > 65504.0f ? 65504.0f : s < -65504.0f ? -65504.0f : s;
      const uint16_t sh = half_rne(s);
      std::memcpy(b + offsetof(B, s), &sh, sizeof sh);
    }
  }
}

// Q8_K: per block of 256, the first element of largest magnitude becomes
// -127 (iscale = -127 / max), q = min(127, nearest_int(iscale * x)), bsums
// the sums of 16 consecutive q, d = 1 / iscale; an all-zero (or all-NaN)
// block is stored as zeros.
void quantize_row_q8_k(const float* x, void* dst, int64_t n) {
  using quant::kq::BlockQ8K;
  constexpr int kQK = quant::kq::kQK;
  char* out = static_cast<char*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* xb = x + i * kQK;
    char* b = out + i * sizeof(BlockQ8K);
    const float amax = abs_max(xb, kQK / 8);
    if (amax == 0.0f) {
      std::memset(b, 0, sizeof(BlockQ8K));
      continue;
    }
    // The first index whose |x| equals amax (NaN compares unequal).
    const __m256 va = _mm256_set1_ps(amax);
    int first = 0;
    for (int r = 0; r < kQK / 8; ++r) {
      const int m = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(xb + 8 * r)), va, _CMP_EQ_OQ));
      if (m) {
        first = 8 * r + __builtin_ctz(static_cast<unsigned>(m));
        break;
      }
    }
    const float iscale = -127.0f / xb[first];
    const __m256 vs = _mm256_set1_ps(iscale);
    const __m256i q127 = _mm256_set1_epi32(127);
    __m128i sums[4];  // bsums, 4 per 64 elements
    for (int c = 0; c < kQK / 64; ++c) {
      __m256i q[8];
      for (int r = 0; r < 8; ++r) {
        q[r] = _mm256_min_epi32(nearest_int(_mm256_mul_ps(vs, _mm256_loadu_ps(xb + 64 * c + 8 * r))), q127);
        // The reference stores static_cast<int8_t>(q): the low byte, which
        // differs from q only when iscale overflowed (a block whose largest
        // magnitude is subnormal: q = -(2^22 - 1) becomes 1).
        q[r] = _mm256_srai_epi32(_mm256_slli_epi32(q[r], 24), 24);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(b + offsetof(BlockQ8K, qs) + 64 * c),
                          pack_i8(q[0], q[1], q[2], q[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(b + offsetof(BlockQ8K, qs) + 64 * c + 32),
                          pack_i8(q[4], q[5], q[6], q[7]));
      // Group g (16 elements) is q[2g] + q[2g + 1]; two rounds of hadd and a
      // lane add give the four group sums in order.
      const __m256i h01 = _mm256_hadd_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
      const __m256i h23 = _mm256_hadd_epi32(_mm256_add_epi32(q[4], q[5]), _mm256_add_epi32(q[6], q[7]));
      const __m256i h = _mm256_hadd_epi32(h01, h23);
      sums[c] = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + offsetof(BlockQ8K, bsums)), _mm_packs_epi32(sums[0], sums[1]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + offsetof(BlockQ8K, bsums) + 16), _mm_packs_epi32(sums[2], sums[3]));
    const float d = 1 / iscale;
    std::memcpy(b + offsetof(BlockQ8K, d), &d, sizeof d);
  }
}

// Registers the activation quantizers in a VecOps table.
inline void add_act_quantizers(VecOps& v) {
  v.from_float[static_cast<int>(DType::Q8_0)] = quantize_row_q8<quant::BlockQ8_0>;
  v.from_float[static_cast<int>(DType::Q8_1)] = quantize_row_q8<quant::BlockQ8_1>;
  v.from_float[static_cast<int>(DType::Q8_K)] = quantize_row_q8_k;
}

#endif

}  // namespace
}  // namespace qlens::cpu

// Matrix-vector kernels on packed weights (packed.h) with 256-bit integer
// vectors (AVX2; the AVX-512 files use the same code: on the machines
// measured, 512-bit integer ops gave these row kernels nothing). Included
// only by the per-instruction-set files (through simd_matmul.h); internal
// linkage.
//
// Q4_0, per block of 32 and group of 8 rows: the activation's four 8-byte
// pieces are broadcast to the four 64-bit lanes (one per row), each of the
// four code vectors gives two nibble vectors, multiplied with the pieces by
// vpdpbusd where the CPU has VNNI, else by maddubs into int16 (4 per
// half-group stay below 4 * 2 * 15 * 127 = 15240) widened by madd; the bias
// (8 * sum q, the same for every row) is taken out before the two halves are
// added pairwise (hadd): one int32 per row, lanes in kPackLane order, exact.
// Then one conversion, one product of the eight scales with d_x and one FMA
// for the eight rows: acc = fma(float(sum), d_w * d_x, acc), the plain
// kernel's operations.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/isa.h"
#include "backend/cpu/packed.h"
#include "backend/cpu/qdot.h"
#include "backend/cpu/simd_qdot.h"
#include "quant/kquants.h"
#include "quant/registry.h"
#include "backend/cpu/simd.h"
#include "backend/cpu/vec.h"

namespace qlens::cpu {
namespace {

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

// A chunk of groups is one contiguous stream, which the hardware prefetcher
// follows; on Zen 3 (AVX2) the kernels still read memory 8-21% faster, and
// generate 12-25% faster on the 1.1B models, with each group block's lines
// prefetched 1 KiB ahead into L1 (when the weights are in L3 already, Q6_K
// and IQ4_XS lose 4-9% to the extra instructions). On Zen 4 (AVX-512),
// 8-40 group blocks ahead measured equal or up to 8% slower: see
// packed_prefetch_bytes.

// Q8_0: the codes are stored as v + 128. With VNNI, vpdpbusd adds 4 products
// (v + 128) q per int32 lane: per half-group, one per 8-byte piece, and the
// 128 q excess (the same for every row) by vpdpbusd of 0x80 with the same
// pieces, subtracted before the halves are added pairwise. Without it, the
// codes go back to v and the sign trick, maddubs(|v|, sign(q, v)) (at most
// 2 * 128 * 127: no saturation), widened by madd. Both sums are exact.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#define QLENS_PACKED_VNNI_TARGET "avx512vnni"
inline bool packed_vnni_available() { return cpu_has_avx512_vnni(); }
__attribute__((target(QLENS_PACKED_VNNI_TARGET))) inline __m256i dot4(__m256i acc, __m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(acc, u, s);
}
#else
#define QLENS_PACKED_VNNI_TARGET "avxvnni"
inline bool packed_vnni_available() { return cpu_has_avx_vnni(); }
__attribute__((target(QLENS_PACKED_VNNI_TARGET))) inline __m256i dot4(__m256i acc, __m256i u, __m256i s) {
  return _mm256_dpbusd_avx_epi32(acc, u, s);
}
#endif

// Eight activation bytes at p (any alignment) in every 64-bit lane: one
// broadcast load (vpbroadcastq ymm, m64), where an int64 through memcpy made
// GCC bounce pieces through the stack or shuffle them from a register.
__attribute__((always_inline)) inline __m256i broadcast_piece(const char* p) {
  return _mm256_broadcastq_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// The prefetch of one group block's lines `ahead` bytes ahead (0: none).
// The distance is the backend's (KernelOptions::prefetch_bytes), passed to
// each kernel call: one register for the call, as the static it replaced
// was loaded once per call.
__attribute__((always_inline)) inline void prefetch_ahead(const char* gb, size_t bytes, size_t ahead) {
  if (ahead == 0) return;
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(gb + ahead + o, _MM_HINT_T0);
}

// The eight rows' int32 sums of one Q8_0 group block (lanes in kPackLane
// order): with vpdpbusd, or with maddubs.
__attribute__((target(QLENS_PACKED_VNNI_TARGET))) inline __m256i q8_0_sums_vnni(const char* qs, const __m256i* q) {
  __m256i bias = _mm256_setzero_si256(), half[2] = {bias, bias};
  const __m256i excess = _mm256_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    bias = dot4(bias, excess, q[c]);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
      half[h] = dot4(half[h], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + (2 * c + h) * 32)), q[c]);
  }
  return _mm256_hadd_epi32(_mm256_sub_epi32(half[0], bias), _mm256_sub_epi32(half[1], bias));
}
inline __m256i q8_0_sums_madd(const char* qs, const __m256i* q) {
  const __m256i excess = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i half[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c)
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + (2 * c + h) * 32)), excess);
      const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(v), _mm256_sign_epi8(q[c], v));
      half[h] = _mm256_add_epi32(half[h], _mm256_madd_epi16(p, ones));
    }
  return _mm256_hadd_epi32(half[0], half[1]);
}

// Bit `bit` of each byte of v moved to bit 4, the others cleared (16-bit
// shifts: bit 4 of either byte comes from its own byte for bit 0 .. 7).
__attribute__((always_inline)) inline __m256i plane_bit_at_4(__m256i v, int bit) {
  const __m256i moved = bit < 4 ? _mm256_slli_epi16(v, 4 - bit) : _mm256_srli_epi16(v, bit - 4);
  return _mm256_and_si256(moved, _mm256_set1_epi8(0x10));
}

// The nibble types' eight rows' int32 sums of one group block (lanes in
// kPackLane order), from the codes c (Q4_0's nibbles, 0 .. 15; kFive:
// Q5_0's, the fifth bits added, 0 .. 31) and the activation pieces:
// sum (c - z) q as sum c q - z sum q (z = 8 or 16). Piece c of the codes:
// low nibbles against q[c] (elements 8c ..), high nibbles against q[2 + c]
// (16 + 8c ..). With VNNI by vpdpbusd into int32; without, by maddubs into
// int16, four per half-group (at most 4 * 2 * 31 * 127 = 31496), and z sum q
// the same way; Q4_0 takes the bias out in int16 (15240 + 8128 at most) and
// widens once, Q5_0 widens both first (their difference can pass 32767).
template <bool kFive, bool kVnni>
__attribute__((always_inline)) inline __m256i nibble_sums(const char* qs, const __m256i* q) {
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i plane =
      kFive ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + (kQ5_0HighAt - kPackScales))) : low4;
  const __m256i zero = _mm256_setzero_si256();
  const __m256i z = _mm256_set1_epi8(kFive ? 16 : 8);
  __m256i bias;
  if constexpr (kVnni) {
    bias = dot4(dot4(dot4(dot4(zero, z, q[0]), z, q[1]), z, q[2]), z, q[3]);
  } else {
    bias = _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(z, q[0]), _mm256_maddubs_epi16(z, q[2])),
                            _mm256_add_epi16(_mm256_maddubs_epi16(z, q[1]), _mm256_maddubs_epi16(z, q[3])));
    if constexpr (kFive) bias = _mm256_madd_epi16(bias, ones);
  }
  __m256i half[2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    __m256i s = zero;
#pragma GCC unroll 2
    for (int c = 0; c < 2; ++c) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + (2 * c + h) * 32));
      __m256i u[2] = {_mm256_and_si256(v, low4), _mm256_and_si256(_mm256_srli_epi16(v, 4), low4)};
      if constexpr (kFive)
#pragma GCC unroll 2
        for (int n = 0; n < 2; ++n) u[n] = _mm256_or_si256(u[n], plane_bit_at_4(plane, q5_0_plane_bit(c, h, n)));
#pragma GCC unroll 2
      for (int n = 0; n < 2; ++n)
        s = kVnni ? dot4(s, u[n], q[2 * n + c]) : add16_in_order(s, _mm256_maddubs_epi16(u[n], q[2 * n + c]));
    }
    if constexpr (kVnni)
      half[h] = _mm256_sub_epi32(s, bias);
    else if constexpr (kFive)
      half[h] = _mm256_sub_epi32(_mm256_madd_epi16(s, ones), bias);
    else
      half[h] = _mm256_madd_epi16(_mm256_sub_epi16(s, bias), ones);
  }
  return _mm256_hadd_epi32(half[0], half[1]);
}
__attribute__((target(QLENS_PACKED_VNNI_TARGET))) inline __m256i q4_0_sums_vnni(const char* qs, const __m256i* q) {
  return nibble_sums<false, true>(qs, q);
}
__attribute__((target(QLENS_PACKED_VNNI_TARGET))) inline __m256i q5_0_sums_vnni(const char* qs, const __m256i* q) {
  return nibble_sums<true, true>(qs, q);
}
inline __m256i q4_0_sums_madd(const char* qs, const __m256i* q) { return nibble_sums<false, false>(qs, q); }
inline __m256i q5_0_sums_madd(const char* qs, const __m256i* q) { return nibble_sums<true, false>(qs, q); }

// MXFP4: Q4_0's nibble pieces, each code looked up as its E2M1 level
// (doubled) + 12, 0 .. 24 (unsigned: vpdpbusd's and maddubs' operand), so
// sum v q = sum u q - 12 sum q. Without VNNI the maddubs pairs (2 * 24 * 127
// at most) sum four per half-group in int16 (24384), widened before the bias
// comes out (the difference could pass 32767).
template <bool kVnni>
__attribute__((always_inline)) inline __m256i mxfp4_sums_body(const char* qs, const __m256i* q) {
  alignas(16) static constexpr int8_t kBiased[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
  const __m256i table = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kBiased)));
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i zero = _mm256_setzero_si256();
  const __m256i z = _mm256_set1_epi8(12);
  __m256i bias;
  if constexpr (kVnni) {
    bias = dot4(dot4(dot4(dot4(zero, z, q[0]), z, q[1]), z, q[2]), z, q[3]);
  } else {
    bias = _mm256_madd_epi16(
        _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(z, q[0]), _mm256_maddubs_epi16(z, q[2])),
                         _mm256_add_epi16(_mm256_maddubs_epi16(z, q[1]), _mm256_maddubs_epi16(z, q[3]))),
        ones);
  }
  __m256i half[2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    __m256i s = zero;
#pragma GCC unroll 2
    for (int c = 0; c < 2; ++c) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + (2 * c + h) * 32));
      const __m256i u[2] = {_mm256_shuffle_epi8(table, _mm256_and_si256(v, low4)),
                            _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4))};
#pragma GCC unroll 2
      for (int n = 0; n < 2; ++n)
        s = kVnni ? dot4(s, u[n], q[2 * n + c]) : add16_in_order(s, _mm256_maddubs_epi16(u[n], q[2 * n + c]));
    }
    half[h] = kVnni ? _mm256_sub_epi32(s, bias) : _mm256_sub_epi32(_mm256_madd_epi16(s, ones), bias);
  }
  return _mm256_hadd_epi32(half[0], half[1]);
}

// The eight rows' outputs from the lanes of their accumulator.
inline void store_rows(__m256 acc, float* out) {
  alignas(32) float lanes[kPackRows];
  _mm256_store_ps(lanes, acc);
  for (int lane = 0; lane < kPackRows; ++lane) out[kPackLane[lane]] = lanes[lane];
}

// The K types' float chain: acc + float(isum) * (d_w * d_x), d_w the rows'
// fp16 scales at dw (lane order), d_x the Q8_K block xb's scale.
inline __m256 k_accumulate(__m256 acc, __m256i isum, const char* dw, const char* xb) {
  float dx;
  std::memcpy(&dx, xb + offsetof(quant::kq::BlockQ8K, d), sizeof dx);
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dw)));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d, _mm256_set1_ps(dx)), acc);
}

__attribute__((target(QLENS_PACKED_VNNI_TARGET))) inline __m256i mxfp4_sums_vnni(const char* qs, const __m256i* q) {
  return mxfp4_sums_body<true>(qs, q);
}
inline __m256i mxfp4_sums_madd(const char* qs, const __m256i* q) { return mxfp4_sums_body<false>(qs, q); }

// The eight rows' block scales d_w of a group block (lane order): fp16, or
// (kScaleBytes 1) MXFP4's exponent bytes as 2^(e - 128), exactly: the
// float's exponent field e - 1, or the subnormals 2^-128 and 2^-127 for e < 2.
template <size_t kScaleBytes>
__attribute__((always_inline)) inline __m256 packed_scales(const char* gb) {
  if constexpr (kScaleBytes == 1) {
    const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(gb)));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)));
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb)));
  }
}

// d_w * d_x for the eight rows. AVX-512 takes MXFP4's exponents by
// vscalefps: d_x * 2^(e - 128) in one rounding, as the product with the
// exact 2^(e - 128) rounds (subnormal results included).
template <size_t kScaleBytes>
__attribute__((always_inline)) inline __m256 scaled_by_packed_scales(const char* gb, __m256 dx) {
#if defined(__AVX512F__) && defined(__AVX512VL__)
  if constexpr (kScaleBytes == 1) {
    const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(gb)));
    return _mm256_scalef_ps(dx, _mm256_cvtepi32_ps(_mm256_sub_epi32(e, _mm256_set1_epi32(128))));
  }
#endif
  return _mm256_mul_ps(packed_scales<kScaleBytes>(gb), dx);
}

// A legacy type's group kernel: per block, the activation's four 8-byte
// pieces broadcast, the eight rows' int32 sums from kSums, then one
// conversion, one scale product and one FMA for the eight rows. Inlined into
// a VNNI wrapper (target attribute) or used as it is (no VNNI instruction).
using GroupSumsFn = __m256i (*)(const char* qs, const __m256i* q);
template <size_t kCodeBytes, GroupSumsFn kSums, size_t kScaleBytes = 2>
__attribute__((always_inline)) inline void packed_dot_legacy(int64_t k, const char* group, const void* x, float* out,
                                                             size_t ahead) {
  constexpr size_t kGroupBlock = legacy_group_block(kCodeBytes, kScaleBytes);
  const int64_t nb = k / quant::kLegacyBlock;
  const float* f16 = fp16_table();
  const char* xr = static_cast<const char*>(x);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const char* gb = group + b * kGroupBlock;
    prefetch_ahead(gb, kGroupBlock, ahead);
    const char* xb = xr + b * sizeof(quant::BlockQ8_0);
    const char* xq = xb + offsetof(quant::BlockQ8_0, qs);
    const __m256i q[4] = {broadcast_piece(xq), broadcast_piece(xq + 8), broadcast_piece(xq + 16),
                          broadcast_piece(xq + 24)};
    const __m256i isum = kSums(gb + kPackRows * kScaleBytes, q);
    const __m256 dx = _mm256_broadcast_ss(f16 + load_u16(xb + offsetof(quant::BlockQ8_0, d)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scaled_by_packed_scales<kScaleBytes>(gb, dx), acc);
  }
  store_rows(acc, out);
}
template <size_t kCodeBytes, GroupSumsFn kSums, size_t kScaleBytes = 2>
__attribute__((target(QLENS_PACKED_VNNI_TARGET))) void packed_dot_legacy_vnni(int64_t k, const char* group,
                                                                               const void* x, float* out,
                                                                               size_t ahead) {
  packed_dot_legacy<kCodeBytes, kSums, kScaleBytes>(k, group, x, out, ahead);
}
template <size_t kCodeBytes, GroupSumsFn kSums, size_t kScaleBytes = 2>
void packed_dot_legacy_madd(int64_t k, const char* group, const void* x, float* out, size_t ahead) {
  packed_dot_legacy<kCodeBytes, kSums, kScaleBytes>(k, group, x, out, ahead);
}

// The 4-bit K types, Q4_K and IQ4_XS, per super-block and group of 8 rows
// (the layouts: packed.cpp; both keep their codes in Q4_K's order): for each
// 64-element chunk j, the 8-byte activation pieces broadcast against the low
// and the high nibbles (sub-blocks 2j and 2j + 1), summed per sub-block and
// half-group by the variant's add, then weighed by the rows' sub-block
// scales (weigh) into int32, exactly. The variants:
//   Q4_K without VNNI: the codes' maddubs summed in int16 (4 * 2 * 15 * 127
//     at most), madd with the scales (each row's in its 64-bit lane's four
//     int16);
//   with VNNI (Q4_K's codes, IQ4_XS's levels + 128 by a table lookup):
//     vpdpbusd into int32, one vpmulld with the scales (each row's as the two
//     int32 of its 64-bit lane, the byte shuffled to the top and shifted
//     down with its sign: IQ4_XS's are signed, Q4_K's below 64);
//   IQ4_XS without VNNI: maddubs(|v|, sign(q, v)) (at most 2 * 127 * 128)
//     widened per piece by madd, the scales as with VNNI.
// IQ4_XS's + 128 is taken out per super-block (packed_dot_iq4_xs_body):
// sum v q = sum (v + 128) q - 128 B_s over sub-block s. |sum (v + 128) q| <=
// 32 * 241 * 128, times |sc| <= 32, over 8 sub-blocks: < 2^31.
template <class P>
__attribute__((always_inline)) inline __m256i k4_sums(const char* codes, const char* scales, const char* xq) {
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256i isum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    __m256i lo[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, hi[2] = {lo[0], lo[0]};
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i q_lo = broadcast_piece(xq + 64 * j + 8 * c), q_hi = broadcast_piece(xq + 64 * j + 32 + 8 * c);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + ((4 * j + c) * 2 + h) * 32));
        lo[h] = P::add(lo[h], _mm256_and_si256(v, low4), q_lo);
        hi[h] = P::add(hi[h], _mm256_and_si256(_mm256_srli_epi16(v, 4), low4), q_hi);
      }
    }
    const __m256i sc = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16 * j)));
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
      isum[h] = _mm256_add_epi32(isum[h], _mm256_add_epi32(P::weigh(lo[h], sc, h, 0), P::weigh(hi[h], sc, h, 1)));
  }
  return _mm256_hadd_epi32(isum[0], isum[1]);
}

// The shuffle of the scales of half-group h, sub-block parity odd (its bytes
// follow the even one's): row 4h + i's byte into int16 lane elements 4i ..
// 4i + 3 (low bytes), or to the top byte of int32 elements 2i, 2i + 1.
inline __m256i k4_scale_mask16(int h, int odd) {
  const char r0 = static_cast<char>(4 * h + 8 * odd), z = static_cast<char>(0x80);
  return _mm256_setr_epi8(r0, z, r0, z, r0, z, r0, z, r0 + 1, z, r0 + 1, z, r0 + 1, z, r0 + 1, z,  //
                          r0 + 2, z, r0 + 2, z, r0 + 2, z, r0 + 2, z, r0 + 3, z, r0 + 3, z, r0 + 3, z, r0 + 3, z);
}
inline __m256i k4_scale_mask32(int h, int odd) {
  const char r0 = static_cast<char>(4 * h + 8 * odd), z = static_cast<char>(0x80);
  return _mm256_setr_epi8(z, z, z, r0, z, z, z, r0, z, z, z, r0 + 1, z, z, z, r0 + 1,  //
                          z, z, z, r0 + 2, z, z, z, r0 + 2, z, z, z, r0 + 3, z, z, z, r0 + 3);
}
// int32 sums times the signed scale bytes, as vpmulld.
inline __m256i k4_weigh32(__m256i sums, __m256i sc, int h, int odd) {
  return _mm256_mullo_epi32(sums, _mm256_srai_epi32(_mm256_shuffle_epi8(sc, k4_scale_mask32(h, odd)), 24));
}
inline __m256i iq4_levels() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIq4nlValues)));
}

struct Q4KMadd {
  __attribute__((always_inline)) static __m256i add(__m256i acc, __m256i codes, __m256i q) {
    return add16_in_order(acc, _mm256_maddubs_epi16(codes, q));
  }
  __attribute__((always_inline)) static __m256i weigh(__m256i sums, __m256i sc, int h, int odd) {
    return _mm256_madd_epi16(sums, _mm256_shuffle_epi8(sc, k4_scale_mask16(h, odd)));
  }
};
struct Q4KVnni {
  __attribute__((always_inline)) static __m256i add(__m256i acc, __m256i codes, __m256i q) { return dot4(acc, codes, q); }
  __attribute__((always_inline)) static __m256i weigh(__m256i sums, __m256i sc, int h, int odd) { return k4_weigh32(sums, sc, h, odd); }
};
struct Iq4XsVnni {
  __attribute__((always_inline)) static __m256i add(__m256i acc, __m256i codes, __m256i q) {
    const __m256i biased = _mm256_xor_si256(iq4_levels(), _mm256_set1_epi8(static_cast<char>(0x80)));
    return dot4(acc, _mm256_shuffle_epi8(biased, codes), q);
  }
  __attribute__((always_inline)) static __m256i weigh(__m256i sums, __m256i sc, int h, int odd) { return k4_weigh32(sums, sc, h, odd); }
};
struct Iq4XsMadd {
  __attribute__((always_inline)) static __m256i add(__m256i acc, __m256i codes, __m256i q) {
    const __m256i v = _mm256_shuffle_epi8(iq4_levels(), codes);
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(q, v));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
  }
  __attribute__((always_inline)) static __m256i weigh(__m256i sums, __m256i sc, int h, int odd) { return k4_weigh32(sums, sc, h, odd); }
};

// The activation's sub-block sums (B_0 .. B_7) against int8 pairs per lane
// at `pairs` ([4][8 lanes][2]: Q4_K's mins, IQ4_XS's scales), by madd:
// sum_s p_s B_s per lane (lane order), exact in int32.
template <bool kSigned>
__attribute__((always_inline)) inline __m256i k4_pair_sums(const char* pairs, const char* xb) {
  using quant::kq::BlockQ8K;
  // B_s as int16 pairs in int32 elements 0, 1 (low lane) and 4, 5 (high lane).
  const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + offsetof(BlockQ8K, bsums)));
  const __m256i b = _mm256_hadd_epi16(bs, bs);
  __m256i sum = _mm256_setzero_si256();
  constexpr int kPairAt[4] = {0, 1, 4, 5};
#pragma GCC unroll 4
  for (int t = 0; t < 4; ++t) {
    const __m128i p8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pairs + 16 * t));
    const __m256i p = kSigned ? _mm256_cvtepi8_epi16(p8) : _mm256_cvtepu8_epi16(p8);
    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, _mm256_permutevar8x32_epi32(b, _mm256_set1_epi32(kPairAt[t]))));
  }
  return sum;
}

// Q4_K: the codes' sums and the mins' sums, then the plain kernel's two float
// chains.
template <class P>
__attribute__((always_inline)) inline void packed_dot_q4_k_body(int64_t k, const char* group, const void* x,
                                                                float* out, size_t ahead) {
  using quant::kq::BlockQ8K;
  const int64_t nb = k / quant::kq::kQK;
  const char* xr = static_cast<const char*>(x);
  __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const char* gb = group + b * kQ4KGroupBlock;
    prefetch_ahead(gb, kQ4KGroupBlock, ahead);
    const char* xb = xr + b * sizeof(BlockQ8K);
    const __m256i isum = k4_sums<P>(gb + kQ4KCodesAt, gb + kQ4KScalesAt, xb + offsetof(BlockQ8K, qs));
    acc = k_accumulate(acc, isum, gb, xb);
    accm = k_accumulate(accm, k4_pair_sums<false>(gb + kQ4KMinsAt, xb), gb + kPackScales, xb);
  }
  store_rows(_mm256_sub_ps(acc, accm), out);
}

// IQ4_XS: the levels' sums (less 128 sum_s sc_s B_s with VNNI), then one
// float chain.
template <class P, bool kBiased>
__attribute__((always_inline)) inline void packed_dot_iq4_xs_body(int64_t k, const char* group, const void* x,
                                                                  float* out, size_t ahead) {
  using quant::kq::BlockQ8K;
  const int64_t nb = k / quant::kq::kQK;
  const char* xr = static_cast<const char*>(x);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const char* gb = group + b * kIQ4XSGroupBlock;
    prefetch_ahead(gb, kIQ4XSGroupBlock, ahead);
    const char* xb = xr + b * sizeof(BlockQ8K);
    __m256i isum = k4_sums<P>(gb + kIQ4XSCodesAt, gb + kIQ4XSScalesAt, xb + offsetof(BlockQ8K, qs));
    if constexpr (kBiased) isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(k4_pair_sums<true>(gb + kIQ4XSPairsAt, xb), 7));
    acc = k_accumulate(acc, isum, gb, xb);
  }
  store_rows(acc, out);
}

void packed_dot_q4_k_madd(int64_t k, const char* group, const void* x, float* out, size_t ahead) {
  packed_dot_q4_k_body<Q4KMadd>(k, group, x, out, ahead);
}
__attribute__((target(QLENS_PACKED_VNNI_TARGET))) void packed_dot_q4_k_vnni(int64_t k, const char* group,
                                                                             const void* x, float* out, size_t ahead) {
  packed_dot_q4_k_body<Q4KVnni>(k, group, x, out, ahead);
}
void packed_dot_iq4_xs_madd(int64_t k, const char* group, const void* x, float* out, size_t ahead) {
  packed_dot_iq4_xs_body<Iq4XsMadd, false>(k, group, x, out, ahead);
}
__attribute__((target(QLENS_PACKED_VNNI_TARGET))) void packed_dot_iq4_xs_vnni(int64_t k, const char* group,
                                                                               const void* x, float* out,
                                                                               size_t ahead) {
  packed_dot_iq4_xs_body<Iq4XsVnni, true>(k, group, x, out, ahead);
}
#undef QLENS_PACKED_VNNI_TARGET

// The shuffle masks of the Q6_K scales: int16 element i of half-group h's
// vector belongs to row 4h + i / 4, whose scale for sub-block 2p + odd is
// byte 2 lane(row) + odd of pair p's 16; it goes to the element's high byte.
struct Q6KScaleMasks {
  alignas(32) char m[2][2][32];
};
constexpr Q6KScaleMasks q6k_scale_masks() {
  Q6KScaleMasks t{};
  for (int h = 0; h < 2; ++h)
    for (int odd = 0; odd < 2; ++odd)
      for (int i = 0; i < 16; ++i) {
        int lane = 0;
        while (kPackLane[lane] != 4 * h + i / 4) ++lane;
        t.m[h][odd][2 * i] = static_cast<char>(0x80);
        t.m[h][odd][2 * i + 1] = static_cast<char>(2 * lane + odd);
      }
  return t;
}
inline constexpr Q6KScaleMasks kQ6KScaleMasks = q6k_scale_masks();

// Q6_K, per super-block and group of 8 rows (the layout: packed.cpp), chunks
// 2t and 2t + 1 together (they share the high-bit vectors): for each pair of
// pieces cp, the codes q (0 .. 63) from the low-bit vectors and the high-bit
// vector (its bits moved to 4-5), maddubs with the broadcast activation
// pieces, summed in int16 per 16-element sub-block and half-group (2 pieces:
// 2 * 2 * 63 * 127 = 32004 at most), then madd with the rows' int8 scales
// made int16 (the shuffle puts the byte in each int16's high half, the
// arithmetic shift brings it down with its sign). The levels are q - 32:
// 32 sum_s sc_s B_s (madd of the scale pairs with the activation's sub-block
// sum pairs) is taken out at the end. Exact integer sums; then the plain
// kernel's float chain.
__attribute__((always_inline)) inline void q6_k_chunk_pair(const char* gb, const char* xq, int t, __m256i* isum) {
  const __m256i low4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
  auto load = [](const char* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); };
  auto piece = [&](int at) { return broadcast_piece(xq + at); };
  // Code vector from the low nibbles' or high nibbles' 4 bits and 2 high bits.
  auto codes = [&](__m256i low_bits, __m256i high_bits) {
    return _mm256_or_si256(_mm256_and_si256(low_bits, low4), _mm256_and_si256(high_bits, bits45));
  };
#pragma GCC unroll 2
  for (int cp = 0; cp < 2; ++cp) {
    // Sub-block sums: [chunk 2t + u][low / high part][half-group].
    __m256i sub[2][2][2];
#pragma GCC unroll 8
    for (int n = 0; n < 8; ++n) (&sub[0][0][0])[n] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int c = 2 * cp; c < 2 * cp + 2; ++c) {
      __m256i x[2][2];
#pragma GCC unroll 2
      for (int u = 0; u < 2; ++u) {
        x[u][0] = piece(64 * (2 * t + u) + 8 * c);
        x[u][1] = piece(64 * (2 * t + u) + 32 + 8 * c);
      }
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i hb = load(gb + q6k_high_at(2 * t, c, h));
        const __m256i v0 = load(gb + q6k_low_at(2 * t, c, h)), v1 = load(gb + q6k_low_at(2 * t + 1, c, h));
        const __m256i q[2][2] = {
            {codes(v0, _mm256_slli_epi16(hb, 4)), codes(_mm256_srli_epi16(v0, 4), _mm256_slli_epi16(hb, 2))},
            {codes(v1, hb), codes(_mm256_srli_epi16(v1, 4), _mm256_srli_epi16(hb, 2))}};
#pragma GCC unroll 2
        for (int u = 0; u < 2; ++u)
#pragma GCC unroll 2
          for (int part = 0; part < 2; ++part)
            sub[u][part][h] = add16_in_order(sub[u][part][h], _mm256_maddubs_epi16(q[u][part], x[u][part]));
      }
    }
    // Chunk j's low part is sub-blocks 4j + cp (scale pair 2j), its high part
    // 4j + 2 + cp (pair 2j + 1).
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i mask = _mm256_load_si256(reinterpret_cast<const __m256i*>(kQ6KScaleMasks.m[h][cp]));
#pragma GCC unroll 2
      for (int u = 0; u < 2; ++u)
#pragma GCC unroll 2
        for (int part = 0; part < 2; ++part) {
          const int p = 2 * (2 * t + u) + part;
          const __m256i pair = _mm256_broadcastsi128_si256(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(gb + kQ6KScalesAt + 16 * p)));
          const __m256i sc = _mm256_srai_epi16(_mm256_shuffle_epi8(pair, mask), 8);
          isum[h] = _mm256_add_epi32(isum[h], _mm256_madd_epi16(sub[u][part][h], sc));
        }
    }
  }
}

void packed_dot_q6_k_simd(int64_t k, const char* group, const void* x, float* out, size_t ahead) {
  using quant::kq::BlockQ8K;
  const int64_t nb = k / quant::kq::kQK;
  const char* xr = static_cast<const char*>(x);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const char* gb = group + b * kQ6KGroupBlock;
    prefetch_ahead(gb, kQ6KGroupBlock, ahead);
    const char* xb = xr + b * sizeof(BlockQ8K);
    const char* xq = xb + offsetof(BlockQ8K, qs);
    __m256i isum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    q6_k_chunk_pair(gb, xq, 0, isum);
    q6_k_chunk_pair(gb, xq, 1, isum);
    // sum_s sc_s B_s per lane: pair p's scales (sc_2p, sc_2p+1 per lane) with
    // (B_2p, B_2p+1), int32 element p of the activation's bsums.
    const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + offsetof(BlockQ8K, bsums)));
    __m256i bias = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) {
      const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb + kQ6KScalesAt + 16 * p)));
      bias = _mm256_add_epi32(bias, _mm256_madd_epi16(sc, _mm256_permutevar8x32_epi32(bs, _mm256_set1_epi32(p))));
    }
    const __m256i total = _mm256_sub_epi32(_mm256_hadd_epi32(isum[0], isum[1]), _mm256_slli_epi32(bias, 5));
    acc = k_accumulate(acc, total, gb, xb);
  }
  store_rows(acc, out);
}

// allow_vnni: the options allow the VNNI kernels (KernelOptions::vnni); they
// are chosen where the CPU has VNNI too.
void add_packed_kernels(GemmKernels& g, bool allow_vnni) {
  const bool vnni = allow_vnni && packed_vnni_available();
  g.packed_dot[static_cast<int>(DType::Q4_0)] =
      vnni ? packed_dot_legacy_vnni<16, q4_0_sums_vnni> : packed_dot_legacy_madd<16, q4_0_sums_madd>;
  g.packed_dot[static_cast<int>(DType::Q5_0)] =
      vnni ? packed_dot_legacy_vnni<20, q5_0_sums_vnni> : packed_dot_legacy_madd<20, q5_0_sums_madd>;
  g.packed_dot[static_cast<int>(DType::Q8_0)] =
      vnni ? packed_dot_legacy_vnni<32, q8_0_sums_vnni> : packed_dot_legacy_madd<32, q8_0_sums_madd>;
  g.packed_dot[static_cast<int>(DType::MXFP4)] =
      vnni ? packed_dot_legacy_vnni<16, mxfp4_sums_vnni, 1> : packed_dot_legacy_madd<16, mxfp4_sums_madd, 1>;
  g.packed_dot[static_cast<int>(DType::Q4_K)] = vnni ? packed_dot_q4_k_vnni : packed_dot_q4_k_madd;
  g.packed_dot[static_cast<int>(DType::Q6_K)] = packed_dot_q6_k_simd;
  g.packed_dot[static_cast<int>(DType::IQ4_XS)] = vnni ? packed_dot_iq4_xs_vnni : packed_dot_iq4_xs_madd;
}

#endif

}  // namespace
}  // namespace qlens::cpu

// K-quant dot kernels (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS with Q8_K
// activations) with 256-bit integer vectors (AVX2; the AVX-512 files use the
// same code). The math: qdot_k.h. Included only by the per-instruction-set
// files (through simd_matmul.h); everything has internal linkage.
//
// A weight super-block is decoded chunk by chunk (32 elements in element
// order) into int8 codes and a vector of 16 int16 sub-block scales (the low
// lane's 8 for elements 0..15 of the chunk, the high lane's for 16..31), and
// each chunk is dotted with up to 4 activation rows:
//   madd(maddubs(codes, q), scales)  -> 8 int32, summed over the super-block.
// Codes are unsigned (0..63) for every type but IQ4_XS: the symmetric types
// store level + offset (Q3_K: 4, Q6_K: 32), and the offset is taken out with
// the Q8_K bsums like a min, m_j = offset * s_j, in the same int32 sum
// (exact). The types with mins add madd(bsums, mins) times dmin separately.
// IQ4_XS's signed levels use maddubs(|v|, sign(q, v)). No int16 saturates:
// |q| <= 127 (the Q8_K quantizer never produces -128), so a maddubs pair is at
// most 2 * 63 * 127 (or 2 * 127 * 127 for IQ4_XS), and a madd of it with a
// scale (|s| <= 128) or of bsums (|B| <= 2032) with mins (|m| <= 4096) fits
// int32, as do the super-block sums (< 2^29).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/qdot_k.h"
#include "backend/cpu/simd.h"
#include "backend/cpu/simd_qdot.h"
#include "backend/cpu/vec.h"

namespace qlens::cpu {
namespace {

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

inline __m256i load256(const char* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m128i load128(const char* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// Bits [shift, shift + width) of every byte (width given as its mask).
inline __m256i bits_at(__m256i v, int shift, char mask) {
  return _mm256_and_si256(_mm256_srli_epi16(v, shift), _mm256_set1_epi8(mask));
}

// 16 int8 sub-block scales (sub-blocks of 16) as int16, the even ones in the
// low lane and the odd ones in the high lane (once per super-block) ...
inline __m256i even_odd_scales(__m128i s) {
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(s, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15)));
}
// ... so that chunk i's scales (s[2i] in the low lane's 8 int16, s[2i + 1] in
// the high lane's) are one in-lane shuffle; also picks int16 i of both lanes
// of any vector.
inline __m256i int16_at(__m256i v, int i) {
  return _mm256_shuffle_epi8(v, _mm256_set1_epi16(static_cast<short>(0x0100 * (2 * i + 1) + 2 * i)));
}

// 8 int16 mins (sub-blocks of 32) as 16, one per bsums group: m[g / 2].
inline __m256i mins_per_group(__m128i m) {
  const __m256i t = _mm256_cvtepu16_epi32(m);
  return _mm256_or_si256(t, _mm256_slli_epi32(t, 16));
}

// 8 int16 as floats times `mul` (exact for the scales: fp16 times <= 8 bits).
inline void scaled_floats(__m128i v, float mul, float* out) {
  _mm256_store_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(v)), _mm256_set1_ps(mul)));
}

// Super-block decoders: d, dmin (types with kMins), codes(i), scales(i) and
// mins() (16 int16 per bsums group; for kFold the offset terms, which share d;
// the dot kernel's alone: where a block has dot_codes(i), the codes that
// kernel sums, mins() takes out what those leave out of codes(i));
// for dequantization, sub_scales() (d * s_j and dmin * m_j per sub-block, in
// float as to_float computes them) and kLevel (code - kLevel = level).
template <DType T>
struct KBlock;

// How a level block reads its grid's points (KernelOptions::grid_gathers):
// scalar loads, or vector gathers where the CPU's are fast (isa.cpp). The
// blocks that read either way (GridBlock: the 3-bit and 1-bit grids) take
// it as the template argument of codes(), chunk() and dot_codes(); the
// others have one way.
enum class GridRead { Loads, Gathers };
template <class K>
concept GridBlock = requires(const K& b) { b.template codes<GridRead::Gathers>(0); };
// R where type T reads its grid either way, else the one way (so that the
// kernels of the other types are instantiated once).
template <DType T, GridRead R>
inline constexpr GridRead grid_read = GridBlock<KBlock<T>> ? R : GridRead::Loads;
template <GridRead R, class K>
__m256i codes_read(const K& b, int i) {
  if constexpr (GridBlock<K>) {
    return b.template codes<R>(i);
  } else {
    return b.codes(i);
  }
}
template <GridRead R, class K>
auto chunk_read(const K& b, int i) {
  if constexpr (GridBlock<K>) {
    return b.template chunk<R>(i);
  } else {
    return b.chunk(i);
  }
}

// Bytes per super-block of such a type, and elements per sub-block scale
// (the K types' codec's; the level types' runs, simd_qdot_levels.h).
template <DType T>
inline constexpr size_t kSuperBlockBytes = kTypeFormats[static_cast<int>(T)].block_bytes;
template <DType T>
constexpr int sub_block_size() {
  if constexpr (requires { KBlock<T>::kSub; }) {
    return KBlock<T>::kSub;
  } else {
    return KCodec<T>::type::kSub;
  }
}

// Q4_K and Q5_K: 8 sub-blocks of 32, 6-bit scales and mins.
template <DType T>
struct KBlock4 {
  using B = typename KCodec<T>::type::Block;
  static constexpr bool kSigned = false, kMins = true, kFold = false;
  static constexpr int kLevel = 0;
  const char* blk;
  float d, dmin;
  __m256i sc;  // the 8 scales as int16 in both lanes
  __m128i m;   // the 8 mins as int16
  __m256i qh;
  KBlock4(const char* b, const float* f16) : blk(b) {
    d = f16[load_u16(b + offsetof(B, d))];
    dmin = f16[load_u16(b + offsetof(B, dmin))];
    // The 12 bytes (see quant::kq::unpack_scales_k4) rearranged into 8 scale
    // bytes, then 8 min bytes: dwords [sc 0..3, sc 4..7, m 0..3, m 4..7] =
    // [b0..3 & 63, b8..11 & 15 | (b0..3 >> 6) << 4, b4..7 & 63,
    //  (b8..11 >> 4) & 15 | (b4..7 >> 6) << 4]. (The 16-byte load stays
    // inside the block: qs follows.)
    const __m128i v = load128(b + offsetof(B, scales));
    const __m128i low = _mm_and_si128(
        _mm_srlv_epi32(_mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11)),
                       _mm_setr_epi32(0, 0, 0, 4)),
        _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i top = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    const __m128i bytes = _mm_or_si128(low, _mm_and_si128(_mm_srli_epi32(top, 2), _mm_set1_epi8(0x30)));
    const __m256i sm = _mm256_cvtepu8_epi16(bytes);
    sc = _mm256_permute2x128_si256(sm, sm, 0x00);
    m = _mm256_extracti128_si256(sm, 1);
    if constexpr (T == DType::Q5_K) {
      qh = load256(b + offsetof(B, qh));
    } else {
      qh = _mm256_setzero_si256();
    }
  }
  // Element e in byte 32 (e / 64) + e % 32, low nibble for e % 64 < 32; Q5_K's
  // 5th bit is bit e / 32 of qh byte e % 32.
  __m256i codes(int i) const {
    __m256i v = bits_at(load256(blk + offsetof(B, qs) + 32 * (i / 2)), 4 * (i % 2), 0x0f);
    if constexpr (T == DType::Q5_K) v = _mm256_or_si256(v, _mm256_slli_epi16(bits_at(qh, i, 1), 4));
    return v;
  }
  __m256i scales(int i) const { return int16_at(sc, i); }
  __m256i mins() const { return mins_per_group(m); }
  void sub_scales(float* dl, float* ml) const {
    scaled_floats(_mm256_castsi256_si128(sc), d, dl);
    scaled_floats(m, dmin, ml);
  }
};
template <>
struct KBlock<DType::Q4_K> : KBlock4<DType::Q4_K> {
  using KBlock4::KBlock4;
};
template <>
struct KBlock<DType::Q5_K> : KBlock4<DType::Q5_K> {
  using KBlock4::KBlock4;
};

// Q2_K: 16 sub-blocks of 16, 4-bit scales and mins, 2-bit codes (element e at
// bit 2 ((e % 128) / 32) of byte 32 (e / 128) + e % 32).
template <>
struct KBlock<DType::Q2_K> {
  using B = quant::kq::BlockQ2K;
  static constexpr bool kSigned = false, kMins = true, kFold = false;
  static constexpr int kLevel = 0;
  const char* blk;
  float d, dmin;
  __m256i sc;  // even_odd_scales
  __m128i m;
  __m128i s16;  // the 16 scales as bytes
  KBlock(const char* b, const float* f16) : blk(b) {
    d = f16[load_u16(b + offsetof(B, d))];
    dmin = f16[load_u16(b + offsetof(B, dmin))];
    const __m128i s = load128(b + offsetof(B, scales));
    s16 = _mm_and_si128(s, _mm_set1_epi8(0x0f));
    sc = even_odd_scales(s16);
    m = _mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(0x0f));
  }
  __m256i codes(int i) const { return bits_at(load256(blk + offsetof(B, qs) + 32 * (i / 4)), 2 * (i % 4), 3); }
  __m256i scales(int i) const { return int16_at(sc, i); }
  __m256i mins() const { return _mm256_cvtepu8_epi16(m); }
  void sub_scales(float* dl, float* ml) const {
    scaled_floats(_mm_cvtepu8_epi16(s16), d, dl);
    scaled_floats(_mm_cvtepu8_epi16(_mm_srli_si128(s16, 8)), d, dl + 8);
    scaled_floats(_mm_cvtepu8_epi16(m), dmin, ml);
    scaled_floats(_mm_cvtepu8_epi16(_mm_srli_si128(m, 8)), dmin, ml + 8);
  }
};

// Q3_K: 16 sub-blocks of 16, 6-bit scales - 32; code = 2 low bits (as Q2_K) |
// the hmask bit (bit e / 32 of byte e % 32) << 2, level = code - 4.
template <>
struct KBlock<DType::Q3_K> {
  using B = quant::kq::BlockQ3K;
  static constexpr bool kSigned = false, kMins = true, kFold = true;
  static constexpr int kLevel = 4;
  const char* blk;
  float d, dmin;
  __m128i sc;
  __m256i sc_eo;  // even_odd_scales
  __m256i hm;
  KBlock(const char* b, const float* f16) : blk(b) {
    d = f16[load_u16(b + offsetof(B, d))];
    dmin = d;
    // Low 4 bits of s_j: nibbles of bytes 0..7 (low ones first); top 2 bits:
    // bits 2 (j / 4) of byte 8 + j % 4 (see quant::kq::unpack_scales_q3).
    const char* p = b + offsetof(B, scales);
    const __m128i lo = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    uint32_t hi;
    std::memcpy(&hi, p + 8, sizeof hi);
    const __m128i low4 = _mm_and_si128(_mm_unpacklo_epi64(lo, _mm_srli_epi16(lo, 4)), _mm_set1_epi8(0x0f));
    const __m128i top2 = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(hi)), _mm_setr_epi32(0, 2, 4, 6)),
                                       _mm_set1_epi8(3));
    sc = _mm_sub_epi8(_mm_or_si128(low4, _mm_slli_epi16(top2, 4)), _mm_set1_epi8(32));
    sc_eo = even_odd_scales(sc);
    hm = load256(b + offsetof(B, hmask));
  }
  __m256i codes(int i) const {
    const __m256i lo = bits_at(load256(blk + offsetof(B, qs) + 32 * (i / 4)), 2 * (i % 4), 3);
    return _mm256_or_si256(lo, _mm256_slli_epi16(bits_at(hm, i, 1), 2));
  }
  __m256i scales(int i) const { return int16_at(sc_eo, i); }
  __m256i mins() const { return _mm256_slli_epi16(_mm256_cvtepi8_epi16(sc), 2); }  // 4 s_j
  void sub_scales(float* dl, float*) const {
    scaled_floats(_mm_cvtepi8_epi16(sc), d, dl);
    scaled_floats(_mm_cvtepi8_epi16(_mm_srli_si128(sc, 8)), d, dl + 8);
  }
};

// Q6_K: 16 sub-blocks of 16, int8 scales; element e = 128 h + 32 k + l: low 4
// bits in ql[64 h + 32 (k % 2) + l] (high nibble for k >= 2), high 2 bits at
// bit 2 k of qh[32 h + l]; level = code - 32.
template <>
struct KBlock<DType::Q6_K> {
  using B = quant::kq::BlockQ6K;
  static constexpr bool kSigned = false, kMins = true, kFold = true;
  static constexpr int kLevel = 32;
  const char* blk;
  float d, dmin;
  __m128i sc;
  __m256i sc_eo;  // even_odd_scales
  KBlock(const char* b, const float* f16) : blk(b) {
    d = f16[load_u16(b + offsetof(B, d))];
    dmin = d;
    sc = load128(b + offsetof(B, scales));
    sc_eo = even_odd_scales(sc);
  }
  __m256i codes(int i) const {
    const int h = i / 4, k = i % 4;
    const __m256i lo = bits_at(load256(blk + offsetof(B, ql) + 64 * h + 32 * (k % 2)), 4 * (k / 2), 0x0f);
    const __m256i hi = bits_at(load256(blk + offsetof(B, qh) + 32 * h), 2 * k, 3);
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
  }
  __m256i scales(int i) const { return int16_at(sc_eo, i); }
  __m256i mins() const { return _mm256_slli_epi16(_mm256_cvtepi8_epi16(sc), 5); }  // 32 s_j
  void sub_scales(float* dl, float*) const {
    scaled_floats(_mm_cvtepi8_epi16(sc), d, dl);
    scaled_floats(_mm_cvtepi8_epi16(_mm_srli_si128(sc, 8)), d, dl + 8);
  }
};

// IQ4_XS: 8 sub-blocks of 32, 6-bit scales - 32, IQ4_NL levels; the nibbles of
// sub-block i are the 16 bytes at 16 i (low nibbles first, as the legacy blocks).
template <>
struct KBlock<DType::IQ4_XS> {
  using B = quant::kq::BlockIQ4XS;
  static constexpr bool kSigned = true, kMins = false, kFold = false;
  static constexpr int kLevel = 0;
  const char* blk;
  float d, dmin = 0.0f;
  __m256i sc;  // the 8 scales as int16 in both lanes
  KBlock(const char* b, const float* f16) : blk(b) {
    d = f16[load_u16(b + offsetof(B, d))];
    // s_j + 32: nibble j % 2 of scales_l[j / 2], top 2 bits at bit 2 j of scales_h.
    uint32_t l;
    std::memcpy(&l, b + offsetof(B, scales_l), sizeof l);
    const __m128i lb = _mm_cvtsi32_si128(static_cast<int>(l));
    const __m128i low4 = _mm_and_si128(_mm_unpacklo_epi8(lb, _mm_srli_epi16(lb, 4)), _mm_set1_epi8(0x0f));
    const __m256i top2 = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(load_u16(b + offsetof(B, scales_h))),
                                                            _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                          _mm256_set1_epi32(3));
    const __m256i s32 = _mm256_sub_epi32(_mm256_or_si256(_mm256_cvtepu8_epi32(low4), _mm256_slli_epi32(top2, 4)),
                                         _mm256_set1_epi32(32));
    sc = _mm256_permute4x64_epi64(_mm256_packs_epi32(s32, s32), _MM_SHUFFLE(2, 0, 2, 0));
  }
  __m256i codes(int i) const {
    const __m256i t = _mm256_broadcastsi128_si256(load128(reinterpret_cast<const char*>(quant::kIq4nlValues)));
    return _mm256_shuffle_epi8(t, unpack_nibbles(blk + offsetof(B, qs) + 16 * i));
  }
  __m256i scales(int i) const { return int16_at(sc, i); }
  __m256i mins() const { return _mm256_setzero_si256(); }
  void sub_scales(float* dl, float*) const { scaled_floats(_mm256_castsi256_si128(sc), d, dl); }
};

// Weight super-blocks prefetched ahead (past the row's end, into the next
// rows, which the dot path streams next): measured +5% generation speed on
// Zen 3 at 8 (4: +3%, 16: +4%).
inline constexpr int64_t kPrefetchBlocks = 8;

// NC activation rows against one weight row.
template <DType T, int NC, GridRead R>
void qdot_k_rows(int64_t k, const char* w, const char* x, size_t xs, float* out) {
  using K = KBlock<T>;
  constexpr size_t kBytes = kSuperBlockBytes<T>;
  using XB = quant::kq::BlockQ8K;
  // One scale for the super-block and codes of at most 2 (the ternary
  // types): the maddubs pairs (at most 2 * 2 * 128) add up in int16 over the
  // 8 chunks (4096 at most), widened once.
  constexpr bool kOneScale = sub_block_size<T>() == quant::kq::kQK;
  static_assert(!kOneScale || T == DType::TQ1_0 || T == DType::TQ2_0, "int16 sums hold codes of at most 2");
  const int64_t nb = k / quant::kq::kQK;
  const float* f16 = fp16_table();
  __m256 acc[NC];
#pragma GCC unroll 4
  for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    {
      const char* pf = w + (ib + kPrefetchBlocks) * kBytes;
      for (size_t o = 0; o < kBytes; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
    }
    const K blk(w + ib * kBytes, f16);
    const char* xb = x + ib * sizeof(XB);
    __m256i isum[NC];
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      // Signed levels: maddubs(|v|, sign(q, v)); the signed grids' chunks
      // come as |v| and the bits of their minus signs (simd_qdot_levels.h).
      const __m256i s = blk.scales(i);
      if constexpr (requires { blk.chunk(i); }) {
        const auto ch = chunk_read<R>(blk, i);
#pragma GCC unroll 4
        for (int c = 0; c < NC; ++c) {
          const __m256i q = ch.apply(load256(xb + c * xs + offsetof(XB, qs) + 32 * i));
          isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(_mm256_maddubs_epi16(ch.g, q), s));
        }
      } else {
        __m256i v;
        if constexpr (requires { blk.dot_codes(i); }) {
          // codes whose per-group part the dot_mins() take out
          if constexpr (GridBlock<K>) {
            v = blk.template dot_codes<R>(i);
          } else {
            v = blk.dot_codes(i);
          }
        } else {
          v = codes_read<R>(blk, i);
        }
        const __m256i av = K::kSigned ? _mm256_sign_epi8(v, v) : v;
#pragma GCC unroll 4
        for (int c = 0; c < NC; ++c) {
          __m256i q = load256(xb + c * xs + offsetof(XB, qs) + 32 * i);
          if constexpr (K::kSigned) q = _mm256_sign_epi8(q, v);
          if constexpr (kOneScale)
            isum[c] = _mm256_add_epi16(isum[c], _mm256_maddubs_epi16(av, q));
          else
            isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(_mm256_maddubs_epi16(av, q), s));
        }
      }
    }
    if constexpr (kOneScale)
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) isum[c] = _mm256_madd_epi16(isum[c], _mm256_set1_epi16(1));
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      const char* xc = xb + c * xs;
      float dx;
      std::memcpy(&dx, xc + offsetof(XB, d), sizeof dx);
      if constexpr (K::kMins) {
        const __m256i mi = _mm256_madd_epi16(load256(xc + offsetof(XB, bsums)), blk.mins());
        if constexpr (K::kFold) {
          acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * blk.d), _mm256_cvtepi32_ps(_mm256_sub_epi32(isum[c], mi)),
                                   acc[c]);
        } else {
          acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * blk.d), _mm256_cvtepi32_ps(isum[c]), acc[c]);
          acc[c] = _mm256_fnmadd_ps(_mm256_set1_ps(dx * blk.dmin), _mm256_cvtepi32_ps(mi), acc[c]);
        }
      } else {
        acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * blk.d), _mm256_cvtepi32_ps(isum[c]), acc[c]);
      }
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < NC; ++c) out[c] = Avx2::hsum(acc[c]);
}

template <DType T, GridRead R = GridRead::Loads>
void qdot_k_simd(int64_t k, const void* w, const void* x, size_t x_stride, int nc, float* out) {
  const char* wr = static_cast<const char*>(w);
  const char* xr = static_cast<const char*>(x);
  with_row_count(nc, [&]<int NC>() { qdot_k_rows<T, NC, R>(k, wr, xr, x_stride, out); });
}

// A weight super-block dequantized to 256 floats, bit for bit as to_float:
// dl_j * level - ml_j with dl_j = d * s_j and ml_j = dmin * m_j in float
// (dl_j * level is exact for the types with mins, so a fused multiply-add
// would round the same).
template <DType T>
void dequantize_k_block(const char* blk, const float* f16, float* y) {
  using K = KBlock<T>;
  constexpr int kSub = sub_block_size<T>();
  const K kb(blk, f16);
  alignas(32) float dl[16], ml[16];
  kb.sub_scales(dl, ml);
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    const __m256i v = kb.codes(i);
    const __m128i halves[2] = {_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)};
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const int e = 32 * i + 8 * g, j = e / kSub;
      __m256i lv = _mm256_cvtepi8_epi32(g % 2 ? _mm_srli_si128(halves[g / 2], 8) : halves[g / 2]);
      if constexpr (K::kLevel != 0) lv = _mm256_sub_epi32(lv, _mm256_set1_epi32(K::kLevel));
      __m256 f = _mm256_mul_ps(_mm256_set1_ps(dl[j]), _mm256_cvtepi32_ps(lv));
      if constexpr (K::kMins && !K::kFold) f = _mm256_sub_ps(f, _mm256_set1_ps(ml[j]));
      _mm256_storeu_ps(y + e, f);
    }
  }
}

// PackFn for a K type: each super-block column of NR rows dequantized into a
// buffer, then transposed 8 x 8 into the panel (k0 and kc are multiples of
// 256: the GEMM K blocks are, and K of a K type is).
template <DType T, int NR>
void pack_k_panel(const char* row0, size_t row_stride, int64_t nrows, int64_t k0, int64_t kc, float* panel) {
  static_assert(NR % 8 == 0);
  constexpr int kQK = quant::kq::kQK;
  const float* f16 = fp16_table();
  alignas(32) float buf[NR][kQK];
  const int64_t b0 = k0 / kQK;
  for (int64_t b = 0; b < kc / kQK; ++b) {
    for (int i = 0; i < NR; ++i) {
      if (i < nrows) {
        dequantize_k_block<T>(row0 + i * row_stride + (b0 + b) * kSuperBlockBytes<T>, f16, buf[i]);
      } else {
        for (int q = 0; q < kQK / 8; ++q) _mm256_store_ps(buf[i] + 8 * q, _mm256_setzero_ps());
      }
    }
    transpose_into_panel<NR, kQK>(buf, panel + b * kQK * NR);
  }
}

// Registers the kernels of every K type (dot, and pack for panels of NR).
template <int NR>
void add_kquant_kernels(GemmKernels& g) {
  auto add = [&]<DType T>() {
    g.dot[static_cast<int>(T)] = qdot_k_simd<T>;
    g.pack[static_cast<int>(T)] = pack_k_panel<T, NR>;
  };
  for_each_k_qtype(add);
}

#endif

}  // namespace
}  // namespace qlens::cpu

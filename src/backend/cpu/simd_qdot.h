// Quantized dot kernels and weight-panel packing for the legacy formats with
// 256-bit integer vectors (AVX2; the AVX-512 files, compiled with AVX2 too,
// use the same code). The math and the block descriptions: qdot.h. Included
// only by the per-instruction-set files (through simd_matmul.h); everything
// has internal linkage.
//
// A weight block is decoded once into 32 int8 codes in element order and
// dotted with up to 4 activation blocks (block_dot), then madd with ones: 8
// int32 partial sums.
//  - signed values (Q8_0, IQ4_NL): maddubs(|v|, sign(q, v)). (|v| <= 128 and
//    |q| <= 127, so the int16 pair sums cannot saturate; q = -128 would be
//    negated wrongly, and the Q8 activation quantizer never produces it.)
//  - unsigned codes (Q4_1, Q5_1): maddubs(v, q) directly.
//  - unsigned codes with a bias b (Q4_0: c - 8, Q5_0: c - 16):
//    maddubs(c, q) - maddubs(b, q), cheaper than the sign trick.
// The 8 int32 sums are converted to float and accumulated, times d_w * d_x,
// into one vector per activation row and block parity (two chains hide the
// FMA latency); the offset term m_w * s_x into a scalar FMA chain per parity.
// Scales are broadcast from fp16_table() (exact). The math is ggml's; the
// order of the float additions is this file's.
//
// One core, weights in L2 (2026-11-30, dev-2c): Q4_0 1.43 ns per block (was
// 1.62 with the sign trick and scalar scale products), Q8_0 1.25 (1.30).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/qdot.h"
#include "backend/cpu/simd.h"
#include "backend/cpu/vec.h"

namespace qlens::cpu {
namespace {

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

inline float half_at(const char* p) { return _cvtsh_ss(load_u16(p)); }

// The 16 bytes of packed nibbles as 32 bytes: low nibbles (elements 0..15),
// then high nibbles (16..31).
// (The 16 bytes broadcast to both lanes, the upper lane shifted: one shift,
// one blend and one mask.)
inline __m256i unpack_nibbles(const char* qs) {
  const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m256i both = _mm256_blend_epi32(b, _mm256_srli_epi16(b, 4), 0xf0);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

// 0xFF in byte j where bit j of `bits` is set, else 0 (AVX2: without
// AVX-512's byte masks).
inline __m256i bytes_of_bits(uint32_t bits) {
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                                            _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                                             2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
}

// 0x10 in byte j where bit j of the little-endian 32-bit qh is set, else 0:
// Q5_0's and Q5_1's fifth bits.
inline __m256i fifth_bits(const char* qh) {
  uint32_t h;
  std::memcpy(&h, qh, sizeof h);
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  return _mm256_maskz_mov_epi8(static_cast<__mmask32>(h), _mm256_set1_epi8(0x10));
#else
  return _mm256_and_si256(bytes_of_bits(h), _mm256_set1_epi8(0x10));
#endif
}

// The 32 values v_j of a weight block as int8 (see qdot.h).
template <DType T>
__m256i decode_block(const char* blk) {
  using F = QFormat<T>;
  using B = typename F::Block;
  const char* qs = blk + qs_offset<B>();
  if constexpr (F::kBits == 8) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
  } else {
    __m256i v = unpack_nibbles(qs);
    if constexpr (F::kBits == 5) v = _mm256_or_si256(v, fifth_bits(blk + offsetof(B, qh)));
    if constexpr (F::kTable) {
      const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIq4nlValues));
      v = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(t), v);
    }
    if constexpr (F::kBias != 0) v = _mm256_sub_epi8(v, _mm256_set1_epi8(static_cast<char>(F::kBias)));
    return v;
  }
}

// sum_j v_j q_j of a weight block and an activation block q as 8 int32
// partial sums. c is the block's code vector from decode_codes. The biased
// types (Q4_0, Q5_0) keep their unsigned codes: sum (c - b) q = sum c q -
// b sum q, both in one int16 vector (|maddubs(c, q)| <= 2 * 31 * 127 and
// |maddubs(b, q)| <= 2 * 16 * 127, so neither the pair sums nor their
// difference saturate): two maddubs and a subtraction instead of the
// subtraction and two psignb of the sign trick.
template <DType T>
constexpr bool kUnsignedBias = QFormat<T>::kBias != 0 && !QFormat<T>::kTable && QFormat<T>::kBits != 8;

template <DType T>
inline __m256i block_dot(__m256i c, __m256i q) {
  using F = QFormat<T>;
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (F::kOffset) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(c, q), ones);
  } else if constexpr (kUnsignedBias<T>) {
    const __m256i cq = _mm256_maddubs_epi16(c, q);
    const __m256i bq = _mm256_maddubs_epi16(_mm256_set1_epi8(static_cast<char>(F::kBias)), q);
    return _mm256_madd_epi16(_mm256_sub_epi16(cq, bq), ones);
  } else {
    // Signed values: maddubs(|v|, sign(q, v)) (see the top of the file).
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(c, c), _mm256_sign_epi8(q, c)), ones);
  }
}

// The vector block_dot takes for a weight block: the unsigned codes for the
// biased types, the signed values v_j otherwise.
template <DType T>
inline __m256i decode_codes(const char* blk) {
  using F = QFormat<T>;
  using B = typename F::Block;
  if constexpr (kUnsignedBias<T>) {
    const __m256i v = unpack_nibbles(blk + qs_offset<B>());
    if constexpr (F::kBits == 5) return _mm256_or_si256(v, fifth_bits(blk + offsetof(B, qh)));
    return v;
  } else {
    return decode_block<T>(blk);
  }
}

// Weight bytes prefetched ahead per weight row: +8% with the weights
// streaming from memory (one core, 32000 x 2048 Q4_0; 768-1536 alike).
constexpr int kQdotPrefetch = 1024;

// NR weight rows (w_r at w + r * ws) against NC activation rows (x_c at
// x + c * xs), one of NR and NC being 1: out[r * NC + c]. Every output gets
// the same operations in the same order whatever NR and NC are, so results
// are equal bit for bit to the 1 x 1 kernel's. Several activation rows share
// each weight block's decoding; several weight rows (generation: one
// activation row) share the activation loads, the bias term of Q4_0 / Q5_0
// (maddubs(b, q), computed once: the compiler merges the identical pure
// expressions) and d_x.
template <DType T, int NR, int NC>
void qdot_tile(int64_t k, const char* w, size_t ws, const char* x, size_t xs, float* out) {
  static_assert(NR == 1 || NC == 1);
  using F = QFormat<T>;
  using B = typename F::Block;
  using XB = typename F::XBlock;
  const int64_t nb = k / quant::kLegacyBlock;
  // Scales through the exact conversion table, broadcast from it (a load,
  // no shuffle): cheaper than F16C's GPR -> vector -> convert for one value.
  const float* f16 = fp16_table();
  __m256 acc[NR][NC][2];
  // The offset terms m_w * s_x (Q4_1, Q5_1): one scalar FMA per block, two
  // chains by block parity too.
  __m128 off[NR][NC][2];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      acc[r][c][0] = acc[r][c][1] = _mm256_setzero_ps();
      off[r][c][0] = off[r][c][1] = _mm_setzero_ps();
    }
  // One block: u selects the accumulator (two chains by block parity hide the
  // FMA latency).
  auto block = [&](int64_t ib, int u) {
    __m256i v[NR];
    __m256 dw[NR];
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const char* wb = w + r * ws + ib * sizeof(B);
      v[r] = decode_codes<T>(wb);
      dw[r] = _mm256_broadcast_ss(f16 + load_u16(wb + offsetof(B, d)));
    }
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      const char* xb = x + c * xs + ib * sizeof(XB);
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + qs_offset<XB>()));
      const __m256 dx = _mm256_broadcast_ss(f16 + load_u16(xb + offsetof(XB, d)));
#pragma GCC unroll 4
      for (int r = 0; r < NR; ++r) {
        const __m256 p = _mm256_cvtepi32_ps(block_dot<T>(v[r], q));
        acc[r][c][u] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], dx), p, acc[r][c][u]);
        if constexpr (F::kOffset) {
          const char* wb = w + r * ws + ib * sizeof(B);
          off[r][c][u] = _mm_fmadd_ss(_mm_load_ss(f16 + load_u16(wb + offsetof(B, m))),
                                      _mm_load_ss(f16 + load_u16(xb + offsetof(XB, s))), off[r][c][u]);
        }
      }
    }
  };
  int64_t ib = 0;
  for (; ib + 2 <= nb; ib += 2) {
    // One weight row (NR = 1): kQdotPrefetch bytes ahead. Several rows
    // (adjacent, as the dot path calls them): the same position in the next
    // NR rows, which the next call reads.
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r)
#pragma GCC unroll 2
      for (size_t line = 0; line < 2 * sizeof(B); line += 64)
        _mm_prefetch(w + (NR == 1 ? kQdotPrefetch : (NR + r) * ws) + ib * sizeof(B) + line, _MM_HINT_T0);
    block(ib, 0);
    block(ib + 1, 1);
  }
  if (ib < nb) block(ib, 0);
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      float o = Avx2::hsum(_mm256_add_ps(acc[r][c][0], acc[r][c][1]));
      if constexpr (F::kOffset) o += _mm_cvtss_f32(_mm_add_ss(off[r][c][0], off[r][c][1]));
      out[r * NC + c] = o;
    }
}

// VecDotFn: one weight row, nc activation rows.
template <DType T>
void qdot_simd(int64_t k, const void* w, const void* x, size_t x_stride, int nc, float* out) {
  const char* wr = static_cast<const char*>(w);
  const char* xr = static_cast<const char*>(x);
  with_row_count(nc, [&]<int NC>() { qdot_tile<T, 1, NC>(k, wr, 0, xr, x_stride, out); });
}

// VecDotRowsFn: nr weight rows, one activation row.
template <DType T>
void qdot_rows_simd(int64_t k, const void* w, size_t w_stride, const void* x, int nr, float* out) {
  const char* wr = static_cast<const char*>(w);
  const char* xr = static_cast<const char*>(x);
  with_row_count(nr, [&]<int NR>() { qdot_tile<T, NR, 1>(k, wr, w_stride, xr, 0, out); });
}

// A weight block dequantized to 32 floats, bit for bit as the type's to_float
// (one rounding per element: v * d, then + m for the offset types; no FMA).
template <DType T>
void dequantize_block(const char* blk, float* y) {
  using F = QFormat<T>;
  using B = typename F::Block;
  const __m256i v = decode_block<T>(blk);
  const __m256 d = _mm256_set1_ps(half_at(blk + offsetof(B, d)));
  const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[q])), d);
    if constexpr (F::kOffset) f = _mm256_add_ps(f, _mm256_set1_ps(half_at(blk + offsetof(B, m))));
    _mm256_storeu_ps(y + 8 * q, f);
  }
}

// Transposes NR rows of kElems dequantized values, 8 x 8 at a time, into the
// k-major panel at dst (kElems rows of NR floats). Shared by the legacy and
// K-quant pack functions.
template <int NR, int kElems>
inline void transpose_into_panel(const float (&buf)[NR][kElems], float* dst) {
#pragma GCC unroll 4
  for (int g = 0; g < NR / 8; ++g)
#pragma GCC unroll 4
    for (int kk = 0; kk < kElems / 8; ++kk) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) r[t] = _mm256_load_ps(buf[g * 8 + t] + kk * 8);
      Avx2::transpose8(r);
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) _mm256_storeu_ps(dst + (kk * 8 + t) * NR + g * 8, r[t]);
    }
}

// PackFn for a legacy type: each block column of NR rows dequantized into a
// small buffer, then transposed 8 x 8 into the panel. (k0 and kc are
// multiples of 32: the GEMM K blocks are multiples of 256 and K of 32.)
template <DType T, int NR>
void pack_quant_panel(const char* row0, size_t row_stride, int64_t nrows, int64_t k0, int64_t kc, float* panel) {
  static_assert(NR % 8 == 0);
  using B = typename QFormat<T>::Block;
  alignas(32) float buf[NR][32];
  const int64_t b0 = k0 / quant::kLegacyBlock;
  for (int64_t b = 0; b < kc / quant::kLegacyBlock; ++b) {
    for (int i = 0; i < NR; ++i) {
      if (i < nrows) {
        dequantize_block<T>(row0 + i * row_stride + (b0 + b) * sizeof(B), buf[i]);
      } else {
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) _mm256_store_ps(buf[i] + 8 * q, _mm256_setzero_ps());
      }
    }
    transpose_into_panel<NR, 32>(buf, panel + b * quant::kLegacyBlock * NR);
  }
}

// Registers the kernels of every legacy type (dot, and pack for panels of NR).
template <int NR>
void add_quant_kernels(GemmKernels& g) {
  auto add = [&]<DType T>() {
    g.dot[static_cast<int>(T)] = qdot_simd<T>;
    g.dot_rows[static_cast<int>(T)] = qdot_rows_simd<T>;
    g.pack[static_cast<int>(T)] = pack_quant_panel<T, NR>;
  };
  for_each_legacy_qtype(add);
}

#endif

}  // namespace
}  // namespace qlens::cpu

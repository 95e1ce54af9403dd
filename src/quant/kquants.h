// ggml's K-quant super-block formats (QK_K = 256 elements per block) and the
// scale searches their quantizers share (internal to src/quant).
//
// The structs are the exact byte layouts of ggml-common.h; fp16 fields are raw
// IEEE half bits. Element order inside each block is documented at the
// per-type codecs in kquants.cpp and in docs/QUANTIZATION.md.
#pragma once

#include <cstdint>

namespace qlens::quant::kq {

inline constexpr int kQK = 256;  // elements per super-block

// 16 sub-blocks of 16: x = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4), q in 0..3.
struct BlockQ2K {
  uint8_t scales[kQK / 16];  // low nibble: scale, high nibble: min
  uint8_t qs[kQK / 4];       // 2-bit quants
  uint16_t d;                // super-block scale of the scales (fp16)
  uint16_t dmin;             // super-block scale of the mins (fp16)
};
static_assert(sizeof(BlockQ2K) == 84);

// 16 sub-blocks of 16: x = d * (s_j - 32) * (q - 4), q in 0..7 (2 low bits in
// qs, the high bit in hmask), s_j a 6-bit scale.
struct BlockQ3K {
  uint8_t hmask[kQK / 8];  // high bit of each quant
  uint8_t qs[kQK / 4];     // low 2 bits
  uint8_t scales[12];      // 16 6-bit scales, packed
  uint16_t d;              // fp16
};
static_assert(sizeof(BlockQ3K) == 110);

// 8 sub-blocks of 32: x = d * s_j * q - dmin * m_j, q in 0..15, s_j and m_j 6-bit.
struct BlockQ4K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];  // 8 6-bit scales and 8 6-bit mins, packed
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4K) == 144);

// As Q4_K with q in 0..31: the 5th bit of each quant in qh.
struct BlockQ5K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQK / 8];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5K) == 176);

// 16 sub-blocks of 16: x = d * scales[j] * (q - 32), q in 0..63 (4 low bits in
// ql, 2 high bits in qh), scales[j] signed 8-bit.
struct BlockQ6K {
  uint8_t ql[kQK / 2];
  uint8_t qh[kQK / 4];
  int8_t scales[kQK / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6K) == 210);

// The activation type of the K dot products: x = d * qs[i]; bsums[j] is the sum
// of qs over elements 16j .. 16j + 15.
struct BlockQ8K {
  float d;
  int8_t qs[kQK];
  int16_t bsums[kQK / 16];
};
static_assert(sizeof(BlockQ8K) == 292);

// 8 sub-blocks of 32: x = d * (s_j - 32) * kIq4nlValues[q], q in 0..15, s_j 6-bit
// (low 4 bits in scales_l, high 2 bits in scales_h).
struct BlockIQ4XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQK / 64];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockIQ4XS) == 136);

// ---- scale searches (kquants_search.cpp) ----
//
// All take per-element weights w (>= 0) and minimize sum_i w_i (x_i - y_i)^2
// (or sum_i w_i |x_i - y_i| where noted) over the choices they search. Sums are
// accumulated in double so that large magnitudes cannot overflow the
// comparisons.

// Round to nearest, ties to even (as ggml's nearest_int); |v| is clamped to
// 2^22 - 1 first, NaN gives an unspecified value without undefined behaviour.
int nearest_int(float v);

// Symmetric levels L_i in [-nmax, nmax - 1] with y_i = scale * L_i. Tries the
// scales -(nmax + 0.1 k) / max for k = -9..9 (max: the value of largest
// magnitude) and keeps the one whose least-squares scale fits best; returns
// that scale (its sign follows -max). 0 and all L = 0 for an all-zero group.
float make_qx_quants(int n, int nmax, const float* x, const float* w, int8_t* L);

// As make_qx_quants starting from the plain -nmax / max scale, then improves
// the levels one element at a time (coordinate descent, up to 5 passes).
float make_qx_quants_refined(int n, int nmax, const float* x, const float* w, int8_t* L);

// Affine levels L_i in [0, nmax] with y_i = scale * L_i - min_out (min_out >= 0,
// i.e. the offset is never positive). Starts from nmax / (max - min) (max and
// min of the group, min taken <= 0), then tries the inverse scales
// (nmax + rmin + rdelta k) / (max - min), k = 0..nstep, fits scale and offset
// by weighted least squares for each, and keeps the best fit (by squared or,
// with use_mad, absolute error). Returns the scale; 0 for a constant group.
// n must be a multiple of 4.
float make_qkx_quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out,
                      float rmin, float rdelta, int nstep, bool use_mad);

// Non-negative values (sub-block scales or mins) on levels L_i in [0, nmax]
// with y_i = scale * L_i: a scale search around nmax / max, then coordinate
// descent on the levels. Returns the scale (0 when all values are ~0).
float make_qp_quants(int n, int nmax, const float* x, const float* w, uint8_t* L);

// Index of the IQ4_NL level nearest to v (ties to the upper level).
int iq4_nearest_index(float v);

// A group on the IQ4_NL levels: y_i = scale * kIq4nlValues[L_i]. Tries the
// scale that maps the largest magnitude x_m onto +127 and the 2 * ntry + 1
// scales that map it onto -127 + k, refits each by least squares and returns
// the best. 0 for an all-zero group. n must be a multiple of 4.
float iq4_search(int n, const float* x, const float* w, uint8_t* L, int ntry);

}  // namespace qlens::quant::kq

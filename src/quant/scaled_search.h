// The search for a block's codes on a fixed grid of levels times one fp16
// scale, minimizing the importance-weighted squared error (fit_scaled), and
// the numeric helpers of the quantizers. Shared by the legacy formats
// (legacy.cpp: Q4_0, Q5_0, IQ4_NL, blocks of 32) and the one-scale low-bit
// formats (lowbit.cpp: Q2_0, TQ1_0, TQ2_0, blocks of 64 and 256); N is the
// block length, a multiple of 8. Internal to src/quant.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "qlens/types.h"
#include "quant/search_simd.h"

#ifdef QLENS_SEARCH_X86
#include <immintrin.h>
#endif

namespace qlens::quant::scaled {

constexpr float kHalfMax = 65504.0f;  // largest finite fp16
// Blocks whose largest magnitude is below this are stored as exact zeros by
// the weighted searches (as ggml's GROUP_MAX_EPS); their scale would round to
// 0 in fp16 anyway.
constexpr float kTinyBlock = 1e-15f;

// ---- numeric helpers --------------------------------------------------------

// Clamps to [lo, hi]; NaN gives lo.
inline float clampf(float v, float lo, float hi) {
  v = v > lo ? v : lo;
  return v < hi ? v : hi;
}

// Nearest integer (ties to even) of v clamped to [lo, hi]; NaN gives lo.
inline int round_clamp(float v, int lo, int hi) {
  v = clampf(v, static_cast<float>(lo), static_cast<float>(hi));
  // |v| < 2^22: adding 1.5 * 2^23 rounds v to an integer in the float unit.
  constexpr float kRound = 12582912.0f;
  return static_cast<int>((v + kRound) - kRound);
}

// Integer part of v (toward zero) clamped to [lo, hi]; NaN gives lo. The
// reference quantizers of ggml truncate (x + 0.5) this way.
inline int trunc_clamp(float v, int lo, int hi) {
  return static_cast<int>(clampf(v, static_cast<float>(lo), static_cast<float>(hi)));
}

// C's roundf (ties away from zero), clamped to [lo, hi]; NaN gives 0. Exact
// for |v| < 2^23, which is all that reaches it unclamped.
inline int round_away_clamp(float v, int lo, int hi) {
  if (v != v) return 0;
  v = clampf(v, static_cast<float>(lo - 1), static_cast<float>(hi + 1));
  int i = static_cast<int>(v);
  const float frac = v - static_cast<float>(i);  // exact
  if (frac >= 0.5f) ++i;
  else if (frac <= -0.5f) --i;
  return std::clamp(i, lo, hi);
}

// Round half to even, clamped to [lo, hi]; NaN gives 0.
inline int round_even_clamp(float v, int lo, int hi) {
  if (v != v) return 0;
  v = clampf(v, static_cast<float>(lo), static_cast<float>(hi));
  return static_cast<int>(std::nearbyint(v));
}

// A scale stored as fp16: values beyond the fp16 range saturate at +-65504
// rather than becoming infinite (ggml would store inf and dequantize NaN).
inline float saturate_half(float f) { return std::clamp(f, -kHalfMax, kHalfMax); }

// 1/d for a reference quantizer: 0 when d is 0 or so small that 1/d overflows
// (d then rounds to 0 in fp16 and every element dequantizes to 0 anyway).
inline float inverse_or_zero(float d) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  return std::isinf(id) ? 0.0f : id;
}

// ---- search for codes on a grid times one scale ------------------------------

// Levels lo..hi (code = level - lo), as Q4_0 (-8..7) and Q5_0 (-16..15).
struct IntGrid {
  int lo, hi;
  int code(float v) const { return round_clamp(v, lo, hi) - lo; }
  float level(int c) const { return static_cast<float>(c + lo); }
  float lowest() const { return static_cast<float>(lo); }
  float highest() const { return static_cast<float>(hi); }
  float step() const { return 0.1f; }  // spacing of candidate scales, in level units
  int max_code() const { return hi - lo; }
};

// The nearest codes of id * xs on the grid, and Σ ws q xs, Σ ws q^2 of their
// levels q, in eight lanes (lane u takes elements 8i + u; the AVX2 loop for
// the integer grids has the same lanes and operations: search_simd.h).
template <int N, class Grid>
void grid_fit_plain(const Grid& g, const float* xs, const float* ws, float id, uint8_t* codes, float& qx, float& q2) {
  float pqx[8] = {}, pq2[8] = {};
  for (int j = 0; j < N; j += 8)
    for (int u = 0; u < 8; ++u) {
      const int c = g.code(id * xs[j + u]);
      codes[j + u] = static_cast<uint8_t>(c);
      const float q = g.level(c);
      pqx[u] += ws[j + u] * q * xs[j + u];
      pq2[u] += ws[j + u] * q * q;
    }
  qx = ((pqx[0] + pqx[1]) + (pqx[2] + pqx[3])) + ((pqx[4] + pqx[5]) + (pqx[6] + pqx[7]));
  q2 = ((pq2[0] + pq2[1]) + (pq2[2] + pq2[3])) + ((pq2[4] + pq2[5]) + (pq2[6] + pq2[7]));
}

#ifdef QLENS_SEARCH_X86
template <int N>
__attribute__((target("avx2"))) void int_grid_fit_avx2(const IntGrid& g, const float* xs, const float* ws, float id,
                                                       uint8_t* codes, float& qx, float& q2) {
  const __m256 vid = _mm256_set1_ps(id), lo = _mm256_set1_ps(g.lowest()), hi = _mm256_set1_ps(g.highest());
  const __m256 round = _mm256_set1_ps(12582912.0f);
  __m256 pqx = _mm256_setzero_ps(), pq2 = _mm256_setzero_ps();
  for (int j = 0; j < N; j += 8) {
    const __m256 x = _mm256_loadu_ps(xs + j), w = _mm256_loadu_ps(ws + j);
    // clampf (max then min keep its NaN -> lo), then round_clamp's rounding.
    const __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(vid, x), lo), hi);
    const __m256 q = _mm256_sub_ps(_mm256_add_ps(v, round), round);
    alignas(32) int32_t c[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(c), _mm256_sub_epi32(_mm256_cvttps_epi32(q), _mm256_set1_epi32(g.lo)));
    for (int u = 0; u < 8; ++u) codes[j + u] = static_cast<uint8_t>(c[u]);
    const __m256 wq = _mm256_mul_ps(w, q);
    pqx = _mm256_add_ps(pqx, _mm256_mul_ps(wq, x));
    pq2 = _mm256_add_ps(pq2, _mm256_mul_ps(wq, q));
  }
  alignas(32) float a[8], b[8];
  _mm256_store_ps(a, pqx);
  _mm256_store_ps(b, pq2);
  qx = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  q2 = ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7]));
}
#endif

template <int N, class Grid>
void grid_fit(const Grid& g, const float* xs, const float* ws, float id, uint8_t* codes, float& qx, float& q2) {
#ifdef QLENS_SEARCH_X86
  if constexpr (std::is_same_v<Grid, IntGrid>)
    if (use_search_simd()) return int_grid_fit_avx2<N>(g, xs, ws, id, codes, qx, q2);
#endif
  grid_fit_plain<N>(g, xs, ws, id, codes, qx, q2);
}

// The element of largest magnitude (amax, its signed value max) and the
// largest weight of a block.
struct BlockPeak {
  float amax = 0.0f, max = 0.0f, wmax = 0.0f;
};

// Found in locals, not in the struct's fields: these compile to branch-free
// selects, as the loop did inside fit_scaled.
template <int N>
inline BlockPeak block_peak(const float* x, const float* w) {
  float amax = 0.0f, max = 0.0f, wmax = 0.0f;
  for (int j = 0; j < N; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
    wmax = std::max(wmax, w[j]);
  }
  return {amax, max, wmax};
}

// fit_scaled's search, on the block normalized: x / max (in [-1, 1], 1 at
// the largest magnitude) and w / max(w), so that float sums can neither
// overflow nor underflow; the scale found is then d = d_normalized * max.
template <int N>
inline void normalize_block(const float* x, const float* w, const BlockPeak& p, float* xs, float* ws) {
  const float inv_w = p.wmax > 0.0f && std::isfinite(1.0f / p.wmax) ? 1.0f / p.wmax : 0.0f;
  for (int j = 0; j < N; ++j) {
    xs[j] = static_cast<float>(static_cast<double>(x[j]) / p.max);
    ws[j] = inv_w > 0.0f ? w[j] * inv_w : 1.0f;
  }
}

// The search's state. The arrays stay the caller's: a struct holding them
// would have its address passed to grid_fit (not inlined), and the best sums
// would then live in memory rather than in registers.
template <int N, class Grid>
struct ScaledSearch {
  const Grid& g;
  const float* xs;  // the normalized block
  const float* ws;
  uint8_t* cand;   // scratch codes
  uint8_t* codes;  // the best codes so far
  float best_qx = 0.0f, best_q2 = 0.0f, best_score = -1.0f;  // score = (sum w q x)^2 / sum w q^2

  float scale() const { return best_qx / best_q2; }

  // Assigns the nearest codes for inverse scale id; keeps them when they score better.
  bool try_inverse(float id) {
    float qx, q2;
    grid_fit<N>(g, xs, ws, id, cand, qx, q2);
    if (!(q2 > 0.0f)) return false;
    const float score = qx * qx / q2;
    if (!(score > best_score)) return false;
    best_score = score;
    best_qx = qx;
    best_q2 = q2;
    std::copy(cand, cand + N, codes);
    return true;
  }

  // Steps 1 and 2; returns the normalized scale.
  float best_candidate() {
    for (int k = -9; k <= 9; ++k) {
      try_inverse(g.lowest() + static_cast<float>(k) * g.step());
      try_inverse(g.highest() + static_cast<float>(k) * g.step());
    }
    float dn;
    if (best_score >= 0.0f) {
      dn = scale();
    } else {  // no weight on any nonzero level: the largest magnitude onto the lowest level
      dn = 1.0f / g.lowest();
      for (int j = 0; j < N; ++j) codes[j] = static_cast<uint8_t>(g.code(g.lowest() * xs[j]));
    }
    return dn;
  }

  // One code to a neighbouring level wherever that raises the score (the
  // scale refitted); whether any moved.
  bool move_codes() {
    bool changed = false;
    for (int j = 0; j < N; ++j) {
      for (int dir = -1; dir <= 1; dir += 2) {
        const int c = codes[j] + dir;
        if (c < 0 || c > g.max_code()) continue;
        const float qo = g.level(codes[j]), qn = g.level(c);
        const float qx = best_qx + ws[j] * (qn - qo) * xs[j];
        const float q2 = best_q2 + ws[j] * (qn * qn - qo * qo);
        if (q2 > 0.0f && qx * qx / q2 > best_score) {
          best_qx = qx;
          best_q2 = q2;
          best_score = qx * qx / q2;
          codes[j] = static_cast<uint8_t>(c);
          changed = true;
        }
      }
    }
    return changed;
  }

  // Local moves, each pass followed by Lloyd rounds; returns the normalized scale.
  float local_moves(float dn) {
    for (int pass = 0; pass < 3; ++pass) {
      if (!move_codes()) break;
      dn = scale();
      for (int round = 0; round < 4; ++round) {
        if (!try_inverse(1.0f / dn)) break;
        dn = scale();
      }
    }
    return dn;
  }
};

// Step 4: d rounded to fp16 and the nearest codes of x for it; returns the fp16 bits.
template <int N, class Grid>
uint16_t round_scale(const Grid& g, const float* x, float d, uint8_t zero_code, uint8_t* codes) {
  const uint16_t h = fp32_to_fp16(saturate_half(d));
  const float dr = fp16_to_fp32(h);
  if (dr == 0.0f) {
    std::fill(codes, codes + N, zero_code);
  } else {
    const float id = 1.0f / dr;
    for (int j = 0; j < N; ++j) codes[j] = static_cast<uint8_t>(g.code(id * x[j]));
  }
  return h;
}

// Chooses codes and one scale d minimizing sum_j w_j (x_j - d * level(code_j))^2.
//  1. Candidate assignments: nearest codes of x / d for d mapping the element of
//     largest magnitude onto the lowest or the highest level, each nudged by
//     -9..9 grid steps (38 candidates in all).
//  2. For a fixed assignment the optimal scale is closed-form,
//     d = sum w q x / sum w q^2, and lowers the error by (sum w q x)^2 / sum w q^2:
//     the candidate maximizing that is kept.
//  3. Alternate (Lloyd): reassign the nearest codes for that d, refit d, while
//     the error drops (at most 4 rounds); then move single codes to a
//     neighbouring level when that raises the score, and Lloyd again.
//  4. Round d to fp16 and reassign the nearest codes for the rounded scale.
// Returns the fp16 bits of d.
template <int N, class Grid>
uint16_t fit_scaled(const float* x, const float* w, const Grid& g, uint8_t* codes) {
  const BlockPeak peak = block_peak<N>(x, w);
  const uint8_t zero_code = static_cast<uint8_t>(g.code(0.0f));
  if (!(peak.amax >= kTinyBlock)) {
    std::fill(codes, codes + N, zero_code);
    return fp32_to_fp16(0.0f);
  }
  float xs[N], ws[N];
  normalize_block<N>(x, w, peak, xs, ws);
  uint8_t cand[N];
  ScaledSearch<N, Grid> s{g, xs, ws, cand, codes};
  float dn = s.best_candidate();  // the normalized scale
  for (int round = 0; round < 4 && dn != 0.0f; ++round) {
    if (!s.try_inverse(1.0f / dn)) break;
    dn = s.scale();
  }
  if (s.best_score >= 0.0f) dn = s.local_moves(dn);
  return round_scale<N>(g, x, dn * peak.max, zero_code, codes);
}

}  // namespace qlens::quant::scaled

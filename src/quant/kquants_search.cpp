// Scale searches shared by the K-quant quantizers (see kquants.h). These follow
// the ideas of ggml's make_qx_quants, make_q3_quants, make_qkx2/3_quants,
// make_qp_quants and the IQ4 search; the differences are noted where they are.
#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstring>

#include "quant/kquants.h"
#include "quant/search_simd.h"

#ifdef QLENS_SEARCH_X86
#include <immintrin.h>
#endif
#include "quant/registry.h"

namespace qlens::quant::kq {

namespace {

// Groups whose largest magnitude is below this are treated as all zero (ggml's GROUP_MAX_EPS).
constexpr float kGroupEps = 1e-15f;
constexpr int kMaxGroup = kQK;  // the longest group any caller passes

// Largest magnitude of x and the signed value that has it (the first one on ties).
struct SignedMax {
  float amax = 0;
  float max = 0;
};
SignedMax signed_max(int n, const float* x) {
  SignedMax m;
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > m.amax) {
      m.amax = a;
      m.max = x[i];
    }
  }
  return m;
}

// Coordinate descent on integer levels L (in [lo, hi]) for y = s * L with the
// least-squares s = sumlx / suml2: for each element, the level that is best
// for the scale fitted to the other elements replaces its level when it
// raises sumlx^2 / suml2 (i.e. lowers the weighted squared error). sumlx and
// suml2 are kept up to date.
template <class Level>
void refine_levels(int n, const float* x, const float* w, Level* L, int lo, int hi, double& sumlx, double& suml2) {
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const double wx = static_cast<double>(w[i]) * x[i];
      double slx = sumlx - wx * L[i];
      double sl2 = suml2 - static_cast<double>(w[i]) * L[i] * L[i];
      if (slx == 0 || sl2 <= 0) continue;
      const int l = std::clamp(nearest_int(static_cast<float>(x[i] * sl2 / slx)), lo, hi);
      if (l == L[i]) continue;
      slx += wx * l;
      sl2 += static_cast<double>(w[i]) * l * l;
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<Level>(l);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (!changed) break;
  }
}

// The inner loops of the searches have AVX2 versions (see search_simd.h).
double lane_sum(const double p[4]) { return (p[0] + p[1]) + (p[2] + p[3]); }

// Symmetric levels for one inverse scale: L_i = clamp(round(iscale x_i)) and
// the least-squares sums sumlx = Σ w x L, suml2 = Σ w L^2 (n % 4 == 0).
void symmetric_fit_scalar(int n, int nmax, const float* x, const float* w, float iscale, int8_t* L, double& sumlx,
                          double& suml2) {
  double plx[4] = {}, pl2[4] = {};
  for (int i = 0; i < n; i += 4)
    for (int c = 0; c < 4; ++c) {
      const int l = std::clamp(nearest_int(iscale * x[i + c]), -nmax, nmax - 1);
      L[i + c] = static_cast<int8_t>(l);
      const double wl = static_cast<double>(w[i + c]) * l;
      plx[c] += wl * x[i + c];
      pl2[c] += wl * l;
    }
  sumlx = lane_sum(plx);
  suml2 = lane_sum(pl2);
}

// Affine levels for one inverse scale from the offset lo: L_i = clamp(round(
// iscale (x_i - lo)), 0, nmax), and Σ w L, Σ w L^2, Σ w x L.
struct AffineSums {
  double l, l2, xl;
};
AffineSums affine_fit_scalar(int n, int nmax, const float* x, const float* w, float lo, float iscale, uint8_t* L) {
  double pl[4] = {}, pl2[4] = {}, pxl[4] = {};
  for (int i = 0; i < n; i += 4)
    for (int c = 0; c < 4; ++c) {
      const int l = std::clamp(nearest_int(iscale * (x[i + c] - lo)), 0, nmax);
      L[i + c] = static_cast<uint8_t>(l);
      const double wl = static_cast<double>(w[i + c]) * l;
      pl[c] += wl;
      pl2[c] += wl * l;
      pxl[c] += wl * x[i + c];
    }
  return {lane_sum(pl), lane_sum(pl2), lane_sum(pxl)};
}

#ifdef QLENS_SEARCH_X86
// nearest_int of four floats (the same clamp and rounding trick).
__attribute__((target("avx2"))) __m128i nearest_int4(__m128 v) {
  const __m128 limit = _mm_set1_ps(4194303.0f);
  v = _mm_min_ps(_mm_max_ps(v, _mm_sub_ps(_mm_setzero_ps(), limit)), limit);
  const __m128i bits = _mm_castps_si128(_mm_add_ps(v, _mm_set1_ps(12582912.0f)));
  return _mm_sub_epi32(_mm_and_si128(bits, _mm_set1_epi32(0x007fffff)), _mm_set1_epi32(0x00400000));
}

__attribute__((target("avx2"))) void store_levels4(__m128i l, int8_t* out) {
  const __m128i bytes = _mm_packs_epi16(_mm_packs_epi32(l, l), _mm_setzero_si128());
  const int32_t v = _mm_cvtsi128_si32(bytes);
  std::memcpy(out, &v, 4);
}

__attribute__((target("avx2"))) void symmetric_fit_avx2(int n, int nmax, const float* x, const float* w, float iscale,
                                                        int8_t* L, double& sumlx, double& suml2) {
  const __m128 vis = _mm_set1_ps(iscale);
  const __m128i lo = _mm_set1_epi32(-nmax), hi = _mm_set1_epi32(nmax - 1);
  __m256d plx = _mm256_setzero_pd(), pl2 = _mm256_setzero_pd();
  for (int i = 0; i < n; i += 4) {
    const __m128 xv = _mm_loadu_ps(x + i);
    const __m128i l = _mm_min_epi32(_mm_max_epi32(nearest_int4(_mm_mul_ps(vis, xv)), lo), hi);
    store_levels4(l, L + i);
    const __m256d ld = _mm256_cvtepi32_pd(l);
    const __m256d wl = _mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(w + i)), ld);
    plx = _mm256_add_pd(plx, _mm256_mul_pd(wl, _mm256_cvtps_pd(xv)));
    pl2 = _mm256_add_pd(pl2, _mm256_mul_pd(wl, ld));
  }
  double a[4], b[4];
  _mm256_storeu_pd(a, plx);
  _mm256_storeu_pd(b, pl2);
  sumlx = lane_sum(a);
  suml2 = lane_sum(b);
}

__attribute__((target("avx2"))) AffineSums affine_fit_avx2(int n, int nmax, const float* x, const float* w, float lo,
                                                           float iscale, uint8_t* L) {
  const __m128 vis = _mm_set1_ps(iscale), vlo = _mm_set1_ps(lo);
  const __m128i zero = _mm_setzero_si128(), top = _mm_set1_epi32(nmax);
  __m256d pl = _mm256_setzero_pd(), pl2 = _mm256_setzero_pd(), pxl = _mm256_setzero_pd();
  for (int i = 0; i < n; i += 4) {
    const __m128 xv = _mm_loadu_ps(x + i);
    const __m128i l = _mm_min_epi32(_mm_max_epi32(nearest_int4(_mm_mul_ps(vis, _mm_sub_ps(xv, vlo))), zero), top);
    store_levels4(l, reinterpret_cast<int8_t*>(L + i));  // 0..nmax <= 127: the same bytes
    const __m256d ld = _mm256_cvtepi32_pd(l);
    const __m256d wl = _mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(w + i)), ld);
    pl = _mm256_add_pd(pl, wl);
    pl2 = _mm256_add_pd(pl2, _mm256_mul_pd(wl, ld));
    pxl = _mm256_add_pd(pxl, _mm256_mul_pd(wl, _mm256_cvtps_pd(xv)));
  }
  double a[4], b[4], c[4];
  _mm256_storeu_pd(a, pl);
  _mm256_storeu_pd(b, pl2);
  _mm256_storeu_pd(c, pxl);
  return {lane_sum(a), lane_sum(b), lane_sum(c)};
}
#endif

void symmetric_fit(int n, int nmax, const float* x, const float* w, float iscale, int8_t* L, double& sumlx,
                   double& suml2) {
#ifdef QLENS_SEARCH_X86
  if (use_search_simd()) return symmetric_fit_avx2(n, nmax, x, w, iscale, L, sumlx, suml2);
#endif
  symmetric_fit_scalar(n, nmax, x, w, iscale, L, sumlx, suml2);
}

AffineSums affine_fit(int n, int nmax, const float* x, const float* w, float lo, float iscale, uint8_t* L) {
#ifdef QLENS_SEARCH_X86
  if (use_search_simd()) return affine_fit_avx2(n, nmax, x, w, lo, iscale, L);
#endif
  return affine_fit_scalar(n, nmax, x, w, lo, iscale, L);
}

// Weighted error of y = scale * L + offset (offset <= 0), squared or absolute.
double affine_error(int n, const float* x, const float* w, const uint8_t* L, float scale, float offset, bool use_mad) {
  double e = 0;
  for (int i = 0; i < n; ++i) {
    const double diff = static_cast<double>(scale) * L[i] + offset - x[i];
    e += w[i] * (use_mad ? std::fabs(diff) : diff * diff);
  }
  return e;
}

// The IQ4_NL level nearest v: the levels are sorted, so v takes level j once
// it reaches the midpoint of levels j - 1 and j (compared at twice the scale,
// exactly); ties go up.
inline int iq4_index(float v) {
  const float v2 = v + v;
  int idx = 0;
  for (int step = 8; step > 0; step >>= 1) {
    const int j = idx + step;
    if (v2 >= static_cast<float>(kIq4nlValues[j - 1] + kIq4nlValues[j])) idx = j;
  }
  return idx;
}

}  // namespace

int nearest_int(float v) {
  // Adding 1.5 * 2^23 leaves the rounded integer in the low mantissa bits
  // (round to nearest even, the FPU's mode); exact for |v| < 2^22.
  constexpr float kLimit = 4194303.0f;
  v = std::clamp(v, -kLimit, kLimit);
  const float shifted = v + 12582912.0f;
  return static_cast<int>(std::bit_cast<uint32_t>(shifted) & 0x007fffffu) - 0x00400000;
}

float make_qx_quants(int n, int nmax, const float* x, const float* w, int8_t* L) {
  assert(n <= kMaxGroup);
  const SignedMax m = signed_max(n, x);
  if (m.amax < kGroupEps) {
    std::memset(L, 0, n);
    return 0;
  }
  double sumlx, suml2;
  symmetric_fit(n, nmax, x, w, -nmax / m.max, L, sumlx, suml2);
  double scale = suml2 > 0 ? sumlx / suml2 : 0;
  double best = scale * sumlx;  // sumlx^2 / suml2: the error reduction of the fit
  int8_t trial[kMaxGroup];
  for (int k = -9; k <= 9; ++k) {
    if (k == 0) continue;
    symmetric_fit(n, nmax, x, w, -(nmax + 0.1f * k) / m.max, trial, sumlx, suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      std::memcpy(L, trial, n);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return static_cast<float>(scale);
}

float make_qx_quants_refined(int n, int nmax, const float* x, const float* w, int8_t* L) {
  const SignedMax m = signed_max(n, x);
  if (m.amax < kGroupEps) {
    std::memset(L, 0, n);
    return 0;
  }
  double sumlx, suml2;
  symmetric_fit(n, nmax, x, w, -nmax / m.max, L, sumlx, suml2);
  // ggml's make_q3_quants only refines when the fitted scale is positive; here
  // either sign is refined (the criterion sumlx^2 / suml2 does not care).
  refine_levels(n, x, w, L, -nmax, nmax - 1, sumlx, suml2);
  return suml2 > 0 ? static_cast<float>(sumlx / suml2) : 0.0f;
}

float make_qkx_quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out, float rmin,
                      float rdelta, int nstep, bool use_mad) {
  assert(n <= kMaxGroup && n % 4 == 0);
  float lo = x[0], hi = x[0];
  double sum_w = 0, sum_x = 0, sum_x2 = 0;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += w[i];
    sum_x += static_cast<double>(w[i]) * x[i];
    sum_x2 += static_cast<double>(w[i]) * x[i] * x[i];
  }
  lo = std::min(lo, 0.0f);        // the offset is never positive: 0 stays representable
  if (!(hi - lo >= kGroupEps)) {  // constant group (or NaN): all on the offset
    std::memset(L, 0, n);
    *min_out = -lo;
    return 0;
  }
  const float range = hi - lo;
  float iscale = nmax / range;
  float scale = 1 / iscale;
  float offset = lo;
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(std::clamp(nearest_int(iscale * (x[i] - lo)), 0, nmax));
  double best = affine_error(n, x, w, L, scale, offset, use_mad);
  uint8_t trial[kMaxGroup];
  for (int k = 0; k <= nstep; ++k) {
    // Unlike ggml, the grid stays anchored at the data minimum (ggml moves it to
    // the best offset found so far).
    iscale = (rmin + rdelta * k + nmax) / range;
    const AffineSums sums = affine_fit(n, nmax, x, w, lo, iscale, trial);
    const double sum_l = sums.l, sum_l2 = sums.l2, sum_xl = sums.xl;
    const double det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    double s = (sum_w * sum_xl - sum_x * sum_l) / det;
    double o = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (o > 0) {  // keep the offset non-positive: refit the scale alone
      o = 0;
      s = sum_xl / sum_l2;
    }
    // The squared error follows from the sums; the absolute one needs a pass.
    const double e = use_mad ? affine_error(n, x, w, trial, static_cast<float>(s), static_cast<float>(o), true)
                             : sum_x2 - 2 * s * sum_xl - 2 * o * sum_x + s * s * sum_l2 + 2 * s * o * sum_l + o * o * sum_w;
    if (e < best) {
      std::memcpy(L, trial, n);
      best = e;
      scale = static_cast<float>(s);
      offset = static_cast<float>(o);
    }
  }
  *min_out = -offset;
  return scale;
}

float make_qp_quants(int n, int nmax, const float* x, const float* w, uint8_t* L) {
  assert(n <= kMaxGroup);
  float max = 0;
  for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
  if (max < kGroupEps) {
    std::memset(L, 0, n);
    return 0;
  }
  auto error_at = [&](float iscale) {
    const double s = 1.0 / iscale;
    double e = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * x[i]), 0, nmax);
      const double diff = x[i] - s * l;
      e += w[i] * diff * diff;
    }
    return e;
  };
  float iscale = nmax / max;
  double best = error_at(iscale);
  for (int k = -4; k <= 4; ++k) {
    if (k == 0) continue;
    const float trial = (nmax + 0.1f * k) / max;
    const double e = error_at(trial);
    if (e < best) {
      best = e;
      iscale = trial;
    }
  }
  double sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * x[i]), 0, nmax);
    L[i] = static_cast<uint8_t>(l);
    sumlx += static_cast<double>(w[i]) * x[i] * l;
    suml2 += static_cast<double>(w[i]) * l * l;
  }
  refine_levels(n, x, w, L, 0, nmax, sumlx, suml2);
  return suml2 > 0 ? static_cast<float>(sumlx / suml2) : 0.0f;
}

int iq4_nearest_index(float v) { return iq4_index(v); }

float iq4_search(int n, const float* x, const float* w, uint8_t* L, int ntry) {
  assert(n <= kMaxGroup && n % 4 == 0);
  const SignedMax m = signed_max(n, x);
  if (m.amax < kGroupEps) {
    std::fill(L, L + n, static_cast<uint8_t>(iq4_index(0)));
    return 0;
  }
  uint8_t trial[kMaxGroup];
  auto fit = [&](float iscale, uint8_t* out, double& sumqx, double& sumq2) {
    double pqx[4] = {}, pq2[4] = {};  // independent partial sums (see make_qkx_quants)
    for (int i = 0; i < n; i += 4) {
      for (int c = 0; c < 4; ++c) {
        const int l = iq4_index(iscale * x[i + c]);
        out[i + c] = static_cast<uint8_t>(l);
        const double wq = static_cast<double>(w[i + c]) * kIq4nlValues[l];
        pqx[c] += wq * x[i + c];
        pq2[c] += wq * kIq4nlValues[l];
      }
    }
    sumqx = (pqx[0] + pqx[1]) + (pqx[2] + pqx[3]);
    sumq2 = (pq2[0] + pq2[1]) + (pq2[2] + pq2[3]);
  };
  // First the scale that puts the value of largest magnitude at +127 (beyond
  // the top level 113, so it is clipped there), then those that put it at
  // -127 + k (the extreme level, which only the negative side has).
  double sumqx, sumq2;
  fit(-kIq4nlValues[0] / m.max, L, sumqx, sumq2);
  double scale = sumq2 > 0 ? sumqx / sumq2 : 0;
  double best = scale * sumqx;
  for (int k = -ntry; k <= ntry; ++k) {
    fit((k + kIq4nlValues[0]) / m.max, trial, sumqx, sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      std::memcpy(L, trial, n);
      scale = sumqx / sumq2;
      best = scale * sumqx;
    }
  }
  return static_cast<float>(scale);
}

}  // namespace qlens::quant::kq

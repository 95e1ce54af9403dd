// AVX2 row kernels of the taps: the statistics and error taps eight floats a
// step, sums in double (4 lanes), min/max in float (the order of the
// additions differs from the scalar kernels; tests compare both with the
// reference); the column sums sixteen columns a step over all the rows, each
// column in row order.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/taps.h"

namespace qlens::cpu {

namespace {

double hsum(__m256d v) {
  const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

double hmax(__m256d v) {
  const __m128d m = _mm_max_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_max_sd(m, _mm_unpackhi_pd(m, m)));
}

float hmin_ps(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_min_ss(m, _mm_shuffle_ps(m, m, 1)));
}

float hmax_ps(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}

}  // namespace

bool stats_row_avx2(const float* x, int64_t n, NodeStats& s) {
  __m256d sum0 = _mm256_setzero_pd(), sum1 = _mm256_setzero_pd();
  __m256d sq0 = _mm256_setzero_pd(), sq1 = _mm256_setzero_pd();
  __m256 lo = _mm256_set1_ps(x[0]), hi = lo;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    lo = _mm256_min_ps(lo, v);
    hi = _mm256_max_ps(hi, v);
    const __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    const __m256d b = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    sum0 = _mm256_add_pd(sum0, a);
    sum1 = _mm256_add_pd(sum1, b);
    sq0 = _mm256_fmadd_pd(a, a, sq0);
    sq1 = _mm256_fmadd_pd(b, b, sq1);
  }
  double sum = hsum(_mm256_add_pd(sum0, sum1)), sq = hsum(_mm256_add_pd(sq0, sq1));
  float mn = hmin_ps(lo), mx = hmax_ps(hi);
  for (; i < n; ++i) {
    sum += x[i];
    sq += static_cast<double>(x[i]) * x[i];
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
  }
  return finish_stats_row(sum, sq, mn, mx, n, s);
}

void column_sum_sq_rows_avx2(const float* x, int64_t rows, size_t row_bytes, int64_t n, double* acc) {
  auto row = [&](int64_t r) { return reinterpret_cast<const float*>(reinterpret_cast<const char*>(x) + r * row_bytes); };
  int64_t k = 0;
  // 16 columns in four registers over all the rows, then 4, then one.
  for (; k + 16 <= n; k += 16) {
    __m256d a0 = _mm256_loadu_pd(acc + k), a1 = _mm256_loadu_pd(acc + k + 4);
    __m256d a2 = _mm256_loadu_pd(acc + k + 8), a3 = _mm256_loadu_pd(acc + k + 12);
    for (int64_t r = 0; r < rows; ++r) {
      const float* p = row(r) + k;
      const __m256 lo = _mm256_loadu_ps(p), hi = _mm256_loadu_ps(p + 8);
      const __m256d v0 = _mm256_cvtps_pd(_mm256_castps256_ps128(lo)), v1 = _mm256_cvtps_pd(_mm256_extractf128_ps(lo, 1));
      const __m256d v2 = _mm256_cvtps_pd(_mm256_castps256_ps128(hi)), v3 = _mm256_cvtps_pd(_mm256_extractf128_ps(hi, 1));
      a0 = _mm256_fmadd_pd(v0, v0, a0);
      a1 = _mm256_fmadd_pd(v1, v1, a1);
      a2 = _mm256_fmadd_pd(v2, v2, a2);
      a3 = _mm256_fmadd_pd(v3, v3, a3);
    }
    _mm256_storeu_pd(acc + k, a0);
    _mm256_storeu_pd(acc + k + 4, a1);
    _mm256_storeu_pd(acc + k + 8, a2);
    _mm256_storeu_pd(acc + k + 12, a3);
  }
  for (; k + 4 <= n; k += 4) {
    __m256d a = _mm256_loadu_pd(acc + k);
    for (int64_t r = 0; r < rows; ++r) {
      const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(row(r) + k));
      a = _mm256_fmadd_pd(v, v, a);
    }
    _mm256_storeu_pd(acc + k, a);
  }
  for (; k < n; ++k)
    for (int64_t r = 0; r < rows; ++r) acc[k] += static_cast<double>(row(r)[k]) * row(r)[k];
}

bool error_row_avx2(const float* a, const float* b, int64_t n, ErrorStats& e) {
  __m256d diff = _mm256_setzero_pd(), aa = _mm256_setzero_pd(), bb = _mm256_setzero_pd(),
          ab = _mm256_setzero_pd(), mx = _mm256_setzero_pd();
  const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
  int64_t i = 0;
  auto step = [&](__m128 xa, __m128 xb) {
    const __m256d da = _mm256_cvtps_pd(xa), db = _mm256_cvtps_pd(xb);
    const __m256d d = _mm256_sub_pd(da, db);
    diff = _mm256_fmadd_pd(d, d, diff);
    aa = _mm256_fmadd_pd(da, da, aa);
    bb = _mm256_fmadd_pd(db, db, bb);
    ab = _mm256_fmadd_pd(da, db, ab);
    mx = _mm256_max_pd(mx, _mm256_and_pd(d, abs_mask));
  };
  for (; i + 4 <= n; i += 4) step(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i));
  double sd = hsum(diff), sa = hsum(aa), sb = hsum(bb), sab = hsum(ab), m = hmax(mx);
  for (; i < n; ++i) {
    const double da = a[i], db = b[i], d = da - db;
    sd += d * d;
    sa += da * da;
    sb += db * db;
    sab += da * db;
    m = std::max(m, std::fabs(d));
  }
  // A NaN difference is lost by max_pd; the sums carry it, and the row is redone.
  return finish_error_row(sd, sa, sb, sab, m, n, e);
}

}  // namespace qlens::cpu

// Rope: rotary position embedding of the first n_dims of each row.
//   theta_i = pos * freq_scale * freq_base^(-2i / n_dims), i < n_dims / 2
// Normal mode rotates pairs (x[2i], x[2i+1]), NeoX mode (x[i], x[i + n_dims/2]);
// dims from n_dims on are copied. Angles and their sines and cosines are
// computed in double once per token, the rotation in float.
#include <cmath>

#include "backend/cpu/ops.h"

namespace qlens::cpu {

void op_rope(const Tensor& d, const KernelCtx& c) {
  const Tensor& a = *d.src[0];
  const Tensor& pos = *d.src[1];
  const int64_t n_dims = d.params[0];
  const bool neox = d.params[1] == static_cast<int32_t>(RopeMode::NeoX);
  const double freq_base = d.param_f(2);
  const double freq_scale = d.param_f(3);
  const int64_t half = n_dims / 2;
  const int64_t n = a.ne[0];
  const int64_t xs = static_cast<int64_t>(a.nb[0] / sizeof(float));

  double* inv_freq = reinterpret_cast<double*>(c.scratch);
  float* cos_t = reinterpret_cast<float*>(inv_freq + half);
  float* sin_t = cos_t + half;
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = std::pow(freq_base, -2.0 * static_cast<double>(i) / static_cast<double>(n_dims));

  int64_t r0, r1;
  split_range(a.nrows(), c.ith, c.nth, &r0, &r1);
  int64_t cached_token = -1;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    row_coords(a, r, &i1, &i2, &i3);
    if (i2 != cached_token) {
      cached_token = i2;
      const double p = static_cast<double>(*reinterpret_cast<const int32_t*>(pos.at(i2)));
      for (int64_t i = 0; i < half; ++i) {
        const double theta = p * freq_scale * inv_freq[i];
        cos_t[i] = static_cast<float>(std::cos(theta));
        sin_t[i] = static_cast<float>(std::sin(theta));
      }
    }
    const float* x = reinterpret_cast<const float*>(a.at(0, i1, i2, i3));
    float* y = reinterpret_cast<float*>(d.at(0, i1, i2, i3));
    // Element indices of pair i: (i0, i0 + step).
    const int64_t step = neox ? half : 1;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t i0 = neox ? i : 2 * i;
      const float x0 = x[i0 * xs], x1 = x[(i0 + step) * xs];
      y[i0] = x0 * cos_t[i] - x1 * sin_t[i];
      y[i0 + step] = x0 * sin_t[i] + x1 * cos_t[i];
    }
    for (int64_t i = n_dims; i < n; ++i) y[i] = x[i * xs];
  }
}

}  // namespace qlens::cpu

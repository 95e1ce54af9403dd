// RmsNorm: y = x / sqrt(mean(x^2) + eps) over each row; L2Norm: x / max(|x|, eps).
#include <algorithm>
#include <cmath>

#include "backend/cpu/ops.h"

namespace qlens::cpu {

namespace {

// Each row times scale(sum of its squares in double, row length, eps) in
// float, as ggml computes both norms: the last bit of the scale decides
// activation codes downstream (see Q8Format::activation). Threads take the
// element-wise ops' pieces (a generated token's single row is shared, each
// thread summing the whole row), so an element-wise node after a norm needs
// no barrier before it.
template <class Scale>
void scale_rows_by_norm(const Tensor& d, const KernelCtx& c, Scale scale) {
  const Tensor& a = *d.src[0];
  const float eps = d.param_f(0);
  const int64_t n = a.ne[0];
  float* buf = reinterpret_cast<float*>(c.scratch);
  const char* row = nullptr;  // the row whose scale s is
  const float* x = nullptr;
  float s = 0;
  for_each_piece(a, c, [&](int64_t i1, int64_t i2, int64_t i3, int64_t e0, int64_t e1) {
    const char* p = a.at(0, i1, i2, i3);
    if (p != row) {
      row = p;
      x = reinterpret_cast<const float*>(p);
      if (!f32_rows(a)) {
        for (int64_t i = 0; i < n; ++i) buf[i] = *reinterpret_cast<const float*>(p + i * a.nb[0]);
        x = buf;
      }
      s = scale(c.vec->sum_sq(n, x), n, eps);
    }
    c.vec->scale(e1 - e0, reinterpret_cast<float*>(d.at(0, i1, i2, i3)) + e0, x + e0, s);
  });
}

}  // namespace

void op_rms_norm(const Tensor& d, const KernelCtx& c) {
  scale_rows_by_norm(d, c, [](double ss, int64_t n, float eps) {
    const float mean = n > 0 ? static_cast<float>(ss / static_cast<double>(n)) : 0.0f;
    return 1.0f / std::sqrt(mean + eps);
  });
}

void op_l2_norm(const Tensor& d, const KernelCtx& c) {
  scale_rows_by_norm(d, c, [](double ss, int64_t, float eps) {
    return 1.0f / std::max(static_cast<float>(std::sqrt(ss)), eps);
  });
}

}  // namespace qlens::cpu

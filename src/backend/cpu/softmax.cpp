// SoftMax: softmax over each row of a*scale + mask, with a head's sink as one
// more logit. Rows whose entries are all -inf (fully masked) give zeros
// rather than NaN.
#include <algorithm>
#include <cmath>

#include "backend/cpu/ops.h"

namespace qlens::cpu {

namespace {

// The exponentials of a row need only go as far as its last entry above
// -inf (a causal mask leaves half of a prompt's scores at -inf): the length
// up to that entry, rounded up to a multiple of 64 so that every exp_sum
// kernel (at most 2 x 16 lanes a step) assigns the entries it still sees to
// the same lanes as over the whole row. The entries past it are exp(-inf) =
// 0 either way, and adding zeros leaves the sums as they were: the results
// are the whole row's, bit for bit (Ops.SoftMaxCausalRowsEqualWholeRows).
int64_t exp_length(const float* y, int64_t n) {
  int64_t len = n;
  while (len > 0 && y[len - 1] == -INFINITY) --len;
  constexpr int64_t kLaneBlock = 64;
  return std::min(n, (len + kLaneBlock - 1) / kLaneBlock * kLaneBlock);
}

}  // namespace

void op_soft_max(const Tensor& d, const KernelCtx& c) {
  const Tensor& a = *d.src[0];
  const Tensor* mask = d.src[1];
  const float scale = d.param_f(0);
  const float* sinks = d.src[2] ? reinterpret_cast<const float*>(d.src[2]->data) : nullptr;
  const int64_t n = a.ne[0];
  float* buf = reinterpret_cast<float*>(c.scratch);  // a gathered mask row
  int64_t r0, r1;
  split_range(a.nrows(), c.ith, c.nth, &r0, &r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    row_coords(a, r, &i1, &i2, &i3);
    float* y = reinterpret_cast<float*>(d.at(0, i1, i2, i3));
    const char* p = a.at(0, i1, i2, i3);
    const float* x = reinterpret_cast<const float*>(p);
    if (!f32_rows(a)) {  // gathered into y, scaled there
      for (int64_t i = 0; i < n; ++i) y[i] = *reinterpret_cast<const float*>(p + i * a.nb[0]);
      x = y;
    }
    const float* m = nullptr;
    if (mask) {
      // Mask rows follow a's dim 1 and are broadcast over dims 2 and 3.
      const char* mp = mask->at(0, i1, i2 % mask->ne[2], i3 % mask->ne[3]);
      m = reinterpret_cast<const float*>(mp);
      if (!f32_rows(*mask)) {
        for (int64_t i = 0; i < n; ++i) buf[i] = *reinterpret_cast<const float*>(mp + i * mask->nb[0]);
        m = buf;
      }
    }
    // One pass: scale, mask and max; a head's sink is one more logit (ggml's
    // order: the sink's term added to the row's sum last).
    const float sink = sinks ? sinks[i2] : -INFINITY;
    const float mx = std::max(c.vec->scale_add_max(n, y, x, scale, m), sink);
    if (mx == -INFINITY) {
      for (int64_t i = 0; i < n; ++i) y[i] = 0.0f;
      continue;
    }
    const int64_t len = mask ? exp_length(y, n) : n;
    double sum = c.vec->exp_sum(len, y, y, mx);
    if (sinks) sum += static_cast<double>(std::exp(sink - mx));
    c.vec->scale(len, y, y, static_cast<float>(1.0 / sum));
    std::fill(y + len, y + n, 0.0f);
  }
}

}  // namespace qlens::cpu

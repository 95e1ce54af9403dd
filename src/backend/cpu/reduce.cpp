// Per-row reductions: SumRows (in double, as ggml's ggml_vec_sum_f32) and
// ArgSort (the router's top-k).
#include <algorithm>

#include "backend/cpu/ops.h"

namespace qlens::cpu {

namespace {

template <class F>
void for_my_rows(const Tensor& a, const KernelCtx& c, F&& f) {
  int64_t r0, r1;
  split_range(a.nrows(), c.ith, c.nth, &r0, &r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    row_coords(a, r, &i1, &i2, &i3);
    f(i1, i2, i3);
  }
}

float element(const Tensor& a, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return *reinterpret_cast<const float*>(a.at(i0, i1, i2, i3));
}

}  // namespace

void op_sum_rows(const Tensor& d, const KernelCtx& c) {
  const Tensor& a = *d.src[0];
  for_my_rows(a, c, [&](int64_t i1, int64_t i2, int64_t i3) {
    double s = 0;
    for (int64_t i = 0; i < a.ne[0]; ++i) s += element(a, i, i1, i2, i3);
    *reinterpret_cast<float*>(d.at(0, i1, i2, i3)) = static_cast<float>(s);
  });
}

void op_argsort(const Tensor& d, const KernelCtx& c) {
  const Tensor& a = *d.src[0];
  for_my_rows(a, c, [&](int64_t i1, int64_t i2, int64_t i3) {
    int32_t* out = reinterpret_cast<int32_t*>(d.at(0, i1, i2, i3));
    for (int64_t i = 0; i < a.ne[0]; ++i) out[i] = static_cast<int32_t>(i);
    // std::sort with ggml's comparison, so that ties come out in its order.
    std::sort(out, out + a.ne[0], [&](int32_t p, int32_t q) {
      return element(a, p, i1, i2, i3) > element(a, q, i1, i2, i3);
    });
  });
}

}  // namespace qlens::cpu

// Add, Mul, Div (with broadcasting of b), Scale, Clamp, Silu, Gelu.
#include <algorithm>

#include "backend/cpu/ops.h"

namespace qlens::cpu {

namespace {

// Row (i1, i2, i3) of t as contiguous floats: the row itself when it is, else
// gathered into buf.
const float* f32_row(const Tensor& t, int64_t i1, int64_t i2, int64_t i3, float* buf) {
  const char* p = t.at(0, i1, i2, i3);
  if (f32_rows(t)) return reinterpret_cast<const float*>(p);
  for (int64_t i = 0; i < t.ne[0]; ++i) buf[i] = *reinterpret_cast<const float*>(p + i * t.nb[0]);
  return buf;
}

using BinaryFn = void (*)(int64_t n, float* z, const float* x, const float* y);

void binary(const Tensor& d, const KernelCtx& c, BinaryFn f) {
  const Tensor& a = *d.src[0];
  const Tensor& b = *d.src[1];
  const int64_t n = a.ne[0];
  float* abuf = reinterpret_cast<float*>(c.scratch);
  float* bbuf = abuf + n;  // b's row, repeated to length n when b is narrower
  int64_t r0, r1;
  split_range(a.nrows(), c.ith, c.nth, &r0, &r1);
  const float* brow = nullptr;
  const char* bsrc_cached = nullptr;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    row_coords(a, r, &i1, &i2, &i3);
    const int64_t j1 = i1 % b.ne[1], j2 = i2 % b.ne[2], j3 = i3 % b.ne[3];
    const char* bsrc = b.at(0, j1, j2, j3);
    if (bsrc != bsrc_cached) {
      bsrc_cached = bsrc;
      if (b.ne[0] == n && f32_rows(b)) {
        brow = reinterpret_cast<const float*>(bsrc);
      } else {
        for (int64_t i = 0; i < n; ++i)
          bbuf[i] = *reinterpret_cast<const float*>(bsrc + (i % b.ne[0]) * b.nb[0]);
        brow = bbuf;
      }
    }
    f(n, reinterpret_cast<float*>(d.at(0, i1, i2, i3)), f32_row(a, i1, i2, i3, abuf), brow);
  }
}

// Applies f(n, dst_row, src_row) to each row of the node's first source.
template <class F>
void unary(const Tensor& d, const KernelCtx& c, F&& f) {
  const Tensor& a = *d.src[0];
  float* abuf = reinterpret_cast<float*>(c.scratch);
  int64_t r0, r1;
  split_range(a.nrows(), c.ith, c.nth, &r0, &r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    row_coords(a, r, &i1, &i2, &i3);
    f(a.ne[0], reinterpret_cast<float*>(d.at(0, i1, i2, i3)), f32_row(a, i1, i2, i3, abuf));
  }
}

}  // namespace

void op_add(const Tensor& node, const KernelCtx& c) { binary(node, c, c.vec->add); }
void op_mul(const Tensor& node, const KernelCtx& c) { binary(node, c, c.vec->mul); }

void op_div(const Tensor& node, const KernelCtx& c) {
  binary(node, c, [](int64_t n, float* z, const float* x, const float* y) {
    for (int64_t i = 0; i < n; ++i) z[i] = x[i] / y[i];
  });
}

void op_clamp(const Tensor& node, const KernelCtx& c) {
  const float lo = node.param_f(0), hi = node.param_f(1);
  unary(node, c, [&](int64_t n, float* y, const float* x) {
    // ggml's MAX(MIN(x, hi), lo): NaN becomes hi.
    for (int64_t i = 0; i < n; ++i) {
      const float m = x[i] < hi ? x[i] : hi;
      y[i] = m > lo ? m : lo;
    }
  });
}

void op_scale(const Tensor& node, const KernelCtx& c) {
  const float s = node.param_f(0);
  unary(node, c, [&](int64_t n, float* y, const float* x) { c.vec->scale(n, y, x, s); });
}

void op_silu(const Tensor& node, const KernelCtx& c) {
  unary(node, c, [&](int64_t n, float* y, const float* x) { c.vec->silu(n, y, x); });
}

void op_gelu(const Tensor& node, const KernelCtx& c) {
  const auto gelu = ggml_rounding() ? c.vec->gelu_f16 : c.vec->gelu;
  unary(node, c, [&](int64_t n, float* y, const float* x) { gelu(n, y, x); });
}

}  // namespace qlens::cpu

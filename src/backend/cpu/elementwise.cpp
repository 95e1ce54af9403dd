// The element-wise ops: Add, Mul, Div (with broadcasting of b), Scale, Clamp,
// the activations (Silu, Gelu, Sigmoid), the gated units (Glu) and AddId.
#include <algorithm>
#include <cmath>

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

// f(n, z, x, y): n elements of the result z from a's x and b's y.
template <class F>
void binary(const Tensor& d, const KernelCtx& c, F&& f) {
  const Tensor& a = *d.src[0];
  const Tensor& b = *d.src[1];
  const int64_t n = a.ne[0];
  float* abuf = reinterpret_cast<float*>(c.scratch);
  float* bbuf = abuf + n;  // b's row, repeated to length n when b is narrower
  const float* brow = nullptr;
  const char* bsrc_cached = nullptr;
  for_each_piece(a, c, [&](int64_t i1, int64_t i2, int64_t i3, int64_t e0, int64_t e1) {
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
    f(e1 - e0, reinterpret_cast<float*>(d.at(0, i1, i2, i3)) + e0, f32_row(a, i1, i2, i3, abuf) + e0, brow + e0);
  });
}

// Applies f(n, dst_row, src_row) to each row of the node's first source.
template <class F>
void unary(const Tensor& d, const KernelCtx& c, F&& f) {
  const Tensor& a = *d.src[0];
  float* abuf = reinterpret_cast<float*>(c.scratch);
  for_each_piece(a, c, [&](int64_t i1, int64_t i2, int64_t i3, int64_t e0, int64_t e1) {
    f(e1 - e0, reinterpret_cast<float*>(d.at(0, i1, i2, i3)) + e0, f32_row(a, i1, i2, i3, abuf) + e0);
  });
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
  // ggml computes GELU through its F16 table; without its roundings, exactly.
  const auto gelu = c.options->ggml_rounding ? c.vec->gelu_f16 : c.vec->gelu;
  unary(node, c, [&](int64_t n, float* y, const float* x) { gelu(n, y, x); });
}

void op_glu(const Tensor& node, const KernelCtx& c) {
  if (static_cast<GluKind>(node.params[0]) == GluKind::SwigluOai) {
    const float alpha = node.param_f(2), limit = node.param_f(3);
    // ggml's float operations, in its order.
    binary(node, c, [=](int64_t n, float* z, const float* x, const float* y) {
      for (int64_t i = 0; i < n; ++i) {
        const float g = std::min(x[i], limit);
        const float v = std::clamp(y[i], -limit, limit);
        z[i] = g / (1.0f + std::exp(alpha * -g)) * (v + 1.0f);
      }
    });
    return;
  }
  binary(node, c, [&](int64_t n, float* z, const float* x, const float* y) {
    c.vec->silu(n, z, x);
    c.vec->mul(n, z, z, y);
  });
}

void op_add_id(const Tensor& node, const KernelCtx& c) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const Tensor& ids = *node.src[2];
  float* abuf = reinterpret_cast<float*>(c.scratch);
  float* bbuf = abuf + a.ne[0];
  for_each_piece(a, c, [&](int64_t i1, int64_t i2, int64_t i3, int64_t e0, int64_t e1) {
    // ids come from the router's top-k: within b's rows (the op's reference checks).
    const int32_t id = *reinterpret_cast<const int32_t*>(ids.at(i1, i2));
    c.vec->add(e1 - e0, reinterpret_cast<float*>(node.at(0, i1, i2, i3)) + e0, f32_row(a, i1, i2, i3, abuf) + e0,
               f32_row(b, id, 0, 0, bbuf) + e0);
  });
}

void op_softplus(const Tensor& node, const KernelCtx& c) {
  unary(node, c, [](int64_t n, float* y, const float* x) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 20.0f ? x[i] : std::log(1.0f + std::exp(x[i]));  // ggml's
  });
}

void op_fill(const Tensor& node, const KernelCtx& c) {
  const float v = node.param_f(0);
  unary(node, c, [v](int64_t n, float* y, const float*) { std::fill(y, y + n, v); });
}

void op_sigmoid(const Tensor& node, const KernelCtx& c) {
  unary(node, c, [](int64_t n, float* y, const float* x) {
    for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
  });
}

void op_tanh(const Tensor& node, const KernelCtx& c) {
  unary(node, c, [](int64_t n, float* y, const float* x) {
    for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
  });
}

}  // namespace qlens::cpu

// Scalar row primitives: the portable path, always compiled.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/vec.h"
#include "qlens/backend.h"

namespace qlens::cpu {

const float* fp16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = fp16_to_fp32(static_cast<uint16_t>(i));
    return t;
  }();
  return table.data();
}

const float* gelu_f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) {
      const float x = fp16_to_fp32(static_cast<uint16_t>(i));
      const float g = 0.5f * x * (1.0f + std::tanh(kGeluSqrt2OverPi * x * std::fma(kGeluCoefA * x, x, 1.0f)));
      t[i] = fp16_to_fp32(fp32_to_fp16(g));
    }
    return t;
  }();
  return table.data();
}

namespace {

void f16_to_f32_scalar(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  const float* table = fp16_table();
  for (int64_t i = 0; i < n; ++i) y[i] = table[x[i]];
}

void add_scalar(int64_t n, float* z, const float* x, const float* y) {
  for (int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
}
void mul_scalar(int64_t n, float* z, const float* x, const float* y) {
  for (int64_t i = 0; i < n; ++i) z[i] = x[i] * y[i];
}
void scale_scalar(int64_t n, float* y, const float* x, float s) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
}
void silu_scalar(int64_t n, float* y, const float* x) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}
// 0.5 x (1 + tanh u) written as x / (1 + e^-2u): the same function, but
// 1 + tanh u cancels for negative x, where it is all of the result (at x = -5
// it is 9.2e-8, below float's spacing near 1).
void gelu_scalar(int64_t n, float* y, const float* x) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] < kGeluLowest ? kGeluLowest : x[i];  // NaN passes
    const float u = kGeluSqrt2OverPi * v * (1.0f + kGeluCoefA * v * v);
    y[i] = v / (1.0f + std::exp(-2.0f * u));
  }
}
void gelu_f16_scalar(int64_t n, float* y, const float* x) {
  const float* table = gelu_f16_table();
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = v <= -10.0f ? 0.0f : v >= 10.0f ? v : table[fp32_to_fp16(v)];
  }
}
double sum_sq_scalar(int64_t n, const float* x) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i] * x[i]);
  return s;
}
float max_scalar(int64_t n, const float* x) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}
float scale_add_max_scalar(int64_t n, float* y, const float* x, float s, const float* m) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    volatile float product = x[i] * s;  // rounded on its own, never fused into the sum
    const float v = m ? product + m[i] : product;
    y[i] = v;
    mx = v > mx ? v : mx;
  }
  return mx;
}
double exp_sum_scalar(int64_t n, float* y, const float* x, float m) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = std::exp(x[i] - m);
    s += y[i];
  }
  return s;
}

double exp_sum_f64_scalar(int64_t n, const float* x, double m) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - m);
  return s;
}

VecOps make_scalar() {
  VecOps v{};
  for (uint32_t t = 0; t < kDTypeCount; ++t) {
    if (const TypeTraits* tt = find_type_traits(t)) {
      v.to_float[t] = tt->to_float;
      v.from_float[t] = tt->from_float;
    }
  }
  v.to_float[static_cast<int>(DType::F16)] = f16_to_f32_scalar;
  v.add = add_scalar;
  v.mul = mul_scalar;
  v.scale = scale_scalar;
  v.silu = silu_scalar;
  v.gelu = gelu_scalar;
  v.gelu_f16 = gelu_f16_scalar;
  v.sum_sq = sum_sq_scalar;
  v.max = max_scalar;
  v.scale_add_max = scale_add_max_scalar;
  v.exp_sum = exp_sum_scalar;
  v.exp_sum_f64 = exp_sum_f64_scalar;
  return v;
}

// A SIMD table with the scalar entries filled in where it has none.
VecOps merged(const VecOps* simd, const VecOps& scalar) {
  if (!simd) return scalar;
  VecOps v = *simd;
  for (uint32_t t = 0; t < kDTypeCount; ++t) {
    if (!v.to_float[t]) v.to_float[t] = scalar.to_float[t];
    if (!v.from_float[t]) v.from_float[t] = scalar.from_float[t];
  }
  return v;
}

}  // namespace

const VecOps& vec_ops(Isa isa) {
  static const VecOps scalar = make_scalar();
  static const VecOps avx2 = merged(isa_supported(Isa::Avx2) ? vec_ops_avx2() : nullptr, scalar);
  static const VecOps avx512 = merged(isa_supported(Isa::Avx512) ? vec_ops_avx512() : nullptr, avx2);
  switch (isa) {
    case Isa::Scalar: return scalar;
    case Isa::Avx2: return avx2;
    case Isa::Avx512: return avx512;
  }
  return scalar;
}

}  // namespace qlens::cpu

namespace qlens {

float host_row_max(std::span<const float> x) {
  return cpu::vec_ops(cpu::best_isa()).max(static_cast<int64_t>(x.size()), x.data());
}

double host_exp_sum(std::span<const float> x, double m) {
  return cpu::vec_ops(cpu::best_isa()).exp_sum_f64(static_cast<int64_t>(x.size()), x.data(), m);
}

}  // namespace qlens

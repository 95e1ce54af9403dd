// Row primitives written once over a SIMD wrapper V (see simd.h). Included only
// by the per-instruction-set files; everything has internal linkage, and no
// inline function of the standard library is called (its out-of-line copy,
// compiled with these flags, could be the one the linker keeps for all code).
#pragma once

#include <math.h>

#include <cstdint>

#include "backend/cpu/simd.h"
#include "backend/cpu/simd_act_quant.h"
#include "backend/cpu/vec.h"
#include "qlens/types.h"

namespace qlens::cpu {
namespace {

// e^x to about 2 ulp (Cephes' expf: x = n ln2 + r, |r| <= ln2/2, degree-7
// polynomial for e^r, scaled by 2^n). Underflows to exactly 0 below -87.33
// (so exp(-inf) == 0) and overflows to +inf above 88.37 (a little early: the
// largest float is e^88.72), so 1 / (1 + e^-x) saturates to exactly 0 and 1.
template <class V>
typename V::R vexp(typename V::R x) {
  using R = typename V::R;
  const R lo = V::set1(-87.33654475f);
  const R hi = V::set1(88.3762626647949f);
  const R xc = V::max(lo, V::min(hi, x));  // min and max return their second operand for NaN: NaN stays NaN
  const R n = V::round(V::mul(xc, V::set1(1.44269504088896341f)));
  R r = V::fnma(n, V::set1(0.693359375f), xc);
  r = V::fnma(n, V::set1(-2.12194440e-4f), r);
  R p = V::set1(1.9875691500e-4f);
  p = V::fma(p, r, V::set1(1.3981999507e-3f));
  p = V::fma(p, r, V::set1(8.3334519073e-3f));
  p = V::fma(p, r, V::set1(4.1665795894e-2f));
  p = V::fma(p, r, V::set1(1.6666665459e-1f));
  p = V::fma(p, r, V::set1(5.0000001201e-1f));
  p = V::fma(p, V::mul(r, r), V::add(r, V::set1(1.0f)));
  return V::inf_above(V::zero_below(V::mul(p, V::pow2(n)), x, lo), x, hi);
}

template <class V>
void v_f16_to_f32(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) V::store(y + i, V::load_f16(x + i));
  for (; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}
template <class V>
void v_f32_to_f16(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) V::store_f16(y + i, V::load(x + i));
  for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}
template <class V>
void v_bf16_to_f32(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) V::store(y + i, V::load_bf16(x + i));
  for (; i < n; ++i) y[i] = bf16_to_fp32(x[i]);
}
template <class V>
void v_f32_to_bf16(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) V::store_bf16(y + i, V::load(x + i));
  for (; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

template <class V>
void v_add(int64_t n, float* z, const float* x, const float* y) {
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) V::store(z + i, V::add(V::load(x + i), V::load(y + i)));
  for (; i < n; ++i) z[i] = x[i] + y[i];
}
template <class V>
void v_mul(int64_t n, float* z, const float* x, const float* y) {
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) V::store(z + i, V::mul(V::load(x + i), V::load(y + i)));
  for (; i < n; ++i) z[i] = x[i] * y[i];
}
template <class V>
void v_scale(int64_t n, float* y, const float* x, float s) {
  const typename V::R vs = V::set1(s);
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) V::store(y + i, V::mul(V::load(x + i), vs));
  for (; i < n; ++i) y[i] = x[i] * s;
}
template <class V>
void v_silu(int64_t n, float* y, const float* x) {
  const typename V::R one = V::set1(1.0f);
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) {
    const typename V::R v = V::load(x + i);
    V::store(y + i, V::div(v, V::add(one, vexp<V>(V::sub(V::zero(), v)))));
  }
  for (; i < n; ++i) y[i] = x[i] / (1.0f + expf(-x[i]));
}
// As gelu_scalar. Large |x| needs no care beyond the clamp: vexp saturates to
// 0 and inf, so the quotient is x or -0.
template <class V>
void v_gelu(int64_t n, float* y, const float* x) {
  using R = typename V::R;
  const R one = V::set1(1.0f), lowest = V::set1(kGeluLowest);
  const R c = V::set1(kGeluSqrt2OverPi), a = V::set1(kGeluCoefA), minus2 = V::set1(-2.0f);
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) {
    const R v = V::max(lowest, V::load(x + i));  // max returns its second operand for NaN
    const R u = V::mul(V::mul(c, v), V::fma(V::mul(a, v), v, one));
    V::store(y + i, V::div(v, V::add(one, vexp<V>(V::mul(minus2, u)))));
  }
  for (; i < n; ++i) {
    const float v = x[i] < kGeluLowest ? kGeluLowest : x[i];
    const float u = kGeluSqrt2OverPi * v * (1.0f + kGeluCoefA * v * v);
    y[i] = v / (1.0f + expf(-2.0f * u));
  }
}
// As gelu_f16_scalar, converting to F16 with the vector instruction.
template <class V>
void v_gelu_f16(int64_t n, float* y, const float* x) {
  const float* table = gelu_f16_table();
  uint16_t h[V::W];
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) {
    V::store_f16(h, V::load(x + i));
    for (int k = 0; k < V::W; ++k) {
      const float v = x[i + k];
      y[i + k] = v <= -10.0f ? 0.0f : v >= 10.0f ? v : table[h[k]];
    }
  }
  for (; i < n; ++i) {
    const float v = x[i];
    y[i] = v <= -10.0f ? 0.0f : v >= 10.0f ? v : table[fp32_to_fp16(v)];
  }
}
template <class V>
double v_sum_sq(int64_t n, const float* x) {
  // Squares in float, sums in double (as sum_sq_scalar, to rounding of the
  // double sums): the compiler widens the lanes of `acc`.
  double acc[V::W] = {};
  float sq[V::W];
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) {
    const typename V::R v = V::load(x + i);
    V::store(sq, V::mul(v, v));
    for (int k = 0; k < V::W; ++k) acc[k] += static_cast<double>(sq[k]);
  }
  double s = 0;
  for (int k = 0; k < V::W; ++k) s += acc[k];
  for (; i < n; ++i) s += static_cast<double>(x[i] * x[i]);
  return s;
}
template <class V>
float v_max(int64_t n, const float* x) {
  float m = -__builtin_inff();
  int64_t i = 0;
  if (n >= V::W) {
    typename V::R vm = V::load(x);
    for (i = V::W; i + V::W <= n; i += V::W) vm = V::max(vm, V::load(x + i));
    m = V::hmax(vm);
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}
// The value as it is, opaque to the compiler: a product passed through it is
// not fused into the following addition (one rounding instead of two).
template <class R>
inline R unfused(R v) {
  asm("" : "+v"(v));
  return v;
}
template <class V>
float v_scale_add_max(int64_t n, float* y, const float* x, float s, const float* m) {
  using R = typename V::R;
  const R vs = V::set1(s);
  float mx = -__builtin_inff();
  int64_t i = 0;
  if (n >= V::W) {
    R vm = V::set1(mx);
    for (; i + V::W <= n; i += V::W) {
      R v = unfused(V::mul(V::load(x + i), vs));
      if (m) v = V::add(v, V::load(m + i));
      V::store(y + i, v);
      vm = V::max(vm, v);
    }
    mx = V::hmax(vm);
  }
  for (; i < n; ++i) {
    float v = unfused(x[i] * s);
    if (m) v += m[i];
    y[i] = v;
    mx = v > mx ? v : mx;
  }
  return mx;
}
// Each lane sums the entries a multiple of 2 W apart from its first (2 W at
// most 32, AVX-512). SoftMax stops a row at a multiple of 64 past its last
// entry above -inf on that assumption; Ops.SoftMaxCausalRowsEqualWholeRows
// holds the two to it.
template <class V>
double v_exp_sum(int64_t n, float* y, const float* x, float m) {
  using R = typename V::R;
  const R vm = V::set1(m);
  R s0 = V::zero(), s1 = V::zero();
  int64_t i = 0;
  for (; i + 2 * V::W <= n; i += 2 * V::W) {
    const R e0 = vexp<V>(V::sub(V::load(x + i), vm));
    const R e1 = vexp<V>(V::sub(V::load(x + i + V::W), vm));
    V::store(y + i, e0);
    V::store(y + i + V::W, e1);
    s0 = V::add(s0, e0);
    s1 = V::add(s1, e1);
  }
  for (; i + V::W <= n; i += V::W) {
    const R e = vexp<V>(V::sub(V::load(x + i), vm));
    V::store(y + i, e);
    s0 = V::add(s0, e);
  }
  double s = V::hsum(V::add(s0, s1));
  for (; i < n; ++i) {
    y[i] = expf(x[i] - m);
    s += y[i];
  }
  return s;
}

template <class V>
VecOps make_vec_ops() {
  VecOps v{};
  v.to_float[static_cast<int>(DType::F16)] = v_f16_to_f32<V>;
  v.from_float[static_cast<int>(DType::F16)] = v_f32_to_f16<V>;
  v.to_float[static_cast<int>(DType::BF16)] = v_bf16_to_f32<V>;
  v.from_float[static_cast<int>(DType::BF16)] = v_f32_to_bf16<V>;
  v.add = v_add<V>;
  v.mul = v_mul<V>;
  v.scale = v_scale<V>;
  v.silu = v_silu<V>;
  v.gelu = v_gelu<V>;
  v.gelu_f16 = v_gelu_f16<V>;
  v.sum_sq = v_sum_sq<V>;
  v.max = v_max<V>;
  v.scale_add_max = v_scale_add_max<V>;
  v.exp_sum = v_exp_sum<V>;
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  add_act_quantizers(v);  // 256-bit integer code, for both AVX2 and AVX-512
#endif
  return v;
}

}  // namespace
}  // namespace qlens::cpu

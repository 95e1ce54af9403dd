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

// Double-precision lanes as GCC vector types, half a float vector wide
// (vector_size as bytes): the wrappers are float-only, and this one function
// needs nothing but arithmetic, compares and bit casts.
template <int N>
struct F64Lanes {
  typedef double D __attribute__((vector_size(8 * N)));
  typedef int64_t I __attribute__((vector_size(8 * N)));   // a compare's result
  typedef uint64_t U __attribute__((vector_size(8 * N)));  // bits, wrapping
  typedef float F __attribute__((vector_size(4 * N)));
};
// e^d in each lane to about 1 ulp of double, for d <= 709: d = k ln2 + r with
// |r| <= ln2/2 (k rounded by adding 1.5 * 2^52, which leaves k in the low
// bits; ln2 in two parts, the first with 21 trailing zero bits, so k ln2_hi
// is exact), e^r by its Taylor series to r^13 (truncation below 5e-18), times
// 2^k built in the exponent bits. Below -708 the result is 0 (2^k would be
// subnormal); -inf gives 0 and NaN stays NaN.
template <class D, class I, class U>
[[gnu::always_inline]] inline D exp_f64_lanes(D d) {
  const D shifter = D{} + 0x1.8p52;
  const D t = d * 1.4426950408889634 + shifter;
  const D k = t - shifter;
  D r = d - k * 6.93147180369123816490e-01;
  r = r - k * 1.90821492927058770002e-10;
  // 1/12! ... 1/0!, Horner's order (one chain, about 1 ulp; an even/odd split
  // over r^2 was 8% faster and 1.4 ulp).
  constexpr double kInvFactorial[] = {1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
                                      1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,     1.0 / 120.0,
                                      1.0 / 24.0,        1.0 / 6.0,        0.5,             1.0,
                                      1.0};
  D p = D{} + 1.0 / 6227020800.0;  // 1/13!
  for (double c : kInvFactorial) p = p * r + c;
  const U scale = ((U)t - (U)shifter + 1023) << 52;
  const I below = d < -708.0;
  return (D)((U)(p * (D)scale) & ~(U)below);
}
// Sum of e^(x_i - m) in double, for x_i - m <= 709 (m the max: a
// log-softmax's normalizer): exp_f64_lanes over two accumulators of W/2
// lanes; the tail is padded with -inf, whose terms are 0.
template <class V>
double v_exp_sum_f64(int64_t n, const float* x, double m) {
  using L = F64Lanes<V::W / 2>;
  using D = typename L::D;
  using I = typename L::I;
  using U = typename L::U;
  using F = typename L::F;
  constexpr int N = V::W / 2;
  D s0 = {}, s1 = {};
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    F f0, f1;
    __builtin_memcpy(&f0, x + i, sizeof f0);
    __builtin_memcpy(&f1, x + i + N, sizeof f1);
    s0 += exp_f64_lanes<D, I, U>(__builtin_convertvector(f0, D) - m);
    s1 += exp_f64_lanes<D, I, U>(__builtin_convertvector(f1, D) - m);
  }
  for (; i < n; i += N) {
    F f = F{} - __builtin_inff();
    for (int j = 0; j < N && i + j < n; ++j) f[j] = x[i + j];
    s0 += exp_f64_lanes<D, I, U>(__builtin_convertvector(f, D) - m);
  }
  s0 += s1;
  double s = 0;
  for (int j = 0; j < N; ++j) s += s0[j];
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
  v.exp_sum_f64 = v_exp_sum_f64<V>;
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  add_act_quantizers(v);  // 256-bit integer code, for both AVX2 and AVX-512
#endif
  return v;
}

}  // namespace
}  // namespace qlens::cpu

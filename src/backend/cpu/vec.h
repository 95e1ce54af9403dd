// Row primitives of the CPU backend: conversions and the vector loops the
// element-wise, normalization and softmax kernels are built from.
//
// One table per instruction set; vec_ops(Isa::Scalar) is plain C++ and the
// reference the SIMD tables are tested against. Functions take unaligned
// pointers and any length n >= 0. In-place use (y == x) is allowed.
#pragma once

#include <cstdint>

#include "backend/cpu/isa.h"
#include "qlens/types.h"

namespace qlens::cpu {

//
// Tables are plain aggregates (no member initializers, no std:: members): they
// are built in files compiled for different instruction sets, and an inline
// constructor emitted there could be the copy the linker keeps for scalar code.
// Build them value-initialized (`VecOps v{};`).
struct VecOps {
  // Row conversions by type (nullptr: use type_traits(type).to_float/from_float).
  ToFloatFn to_float[kDTypeCount];
  FromFloatFn from_float[kDTypeCount];

  void (*add)(int64_t n, float* z, const float* x, const float* y);  // z = x + y
  void (*mul)(int64_t n, float* z, const float* x, const float* y);  // z = x * y
  void (*scale)(int64_t n, float* y, const float* x, float s);       // y = x * s
  void (*silu)(int64_t n, float* y, const float* x);                 // y = x / (1 + e^-x)
  // y = 0.5 x (1 + tanh u) = x / (1 + e^-2u), u = sqrt(2/pi) x (1 + 0.044715 x^2)
  void (*gelu)(int64_t n, float* y, const float* x);
  // ggml's CPU GELU (GGML_GELU_FP16): x rounded to F16 and looked up in
  // gelu_f16_table(); 0 for x <= -10, x for x >= 10.
  void (*gelu_f16)(int64_t n, float* y, const float* x);
  double (*sum_sq)(int64_t n, const float* x);                       // sum of float(x^2), in double
  float (*max)(int64_t n, const float* x);                           // -inf when n == 0
  // y = x * s + m (m null: + 0), the product rounded before the sum as two
  // passes would round it; returns the max of y (-inf when n == 0). Softmax's
  // first pass.
  float (*scale_add_max)(int64_t n, float* y, const float* x, float s, const float* m);
  // y = exp(x - m); returns the sum of y.
  double (*exp_sum)(int64_t n, float* y, const float* x, float m);
  // Sum of e^(x - m) in double, each term to about 1 ulp of double (the
  // scalar entry calls exp), for x - m <= 709; the SIMD entries count terms
  // below e^-708 as 0.
  // A log-softmax's normalizer over a vocabulary (tools' log_sum_exp).
  double (*exp_sum_f64)(int64_t n, const float* x, double m);
};

// GELU's constants (floats, as in ggml).
constexpr float kGeluSqrt2OverPi = 0.79788456080286535588f;
constexpr float kGeluCoefA = 0.044715f;
// Below this the result is -0 in float anyway (e^-2u overflows from x = -10.06),
// so clamping x there changes nothing finite and keeps -inf from giving inf/inf.
constexpr float kGeluLowest = -20.0f;

// Every F16 value as a float, indexed by its bits (the scalar kernels' F16
// conversion: exact, one load per element).
const float* fp16_table();

// ggml's GELU table, indexed by the bits of an F16 x: the tanh form computed
// in float as ggml's compiler computes it (1 + 0.044715 x^2 as one fma),
// rounded to F16, as a float.
const float* gelu_f16_table();

// The table for `isa` (which must be supported and compiled in).
const VecOps& vec_ops(Isa isa);

// Per-instruction-set tables (nullptr when not compiled in).
const VecOps* vec_ops_avx2();
const VecOps* vec_ops_avx512();

}  // namespace qlens::cpu

// The element-wise ops: Add, Mul, Div (b broadcast over a), Scale, Clamp,
// the activations (Silu, Gelu, Sigmoid, Tanh, Softplus) and Glu's variants (Swiglu,
// SwigluOai); one thread per element of the result; every tensor may have
// any strides. vulkan.cmake builds one variant per OP_<NAME> tested below
// (shader "<name>": the op's ggml name in lower case; Glu's, its variant's).
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer B { float b[]; };
layout(binding = 2) writeonly buffer D { float d[]; };

// Strides and offsets in floats.
layout(push_constant) uniform Params {
  uvec4 ne;  // of a and the result
  uvec4 a_nb;
  uvec4 b_ne;
  uvec4 b_nb;
  uvec4 d_nb;
  uint a_off, b_off, d_off;
  float param, param2;  // Scale: the factor; Clamp: lo, hi; SwigluOai: alpha, limit
} p;

void main() {
  const uint e = group_index() * 256u + gl_LocalInvocationID.x;
  if (e >= p.ne.x * p.ne.y * p.ne.z * p.ne.w) return;
  const uvec4 i = unravel(e, p.ne);
  const float x = a[p.a_off + offset4(i, p.a_nb)];
#if defined(OP_ADD)
  const float y = x + b[p.b_off + offset4(i % p.b_ne, p.b_nb)];
#elif defined(OP_MUL)
  const float y = x * b[p.b_off + offset4(i % p.b_ne, p.b_nb)];
#elif defined(OP_DIV)
  const float y = x / b[p.b_off + offset4(i % p.b_ne, p.b_nb)];
#elif defined(OP_SCALE)
  const float y = x * p.param;
#elif defined(OP_FILL)
  const float y = p.param;
#elif defined(OP_CLAMP)
  // As ggml's MAX(MIN(x, hi), lo), comparisons rather than min/max (whose
  // result GLSL leaves undefined for NaN): NaN becomes hi.
  const float m = x < p.param2 ? x : p.param2;
  const float y = m > p.param ? m : p.param;
#elif defined(OP_SILU)
  const float y = x / (1.0 + exp(-x));
#elif defined(OP_GELU)
  // As the CPU's gelu: 0.5 x (1 + tanh u) = x / (1 + e^-2u), which does not
  // cancel for negative x. The exponent is clamped so that no inf reaches the
  // division and the divisor stays below 2^126, where GLSL bounds its error;
  // past the clamp the result is x, or within 4e-37 of 0.
  const float v = max(x, -20.0);
  const float u = 0.79788456080286535588 * v * (1.0 + 0.044715 * v * v);
  const float y = v / (1.0 + exp(clamp(-2.0 * u, -87.0, 87.0)));
#elif defined(OP_SIGMOID)
  const float y = 1.0 / (1.0 + exp(-x));
#elif defined(OP_TANH)
  // GLSL's tanh may overflow in e^2x past |x| ~ 44: 1 - 2 / (e^2x + 1) with
  // the exponent clamped is exact to float there.
  const float y = 1.0 - 2.0 / (exp(clamp(2.0 * x, -87.0, 87.0)) + 1.0);
#elif defined(OP_SOFTPLUS)
  const float y = x > 20.0 ? x : log(1.0 + exp(x));  // ggml's
#elif defined(OP_SWIGLU)
  // Glu's variants: x the gate, b the value (the same shape).
  const float y = x / (1.0 + exp(-x)) * b[p.b_off + offset4(i % p.b_ne, p.b_nb)];
#elif defined(OP_SWIGLU_OAI)
  // param: alpha, param2: limit (ggml's order of operations).
  const float g = min(x, p.param2);
  const float v = clamp(b[p.b_off + offset4(i % p.b_ne, p.b_nb)], -p.param2, p.param2);
  const float y = g / (1.0 + exp(p.param * -g)) * (v + 1.0);
#endif
  d[p.d_off + offset4(i, p.d_nb)] = y;
}

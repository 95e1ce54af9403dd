// RmsNorm: one workgroup per row; x / sqrt(mean(x^2) + eps); variant
// L2_NORM: x / max(sqrt(sum(x^2)), eps). Variant ROW_PER_INVOCATION (CPU
// devices, see soft_max.comp): one invocation per row.
#version 450
#include "common.glsl"

#if defined(ROW_PER_INVOCATION)
const uint WG = 1u;  // invocations per row
layout(local_size_x = 64) in;
#else
const uint WG = 128u;
layout(local_size_x = 128) in;
#endif

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) writeonly buffer D { float d[]; };

layout(push_constant) uniform Params {
  uvec4 ne;
  uvec4 a_nb;  // floats
  uvec4 d_nb;  // floats
  uint a_off, d_off;
  float eps;
} p;

#if !defined(ROW_PER_INVOCATION)
shared float partial[WG];
#endif

void main() {
#if defined(ROW_PER_INVOCATION)
  const uint r = group_index() * 64u + gl_LocalInvocationID.x, t = 0u;
#else
  const uint r = group_index(), t = gl_LocalInvocationID.x;
#endif
  if (r >= p.ne.y * p.ne.z * p.ne.w) return;
  const uvec4 row = uvec4(0u, r % p.ne.y, (r / p.ne.y) % p.ne.z, r / (p.ne.y * p.ne.z));
  const uint a0 = p.a_off + offset4(row, p.a_nb), d0 = p.d_off + offset4(row, p.d_nb);
  float sum = 0.0;
  for (uint i = t; i < p.ne.x; i += WG) {
    const float x = a[a0 + i * p.a_nb.x];
    sum += x * x;
  }
#if !defined(ROW_PER_INVOCATION)
  partial[t] = sum;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (t < s) partial[t] += partial[t + s];
    barrier();
  }
  sum = partial[0];
#endif
#if defined(L2_NORM)
  const float scale = 1.0 / max(sqrt(sum), p.eps);
#else
  const float scale = inversesqrt(sum / float(p.ne.x) + p.eps);
#endif
  for (uint i = t; i < p.ne.x; i += WG) d[d0 + i * p.d_nb.x] = a[a0 + i * p.a_nb.x] * scale;
}

// RmsNorm: one workgroup per row; x / sqrt(mean(x^2) + eps).
#version 450
#include "common.glsl"

layout(local_size_x = 128) in;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) writeonly buffer D { float d[]; };

layout(push_constant) uniform Params {
  uvec4 ne;
  uvec4 a_nb;  // floats
  uvec4 d_nb;  // floats
  uint a_off, d_off;
  float eps;
} p;

shared float partial[128];

void main() {
  const uint r = group_index();
  if (r >= p.ne.y * p.ne.z * p.ne.w) return;
  const uvec4 row = uvec4(0u, r % p.ne.y, (r / p.ne.y) % p.ne.z, r / (p.ne.y * p.ne.z));
  const uint a0 = p.a_off + offset4(row, p.a_nb), d0 = p.d_off + offset4(row, p.d_nb);
  const uint t = gl_LocalInvocationID.x;
  float sum = 0.0;
  for (uint i = t; i < p.ne.x; i += 128u) {
    const float x = a[a0 + i * p.a_nb.x];
    sum += x * x;
  }
  partial[t] = sum;
  barrier();
  for (uint s = 64u; s > 0u; s >>= 1) {
    if (t < s) partial[t] += partial[t + s];
    barrier();
  }
  const float scale = inversesqrt(partial[0] / float(p.ne.x) + p.eps);
  for (uint i = t; i < p.ne.x; i += 128u) d[d0 + i * p.d_nb.x] = a[a0 + i * p.a_nb.x] * scale;
}

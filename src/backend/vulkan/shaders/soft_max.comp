// SoftMax over dim 0 of a*scale + mask: one workgroup per row. The mask
// [K, >=N, M2, M3] is broadcast over dims 2 and 3; a fully masked row gives
// zeros.
#version 450
#include "common.glsl"

layout(local_size_x = 128) in;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer M { float mask[]; };
layout(binding = 2) writeonly buffer D { float d[]; };

layout(push_constant) uniform Params {
  uvec4 ne;
  uvec4 a_nb;  // floats
  uvec4 d_nb;
  uvec4 m_ne;
  uvec4 m_nb;
  uint a_off, d_off, m_off, has_mask;
  float scale;
} p;

shared float partial[128];

const float NEG_INF = -1.0 / 0.0;  // -Inf

uvec4 row;
uint a0, m0;

float value(uint i) {
  float x = a[a0 + i * p.a_nb.x] * p.scale;
  if (p.has_mask != 0u) x += mask[m0 + i * p.m_nb.x];
  return x;
}

void main() {
  const uint r = group_index();
  if (r >= p.ne.y * p.ne.z * p.ne.w) return;
  row = uvec4(0u, r % p.ne.y, (r / p.ne.y) % p.ne.z, r / (p.ne.y * p.ne.z));
  a0 = p.a_off + offset4(row, p.a_nb);
  m0 = p.m_off + offset4(uvec4(0u, row.y, row.z % p.m_ne.z, row.w % p.m_ne.w), p.m_nb);
  const uint d0 = p.d_off + offset4(row, p.d_nb);
  const uint t = gl_LocalInvocationID.x;

  float mx = NEG_INF;
  for (uint i = t; i < p.ne.x; i += 128u) mx = max(mx, value(i));
  partial[t] = mx;
  barrier();
  for (uint s = 64u; s > 0u; s >>= 1) {
    if (t < s) partial[t] = max(partial[t], partial[t + s]);
    barrier();
  }
  mx = partial[0];
  barrier();

  float sum = 0.0;
  if (mx != NEG_INF)
    for (uint i = t; i < p.ne.x; i += 128u) sum += exp(value(i) - mx);
  partial[t] = sum;
  barrier();
  for (uint s = 64u; s > 0u; s >>= 1) {
    if (t < s) partial[t] += partial[t + s];
    barrier();
  }
  sum = partial[0];
  const float inv = sum > 0.0 ? 1.0 / sum : 0.0;
  for (uint i = t; i < p.ne.x; i += 128u) d[d0 + i * p.d_nb.x] = mx == NEG_INF ? 0.0 : exp(value(i) - mx) * inv;
}

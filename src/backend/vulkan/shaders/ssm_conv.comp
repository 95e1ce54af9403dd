// SsmConv: the short causal convolution, one thread per output element
// y[i, t, s] = sum_k sx[t + k, i, s] c[k, i] (a float sum in tap order);
// every tensor may have any strides.
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0) readonly buffer X { float sx[]; };
layout(binding = 1) readonly buffer C { float c[]; };
layout(binding = 2) writeonly buffer D { float d[]; };

// Strides and offsets in floats.
layout(push_constant) uniform Params {
  uvec4 ne;  // of the result [d, T, S, 1]
  uvec4 x_nb;
  uvec4 c_nb;
  uvec4 d_nb;
  uint x_off, c_off, d_off, taps;
} p;

void main() {
  const uint e = group_index() * 256u + gl_LocalInvocationID.x;
  if (e >= p.ne.x * p.ne.y * p.ne.z * p.ne.w) return;
  const uvec4 i = unravel(e, p.ne);  // (channel, token, sequence)
  const uint x0 = p.x_off + offset4(uvec4(i.y, i.x, i.z, 0u), p.x_nb);
  const uint c0 = p.c_off + i.x * p.c_nb.y;
  float sum = 0.0;
  for (uint k = 0u; k < p.taps; ++k) sum += sx[x0 + k * p.x_nb.x] * c[c0 + k * p.c_nb.x];
  d[p.d_off + offset4(i, p.d_nb)] = sum;
}

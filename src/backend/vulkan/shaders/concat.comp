// Concat: a and b joined along dimension p.dim, one thread per element of
// the result; every tensor may have any strides.
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer B { float b[]; };
layout(binding = 2) writeonly buffer D { float d[]; };

// Strides and offsets in floats.
layout(push_constant) uniform Params {
  uvec4 ne;  // of the result
  uvec4 a_ne;
  uvec4 a_nb;
  uvec4 b_nb;
  uvec4 d_nb;
  uint a_off, b_off, d_off, dim;
} p;

void main() {
  const uint e = group_index() * 256u + gl_LocalInvocationID.x;
  if (e >= p.ne.x * p.ne.y * p.ne.z * p.ne.w) return;
  const uvec4 i = unravel(e, p.ne);
  float y;
  if (i[p.dim] < p.a_ne[p.dim]) {
    y = a[p.a_off + offset4(i, p.a_nb)];
  } else {
    uvec4 j = i;
    j[p.dim] -= p.a_ne[p.dim];
    y = b[p.b_off + offset4(j, p.b_nb)];
  }
  d[p.d_off + offset4(i, p.d_nb)] = y;
}

// AddId: row (i1, i2) of a plus row ids[i1, i2] of b, one thread per element
// of the result; every tensor may have any strides. An id outside b's rows
// (the router's top-k never gives one) reads nothing and gives NaN.
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer B { float b[]; };
layout(binding = 2) readonly buffer Ids { int ids[]; };
layout(binding = 3) writeonly buffer D { float d[]; };

// Strides and offsets in elements.
layout(push_constant) uniform Params {
  uvec4 ne;  // of a and the result
  uvec4 a_nb;
  uvec4 d_nb;
  uint b_nb0, b_nb1, ids_nb0, ids_nb1, n_rows_b;
  uint a_off, b_off, ids_off, d_off;
} p;

void main() {
  const uint e = group_index() * 256u + gl_LocalInvocationID.x;
  if (e >= p.ne.x * p.ne.y * p.ne.z * p.ne.w) return;
  const uvec4 i = unravel(e, p.ne);
  const int id = ids[p.ids_off + i.y * p.ids_nb0 + i.z * p.ids_nb1];
  const float x = a[p.a_off + offset4(i, p.a_nb)];
  const float y = id >= 0 && uint(id) < p.n_rows_b ? b[p.b_off + i.x * p.b_nb0 + uint(id) * p.b_nb1] : 0.0 / 0.0;
  d[p.d_off + offset4(i, p.d_nb)] = x + y;
}

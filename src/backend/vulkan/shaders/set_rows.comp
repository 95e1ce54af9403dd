// SetRows: a with rows replaced, one thread per element of the result: the
// last row u of b whose id ids[u, i2 % ids_ne1, i3 % ids_ne2] names the
// element's row, else a's element (so no two threads write one element and
// duplicate ids resolve as the CPU's rows do). Every tensor may have any
// strides.
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
  uvec4 b_nb;
  uvec4 d_nb;
  uvec4 ids_ne;  // rows of b, then the broadcast dims
  uvec4 ids_nb;
  uint a_off, b_off, ids_off, d_off;
} p;

void main() {
  const uint e = group_index() * 256u + gl_LocalInvocationID.x;
  if (e >= p.ne.x * p.ne.y * p.ne.z * p.ne.w) return;
  const uvec4 i = unravel(e, p.ne);
  const uint id_base = p.ids_off + (i.z % p.ids_ne.y) * p.ids_nb.y + (i.w % p.ids_ne.z) * p.ids_nb.z;
  int from = -1;
  for (uint u = 0u; u < p.ids_ne.x; ++u)
    if (ids[id_base + u * p.ids_nb.x] == int(i.y)) from = int(u);
  float y;
  if (from < 0) {
    y = a[p.a_off + offset4(i, p.a_nb)];
  } else {
    y = b[p.b_off + offset4(uvec4(i.x, uint(from), i.z, i.w), p.b_nb)];
  }
  d[p.d_off + offset4(i, p.d_nb)] = y;
}

// ArgSort (argsort_desc): each row's element indices by decreasing value, ties
// in index order (a stable sort, as the CPU's for the router's short rows).
// One invocation per element: its rank is the number of elements of its row
// that go before it, and it writes its index there, so no barrier is needed;
// the cost grows with the square of the row length (the host sends long rows
// to the CPU). NaN goes after every number (the ranks stay a permutation).
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) writeonly buffer D { int d[]; };

layout(push_constant) uniform Params {
  uvec4 ne;
  uvec4 a_nb;  // floats
  uvec4 d_nb;  // ints
  uint a_off, d_off;
} p;

// Whether y (element j) goes before x (element i) in decreasing order.
bool goes_before(float y, uint j, float x, uint i) {
  if (isnan(y)) return isnan(x) && j < i;
  if (isnan(x)) return true;
  return y > x || (y == x && j < i);
}

void main() {
  const uint e = group_index() * 256u + gl_LocalInvocationID.x;
  if (e >= p.ne.x * p.ne.y * p.ne.z * p.ne.w) return;
  const uvec4 i = unravel(e, p.ne);
  const uint row = p.a_off + offset4(uvec4(0u, i.yzw), p.a_nb);
  const float x = a[row + i.x * p.a_nb.x];
  uint rank = 0u;
  for (uint j = 0u; j < p.ne.x; ++j) rank += goes_before(a[row + j * p.a_nb.x], j, x, i.x) ? 1u : 0u;
  d[p.d_off + offset4(uvec4(rank, i.yzw), p.d_nb)] = int(i.x);
}

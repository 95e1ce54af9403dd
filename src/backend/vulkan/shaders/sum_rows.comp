// SumRows: each row's sum, one invocation per row, in order, in double as
// the CPU sums (variant SUM_F64, on devices with shaderFloat64), else float.
#version 450
#include "common.glsl"

layout(local_size_x = 64) in;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) writeonly buffer D { float d[]; };

layout(push_constant) uniform Params {
  uvec4 ne;    // of the source
  uvec4 a_nb;  // floats
  uvec4 d_nb;  // floats
  uint a_off, d_off;
} p;

#if defined(SUM_F64)
#define SUM double
#else
#define SUM float
#endif

void main() {
  const uint r = group_index() * 64u + gl_LocalInvocationID.x;
  if (r >= p.ne.y * p.ne.z * p.ne.w) return;
  const uvec4 i = unravel(r * p.ne.x, p.ne);  // (0, row coordinates)
  const uint row = p.a_off + offset4(i, p.a_nb);
  SUM s = SUM(0);
  for (uint k = 0u; k < p.ne.x; ++k) s += SUM(a[row + k * p.a_nb.x]);
  d[p.d_off + offset4(i, p.d_nb)] = float(s);
}

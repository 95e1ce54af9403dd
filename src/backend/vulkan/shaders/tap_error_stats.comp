// ErrorStats tap between the node a and a second tensor b of its shape:
// over pairs where both are finite, sums of (a-b)^2, a^2, b^2, a*b and the
// largest |a-b|; pairs with a NaN or Inf are counted apart. Workgroup g adds
// into slot g: acc[5g..5g+4], counts[2g] = count, counts[2g+1] = non-finite.
#version 450
#include "common.glsl"
#include "tap_common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer B { float b[]; };
layout(binding = 2) buffer Acc { ACC acc[]; };
layout(binding = 3) buffer Counts { uint counts[]; };

layout(push_constant) uniform Params {
  uvec4 ne;
  uvec4 a_nb;  // floats
  uvec4 b_nb;
  uint a_off, b_off, n;
} p;

shared ACC s_diff[TAP_WG], s_aa[TAP_WG], s_bb[TAP_WG], s_ab[TAP_WG], s_max[TAP_WG];
shared uint s_count[TAP_WG], s_bad[TAP_WG];

void main() {
  const uint g = gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
  ACC diff = ACC(0), aa = ACC(0), bb = ACC(0), ab = ACC(0), mx = ACC(0);
  uint count = 0u, bad = 0u;
  for (uint e = g * TAP_WG + t; e < p.n; e += TAP_SLOTS * TAP_WG) {
    const uvec4 i = unravel(e, p.ne);
    const float va = a[p.a_off + offset4(i, p.a_nb)], vb = b[p.b_off + offset4(i, p.b_nb)];
    if (isnan(va) || isinf(va) || isnan(vb) || isinf(vb)) {
      ++bad;
    } else {
      const ACC x = ACC(va), y = ACC(vb), dxy = x - y;
      ++count;
      diff += dxy * dxy;
      aa += x * x;
      bb += y * y;
      ab += x * y;
      mx = max(mx, abs(dxy));
    }
  }
  s_diff[t] = diff;
  s_aa[t] = aa;
  s_bb[t] = bb;
  s_ab[t] = ab;
  s_max[t] = mx;
  s_count[t] = count;
  s_bad[t] = bad;
  barrier();
  for (uint s = TAP_WG / 2u; s > 0u; s >>= 1) {
    if (t < s) {
      s_diff[t] += s_diff[t + s];
      s_aa[t] += s_aa[t + s];
      s_bb[t] += s_bb[t + s];
      s_ab[t] += s_ab[t + s];
      s_max[t] = max(s_max[t], s_max[t + s]);
      s_count[t] += s_count[t + s];
      s_bad[t] += s_bad[t + s];
    }
    barrier();
  }
  if (t == 0u) {
    acc[5u * g] += s_diff[0];
    acc[5u * g + 1u] += s_aa[0];
    acc[5u * g + 2u] += s_bb[0];
    acc[5u * g + 3u] += s_ab[0];
    acc[5u * g + 4u] = max(acc[5u * g + 4u], s_max[0]);
    counts[2u * g] += s_count[0];
    counts[2u * g + 1u] += s_bad[0];
  }
}

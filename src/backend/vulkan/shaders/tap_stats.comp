// Stats tap: count, min, max, sum, sum of squares of the finite values, NaN
// and Inf counts. Workgroup g strides over the elements and adds into slot g:
// acc[4g..4g+3] = min, max, sum, sum_sq; counts[4g..4g+2] = count, nan, inf.
#version 450
#include "common.glsl"
#include "tap_common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) buffer Acc { ACC acc[]; };
layout(binding = 2) buffer Counts { uint counts[]; };

layout(push_constant) uniform Params {
  uvec4 ne;
  uvec4 nb;  // floats
  uint x_off, n;
} p;

shared ACC s_min[TAP_WG], s_max[TAP_WG], s_sum[TAP_WG], s_sq[TAP_WG];
shared uint s_count[TAP_WG], s_nan[TAP_WG], s_inf[TAP_WG];

void main() {
  const uint g = gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
  const float inf = uintBitsToFloat(0x7f800000u);
  ACC mn = ACC(inf), mx = ACC(-inf), sum = ACC(0), sq = ACC(0);
  uint count = 0u, nans = 0u, infs = 0u;
  for (uint e = g * TAP_WG + t; e < p.n; e += TAP_SLOTS * TAP_WG) {
    const float v = x[p.x_off + offset4(unravel(e, p.ne), p.nb)];
    if (isnan(v)) {
      ++nans;
    } else if (isinf(v)) {
      ++infs;
    } else {
      const ACC a = ACC(v);
      ++count;
      mn = min(mn, a);
      mx = max(mx, a);
      sum += a;
      sq += a * a;
    }
  }
  s_min[t] = mn;
  s_max[t] = mx;
  s_sum[t] = sum;
  s_sq[t] = sq;
  s_count[t] = count;
  s_nan[t] = nans;
  s_inf[t] = infs;
  barrier();
  for (uint s = TAP_WG / 2u; s > 0u; s >>= 1) {
    if (t < s) {
      s_min[t] = min(s_min[t], s_min[t + s]);
      s_max[t] = max(s_max[t], s_max[t + s]);
      s_sum[t] += s_sum[t + s];
      s_sq[t] += s_sq[t + s];
      s_count[t] += s_count[t + s];
      s_nan[t] += s_nan[t + s];
      s_inf[t] += s_inf[t + s];
    }
    barrier();
  }
  if (t == 0u) {
    acc[4u * g] = min(acc[4u * g], s_min[0]);
    acc[4u * g + 1u] = max(acc[4u * g + 1u], s_max[0]);
    acc[4u * g + 2u] += s_sum[0];
    acc[4u * g + 3u] += s_sq[0];
    counts[4u * g] += s_count[0];
    counts[4u * g + 1u] += s_nan[0];
    counts[4u * g + 2u] += s_inf[0];
  }
}

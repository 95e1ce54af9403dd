// Stats tap: count, min, max, sum, sum of squares of the finite values, NaN
// and Inf counts. Workgroup g adds into slot g:
// acc[4g..4g+3] = min, max, sum, sum_sq; counts[4g..4g+2] = count, nan, inf.
//
// Workgroup g strides over the elements, unravelling each index. Variant
// SEGMENTS (CPU devices, where barriers, integer divisions and loads are
// slow): workgroups of 8 invocations take row segments g, g + TAP_SLOTS, ...
// (seg_len elements of dim 0 each, segs_per_row per row, segs in all; the
// host has merged the dims it could), the invocations the segment's elements
// t, t + 8, ...: an index unravelled per segment, not per element, and no
// barrier but the slot's final reduction. With ACC_F64 and `pairs` (dim 0
// contiguous, the binding 8-byte aligned) two floats are read at once as a
// double's bits: lavapipe reads a buffer one invocation and one component at
// a time, whatever the width.
#version 450
#include "common.glsl"
#include "tap_common.glsl"

#if defined(SEGMENTS)
const uint WG = 8u;  // a SIMD vector of lavapipe
#else
const uint WG = TAP_WG;
#endif
layout(local_size_x = WG) in;

layout(binding = 0) readonly buffer X { float x[]; };
#if defined(SEGMENTS) && defined(ACC_F64)
layout(binding = 0) readonly buffer X2 { double x2[]; };  // the same buffer, as pairs of floats
#endif
layout(binding = 1) buffer Acc { ACC acc[]; };
layout(binding = 2) buffer Counts { uint counts[]; };

layout(push_constant) uniform Params {
  uvec4 ne;
  uvec4 nb;  // floats
  uint x_off, n;
  uint seg_len, segs_per_row, segs, pairs;  // SEGMENTS
} p;

shared ACC s_min[WG], s_max[WG], s_sum[WG], s_sq[WG];
shared uint s_count[WG], s_nan[WG], s_inf[WG];

ACC mn = ACC(uintBitsToFloat(0x7f800000u)), mx = ACC(uintBitsToFloat(0xff800000u)), sum = ACC(0), sq = ACC(0);
uint count = 0u, nans = 0u, infs = 0u;

void add(float v) {
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

#if defined(SEGMENTS)
// Adds the floats [i0, i1) of x.
void add_range(uint i0, uint i1, uint t) {
#if defined(ACC_F64)
  if (p.pairs != 0u) {
    // Floats a.. b - 1 as pairs (a, b even); i0 and i1 - 1 apart when odd.
    const uint a = (i0 + 1u) & ~1u, b = max(a, i1 & ~1u);
    if (t == 0u && i0 < a) add(x[i0]);
    if (t == 1u && i1 > b) add(x[i1 - 1u]);
    for (uint j = a / 2u + t; j < b / 2u; j += WG) {
      const uvec2 u = unpackDouble2x32(x2[j]);
      add(uintBitsToFloat(u.x));
      add(uintBitsToFloat(u.y));
    }
    return;
  }
#endif
  for (uint i = i0 + t; i < i1; i += WG) add(x[i]);
}
#endif

void main() {
  const uint g = gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
#if defined(SEGMENTS)
  for (uint s = g; s < p.segs; s += TAP_SLOTS) {
    const uint row = s / p.segs_per_row, k0 = (s - row * p.segs_per_row) * p.seg_len;
    const uint k1 = min(k0 + p.seg_len, p.ne.x);
    const uint base = p.x_off + offset4(unravel(row, uvec4(1u, p.ne.yzw)), p.nb);
    if (p.nb.x == 1u) {
      add_range(base + k0, base + k1, t);
    } else {
      for (uint k = k0 + t; k < k1; k += WG) add(x[base + k * p.nb.x]);
    }
  }
#else
  for (uint e = g * WG + t; e < p.n; e += TAP_SLOTS * WG) add(x[p.x_off + offset4(unravel(e, p.ne), p.nb)]);
#endif
  s_min[t] = mn;
  s_max[t] = mx;
  s_sum[t] = sum;
  s_sq[t] = sq;
  s_count[t] = count;
  s_nan[t] = nans;
  s_inf[t] = infs;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
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

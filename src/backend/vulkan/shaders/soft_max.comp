// SoftMax over dim 0 of a*scale + mask: one workgroup per row. The mask
// [K, >=N, M2, M3] is broadcast over dims 2 and 3; sinks (one per head, dim
// 2) join each row as one more logit with no output; a fully masked row
// gives zeros. Variant ROW_PER_INVOCATION (devices that run invocations as SIMD
// lanes of CPU threads, lavapipe, where barriers are slow): one invocation per
// row, no shared memory and no barriers.
#version 450
#include "common.glsl"

#if defined(ROW_PER_INVOCATION)
const uint WG = 1u;  // invocations per row
layout(local_size_x = 64) in;
#else
const uint WG = 128u;
layout(local_size_x = 128) in;
#endif

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer M { float mask[]; };
layout(binding = 2) readonly buffer S { float sinks[]; };  // read only when has_sinks
layout(binding = 3) writeonly buffer D { float d[]; };

layout(push_constant) uniform Params {
  uvec4 ne;
  uvec4 a_nb;  // floats
  uvec4 d_nb;
  uvec4 m_ne;
  uvec4 m_nb;
  uint a_off, d_off, m_off, has_mask;
  float scale;
  uint s_off, s_nb0, has_sinks;
} p;

#if !defined(ROW_PER_INVOCATION)
shared float partial[WG];
#endif

const float NEG_INF = -1.0 / 0.0;  // -Inf

uvec4 row;
uint a0, m0;

float value(uint i) {
  float x = a[a0 + i * p.a_nb.x] * p.scale;
  if (p.has_mask != 0u) x += mask[m0 + i * p.m_nb.x];
  return x;
}

// GLSL's max() may return either operand when one is NaN; a NaN in a row
// must make the whole row NaN (as IEEE arithmetic and the CPU give), so that
// a corrupt weight is not hidden behind plausible probabilities.
float nan_max(float x, float y) { return isnan(x) || isnan(y) ? x + y : max(x, y); }

// The maximum / sum of x over the row's invocations.
float row_max(float x, uint t) {
#if defined(ROW_PER_INVOCATION)
  return x;
#else
  partial[t] = x;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (t < s) partial[t] = nan_max(partial[t], partial[t + s]);
    barrier();
  }
  x = partial[0];
  barrier();  // partial is reused
  return x;
#endif
}
float row_sum(float x, uint t) {
#if defined(ROW_PER_INVOCATION)
  return x;
#else
  partial[t] = x;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (t < s) partial[t] += partial[t + s];
    barrier();
  }
  return partial[0];
#endif
}

void main() {
#if defined(ROW_PER_INVOCATION)
  const uint r = group_index() * 64u + gl_LocalInvocationID.x, t = 0u;
#else
  const uint r = group_index(), t = gl_LocalInvocationID.x;
#endif
  if (r >= p.ne.y * p.ne.z * p.ne.w) return;
  row = uvec4(0u, r % p.ne.y, (r / p.ne.y) % p.ne.z, r / (p.ne.y * p.ne.z));
  a0 = p.a_off + offset4(row, p.a_nb);
  m0 = p.m_off + offset4(uvec4(0u, row.y, row.z % p.m_ne.z, row.w % p.m_ne.w), p.m_nb);
  const uint d0 = p.d_off + offset4(row, p.d_nb);

  float mx = NEG_INF;
  for (uint i = t; i < p.ne.x; i += WG) mx = nan_max(mx, value(i));
  mx = row_max(mx, t);
  // The head's sink: one more logit, in the maximum and the sum.
  const float sink = p.has_sinks != 0u ? sinks[p.s_off + row.z * p.s_nb0] : NEG_INF;
  mx = nan_max(mx, sink);

  float sum = 0.0;
  if (mx != NEG_INF)
    for (uint i = t; i < p.ne.x; i += WG) sum += exp(value(i) - mx);
  sum = row_sum(sum, t);
  if (mx != NEG_INF && p.has_sinks != 0u) sum += exp(sink - mx);
  const float inv = sum > 0.0 ? 1.0 / sum : 0.0;
  for (uint i = t; i < p.ne.x; i += WG) d[d0 + i * p.d_nb.x] = mx == NEG_INF ? 0.0 : exp(value(i) - mx) * inv;
}

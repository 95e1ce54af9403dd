// Rope: one thread per element. theta_i = pos * freq_scale * theta_scale^i / f_i
// (pos: the token's position, or in the multi-section modes the one of its
// four that pair i's section assigns)
// with theta_scale = freq_base^(-2/n_dims) (from the host in double as a
// hi + lo pair of floats); with YaRN, blended with the extrapolated angle
// pos * theta_scale^i / f_i by the ramp, cos and sin scaled by mscale. Variant ROPE_F64 (devices with shaderFloat64)
// computes the angle and reduces it modulo 2*pi in double, so only the final
// sine and cosine are in float, as on the CPU; otherwise all in float.
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer Pos { int pos[]; };
layout(binding = 2) readonly buffer F { float freq_factors[]; };  // read only when has_factors
layout(binding = 3) writeonly buffer D { float d[]; };

layout(push_constant) uniform Params {
  uvec4 ne;
  uvec4 a_nb;  // floats
  uvec4 d_nb;
  uvec4 sections;  // pairs per position (time, height, width, extra) of the multi-section modes
  uint a_off, d_off, pos_off, pos_nb0;  // pos in ints
  uint n_dims, mode;  // 0 normal, 1 NeoX, 2 MRope, 3 IMRope (NeoX pairs from 1 on)
  float freq_scale, theta_scale_hi, theta_scale_lo;
  uint f_off, has_factors;
  float ext_factor, mscale, corr_low, corr_high;  // YaRN (ext_factor 0: off)
} p;

// YaRN's share of the extrapolated angle for pair i (ggml's rope_yarn_ramp).
float yarn_ramp(uint i) {
  const float y = (float(i) - p.corr_low) / max(0.001, p.corr_high - p.corr_low);
  return (1.0 - min(1.0, max(0.0, y))) * p.ext_factor;
}

// Which of the token's four positions turns pair i (op_table.h's
// rope_position_of): MRope's sections as runs of pairs, IMRope's dealt in
// turn (time, height, width) while each lasts, the extra position the pairs
// no section claims; sections repeat. The one position in the other modes.
uint position_of(uint i) {
  if (p.mode < 2u) return 0u;
  const uvec4 s = p.sections;
  const uint sector = i % (s.x + s.y + s.z + s.w);
  if (p.mode == 3u) {
    const uint lane = sector % 3u;
    return sector < 3u * s[lane] ? lane : 3u;
  }
  return sector < s.x ? 0u : sector < s.x + s.y ? 1u : sector < s.x + s.y + s.z ? 2u : 3u;
}

void main() {
  const uint e = group_index() * 256u + gl_LocalInvocationID.x;
  if (e >= p.ne.x * p.ne.y * p.ne.z * p.ne.w) return;
  const uvec4 i = unravel(e, p.ne);
  const uint a_row = p.a_off + offset4(uvec4(0u, i.yzw), p.a_nb);
  const uint out_index = p.d_off + offset4(i, p.d_nb);
  if (i.x >= p.n_dims) {
    d[out_index] = a[a_row + i.x * p.a_nb.x];
    return;
  }
  const uint half_dims = p.n_dims / 2u;
  uint pair, j0, j1;
  if (p.mode != 0u) {
    pair = i.x < half_dims ? i.x : i.x - half_dims;
    j0 = pair;
    j1 = pair + half_dims;
  } else {
    pair = i.x / 2u;
    j0 = 2u * pair;
    j1 = j0 + 1u;
  }
  // Positions are section-major in pos: entry k N + i is token i's k-th.
  const int position = pos[p.pos_off + (position_of(pair) * p.ne.z + i.z) * p.pos_nb0];
  const float factor = p.has_factors != 0u ? freq_factors[p.f_off + pair] : 1.0f;
  const float ramp = p.ext_factor != 0.0 ? yarn_ramp(pair) : 0.0;
#if defined(ROPE_F64)
  const double theta_scale = double(p.theta_scale_hi) + double(p.theta_scale_lo);
  double inv_freq = 1.0LF;
  for (uint k = 0u; k < pair; ++k) inv_freq *= theta_scale;
  const double extrapolated = double(position) * inv_freq / double(factor);
  const double theta = extrapolated * (double(p.freq_scale) * (1.0LF - double(ramp)) + double(ramp));
  const double two_pi = 6.283185307179586LF;
  const float angle = float(theta - floor(theta / two_pi) * two_pi);
#else
  const float extrapolated = float(position) * pow(p.theta_scale_hi, float(pair)) / factor;
  const float angle = extrapolated * (p.freq_scale * (1.0 - ramp) + ramp);
#endif
  const float c = cos(angle) * p.mscale, s = sin(angle) * p.mscale;
  const float x0 = a[a_row + j0 * p.a_nb.x], x1 = a[a_row + j1 * p.a_nb.x];
  d[out_index] = i.x == j0 ? x0 * c - x1 * s : x0 * s + x1 * c;
}

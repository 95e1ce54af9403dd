// Rope: one thread per element. theta_i = pos * freq_scale * theta_scale^i / f_i
// with theta_scale = freq_base^(-2/n_dims) (from the host in double as a
// hi + lo pair of floats). Variant ROPE_F64 (devices with shaderFloat64)
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
  uint a_off, d_off, pos_off, pos_nb0;  // pos in ints
  uint n_dims, neox;
  float freq_scale, theta_scale_hi, theta_scale_lo;
  uint f_off, has_factors;
} p;

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
  if (p.neox != 0u) {
    pair = i.x < half_dims ? i.x : i.x - half_dims;
    j0 = pair;
    j1 = pair + half_dims;
  } else {
    pair = i.x / 2u;
    j0 = 2u * pair;
    j1 = j0 + 1u;
  }
  const int position = pos[p.pos_off + i.z * p.pos_nb0];
  const float factor = p.has_factors != 0u ? freq_factors[p.f_off + pair] : 1.0f;
#if defined(ROPE_F64)
  const double theta_scale = double(p.theta_scale_hi) + double(p.theta_scale_lo);
  double inv_freq = 1.0LF;
  for (uint k = 0u; k < pair; ++k) inv_freq *= theta_scale;
  const double theta = double(position) * double(p.freq_scale) * inv_freq / double(factor);
  const double two_pi = 6.283185307179586LF;
  const float angle = float(theta - floor(theta / two_pi) * two_pi);
#else
  const float angle = float(position) * p.freq_scale * pow(p.theta_scale_hi, float(pair)) / factor;
#endif
  const float c = cos(angle), s = sin(angle);
  const float x0 = a[a_row + j0 * p.a_nb.x], x1 = a[a_row + j1 * p.a_nb.x];
  d[out_index] = i.x == j0 ? x0 * c - x1 * s : x0 * s + x1 * c;
}

// Matrix-vector mul_mat for few activation rows (generation): one workgroup
// per weight row and batch index, each thread dequantizing its share of the
// row once for all (at most MAX_COLS) activation rows, then a tree
// reduction. Variants: TYPE_* (weight_types.glsl).
#version 450
#include "common.glsl"
#define WEIGHT_BINDING 0
#include "weight_types.glsl"
#include "mul_mat_params.glsl"

const uint WG = 128u;
const uint MAX_COLS = 8u;  // = kMulMatVecMaxCols on the host
layout(local_size_x = 128) in;

layout(binding = 1) readonly buffer B { float b[]; };
layout(binding = 2) writeonly buffer D { float d[]; };

shared float partial[MAX_COLS][WG];

void main() {
  uint g = group_index();
  const uint row = g % p.M;
  g /= p.M;
  const uint i2 = g % p.ne2, i3 = g / p.ne2;
  if (i3 >= p.ne3) return;
  const uint t = gl_LocalInvocationID.x;
  const uint a_row = p.a_off + row * p.a_nb1 + (i2 / p.r2) * p.a_nb2 + (i3 / p.r3) * p.a_nb3;
  const uint b0 = p.b_off + i2 * p.b_nb2 + i3 * p.b_nb3;

  float acc[MAX_COLS];
  for (uint j = 0u; j < MAX_COLS; ++j) acc[j] = 0.0;
  const uint units = p.K / SUB_SIZE;
  for (uint u = t; u < units; u += WG) {
    float v[SUB_SIZE];
    dequantize_unit(a_row, u, v);
    for (uint j = 0u; j < MAX_COLS; ++j) {
      if (j >= p.N) break;
      const uint bj = b0 + j * p.b_nb1 + u * SUB_SIZE * p.b_nb0;
      for (uint s = 0u; s < SUB_SIZE; ++s) acc[j] += v[s] * b[bj + s * p.b_nb0];
    }
  }
  for (uint j = 0u; j < MAX_COLS; ++j) partial[j][t] = acc[j];
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (t < s)
      for (uint j = 0u; j < MAX_COLS; ++j) partial[j][t] += partial[j][t + s];
    barrier();
  }
  if (t < p.N) d[p.d_off + row + t * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3] = partial[t][0];
}

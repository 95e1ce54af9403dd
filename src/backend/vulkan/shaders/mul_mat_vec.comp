// Matrix-vector mul_mat for few activation rows (generation): one workgroup
// per weight row and batch index, each thread dequantizing its share of the
// row once for all (at most MAX_COLS) activation rows, then a tree
// reduction. Variants: TYPE_* (weight_types.glsl); MUL_MAT_ID, one
// workgroup per weight row and (slot, token) pair, whose expert picks the
// weights (mul_mat_params.glsl): one activation row each.
#version 450
#include "common.glsl"
#define WEIGHT_BINDING 0
#if defined(MUL_MAT_ID)  // the last binding, after weights, activations, result (and ids)
#define LATTICE_BINDING 4
#else
#define LATTICE_BINDING 3
#endif
#include "weight_types.glsl"
#include "mul_mat_params.glsl"

const uint WG = 128u;
#if defined(MUL_MAT_ID)
const uint MAX_COLS = 1u;
#else
const uint MAX_COLS = 8u;  // = kMulMatVecMaxCols on the host
#endif
layout(local_size_x = 128) in;

layout(binding = 1) readonly buffer B { float b[]; };
layout(binding = 2) writeonly buffer D { float d[]; };

shared float partial[MAX_COLS][WG];

void main() {
  uint g = group_index();
  const uint row = g % p.M;
  g /= p.M;
  const uint t = gl_LocalInvocationID.x;
#if defined(MUL_MAT_ID)
  const uint pair = g;
  if (pair >= p.N) return;
  const uint expert = expert_of(pair), b0 = pair_b_row(pair), d0 = pair_d_row(pair);
  if (expert >= p.n_expert) {  // the whole workgroup: an id out of range gives NaN
    if (t == 0u) d[d0 + row] = uintBitsToFloat(0x7fc00000u);
    return;
  }
  const uint a_row = p.a_off + row * p.a_nb1 + expert * p.a_nb2;
  const uint n_cols = 1u;
#else
  const uint i2 = g % p.ne2, i3 = g / p.ne2;
  if (i3 >= p.ne3) return;
  const uint a_row = p.a_off + row * p.a_nb1 + (i2 / p.r2) * p.a_nb2 + (i3 / p.r3) * p.a_nb3;
  const uint b0 = p.b_off + i2 * p.b_nb2 + i3 * p.b_nb3;
  const uint d0 = p.d_off + i2 * p.d_nb2 + i3 * p.d_nb3;
  const uint n_cols = p.N;
#endif

  float acc[MAX_COLS];
  for (uint j = 0u; j < MAX_COLS; ++j) acc[j] = 0.0;
  const uint units = p.K / SUB_SIZE;
  for (uint u = t; u < units; u += WG) {
    float v[SUB_SIZE];
    dequantize_unit(a_row, u, v);
    for (uint j = 0u; j < MAX_COLS; ++j) {
      if (j >= n_cols) break;
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
  if (t < n_cols) d[d0 + row + t * p.d_nb1] = partial[t][0];
}

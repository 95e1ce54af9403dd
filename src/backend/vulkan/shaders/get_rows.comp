// GetRows: row idx[r, j] of the weights' slice j (j = 0 for 1-D indices),
// converted to F32, into row (r, j) of the result; one thread per dequantize
// unit. Variants: TYPE_* (weight_types.glsl).
#version 450
#include "common.glsl"
#define WEIGHT_BINDING 0
#define LATTICE_BINDING 3  // after the source, indices and result
#include "weight_types.glsl"

layout(local_size_x = 256) in;

layout(binding = 1) readonly buffer Idx { int idx[]; };
layout(binding = 2) writeonly buffer D { float d[]; };

layout(push_constant) uniform Params {
  uint K;        // row length
  uint n_out;    // rows to gather per slice
  uint n_slices; // idx columns (slices of the source)
  uint a_rows;   // rows of the source (indices outside give NaN rows)
  uint a_off;    // bytes
  uint a_nb1, a_nb2;      // bytes
  uint idx_off;           // ints
  uint idx_nb0, idx_nb1;  // ints
  uint d_off;             // floats
  uint d_nb1, d_nb2;      // floats
} p;

void main() {
  const uint units = p.K / SUB_SIZE;
  const uint e = group_index() * 256u + gl_LocalInvocationID.x;
  if (e >= units * p.n_out * p.n_slices) return;
  const uint u = e % units, r = (e / units) % p.n_out, j = e / units / p.n_out;
  const int row = idx[p.idx_off + r * p.idx_nb0 + j * p.idx_nb1];
  float v[SUB_SIZE];
  if (row < 0 || uint(row) >= p.a_rows) {
    for (uint s = 0u; s < SUB_SIZE; ++s) v[s] = uintBitsToFloat(0x7fc00000u);
  } else {
    dequantize_unit(p.a_off + uint(row) * p.a_nb1 + j * p.a_nb2, u, v);
  }
  for (uint s = 0u; s < SUB_SIZE; ++s) d[p.d_off + r * p.d_nb1 + j * p.d_nb2 + u * SUB_SIZE + s] = v[s];
}

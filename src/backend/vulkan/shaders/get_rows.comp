// GetRows: row idx[r] of the weights, converted to F32, into row r of the
// result; one thread per dequantize unit. Variants: TYPE_* (weight_types.glsl).
#version 450
#include "common.glsl"
#define WEIGHT_BINDING 0
#include "weight_types.glsl"

layout(local_size_x = 256) in;

layout(binding = 1) readonly buffer Idx { int idx[]; };
layout(binding = 2) writeonly buffer D { float d[]; };

layout(push_constant) uniform Params {
  uint K;        // row length
  uint n_out;    // rows to gather
  uint a_rows;   // rows of the source (indices outside give NaN rows)
  uint a_off;    // bytes
  uint a_nb1;    // bytes
  uint idx_off;  // ints
  uint idx_nb0;  // ints
  uint d_off;    // floats
  uint d_nb1;    // floats
} p;

void main() {
  const uint units = p.K / SUB_SIZE;
  const uint e = group_index() * 256u + gl_LocalInvocationID.x;
  if (e >= units * p.n_out) return;
  const uint r = e / units, u = e % units;
  const int row = idx[p.idx_off + r * p.idx_nb0];
  float v[SUB_SIZE];
  if (row < 0 || uint(row) >= p.a_rows) {
    for (uint s = 0u; s < SUB_SIZE; ++s) v[s] = uintBitsToFloat(0x7fc00000u);
  } else {
    dequantize_unit(p.a_off + uint(row) * p.a_nb1, u, v);
  }
  for (uint s = 0u; s < SUB_SIZE; ++s) d[p.d_off + r * p.d_nb1 + u * SUB_SIZE + s] = v[s];
}

// ColumnSumSq tap: per column k of the activations x [K, rows...], the sum
// over rows of x_k^2, one thread per column, rows in the order of the host
// reference. Variants: ACC_F64 or not (tap_common.glsl).
#version 450
#include "common.glsl"
#include "tap_common.glsl"

layout(local_size_x = 64) in;

layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) buffer Acc { ACC acc[]; };

layout(push_constant) uniform Params {
  uvec4 ne;
  uvec4 nb;  // floats
  uint x_off;
} p;

void main() {
  const uint k = group_index() * 64u + gl_LocalInvocationID.x;
  if (k >= p.ne.x) return;
  ACC sum = ACC(0);
  for (uint i3 = 0u; i3 < p.ne.w; ++i3)
    for (uint i2 = 0u; i2 < p.ne.z; ++i2)
      for (uint i1 = 0u; i1 < p.ne.y; ++i1) {
        const ACC v = ACC(x[p.x_off + offset4(uvec4(k, i1, i2, i3), p.nb)]);
        sum += v * v;
      }
  acc[k] += sum;
}

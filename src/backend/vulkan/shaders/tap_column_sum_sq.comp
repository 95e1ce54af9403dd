// ColumnSumSq tap: per column k of the activations x [K, rows...], the sum
// over rows of x_k^2, rows in the order of the host reference, one invocation
// per column. Variants: ACC_F64 or not (tap_common.glsl); CPU_DEVICE (the
// _cpu variants), for lavapipe, which reads a buffer one invocation and one
// component at a time and runs a workgroup's SIMD vectors one after the
// other: workgroups of 8 invocations, each with UNITS units of columns 8
// units apart (the workgroup reads 8 * UNITS consecutive units of each row,
// several loads in flight), a unit being one column or, with ACC_F64 and
// `pairs` (dim 0 contiguous, every row and the binding 8-byte aligned), two
// read at once as a double's bits (the last column of an odd K apart).
// EXPERTS (the _experts variants, on a MUL_MAT_ID's activations x [K, b1,
// n_tokens] with its expert ids [n_used, n_tokens]): one invocation per
// expert e and column k, summing x_k^2 over the (slot, token) pairs routed to
// e, slot u reading x's row u % b1, in the host's order (tokens, then slots);
// the expert's column 0 also counts its pairs.
#version 450
#include "common.glsl"
#include "tap_common.glsl"

#if defined(CPU_DEVICE) && !defined(EXPERTS)
const uint WG = 8u, UNITS = 4u;
#else
const uint WG = 64u;
#endif
layout(local_size_x = WG) in;

layout(binding = 0) readonly buffer X { float x[]; };
#if defined(CPU_DEVICE) && defined(ACC_F64)
layout(binding = 0) readonly buffer X2 { double x2[]; };  // the same buffer, as pairs of floats
#endif
layout(binding = 1) buffer Acc { ACC acc[]; };
#if defined(EXPERTS)
layout(binding = 2) readonly buffer Ids { int ids[]; };
layout(binding = 3) buffer Counts { uint counts[]; };
#endif

layout(push_constant) uniform Params {
  uvec4 ne;
  uvec4 nb;  // floats
  uint x_off;
  uint pairs;  // CPU_DEVICE with ACC_F64
  uint ids_off, ids_nb0, ids_nb1;  // EXPERTS: the ids [n_used, ne.z], ints
  uint n_used, n_expert;
} p;

// Column k's sum over the rows.
ACC column_sum_sq(uint k) {
  ACC sum = ACC(0);
  for (uint i3 = 0u; i3 < p.ne.w; ++i3)
    for (uint i2 = 0u; i2 < p.ne.z; ++i2)
      for (uint i1 = 0u; i1 < p.ne.y; ++i1) {
        const ACC v = ACC(x[p.x_off + offset4(uvec4(k, i1, i2, i3), p.nb)]);
        sum += v * v;
      }
  return sum;
}

#if defined(EXPERTS)
void main() {
  const uint c = group_index() * WG + gl_LocalInvocationID.x;  // e K + k: the accumulators' order
  if (c >= p.ne.x * p.n_expert) return;
  const uint e = c / p.ne.x, k = c % p.ne.x;
  ACC sum = ACC(0);
  uint rows = 0u;
  for (uint t = 0u; t < p.ne.z; ++t)
    for (uint u = 0u; u < p.n_used; ++u)
      if (ids[p.ids_off + u * p.ids_nb0 + t * p.ids_nb1] == int(e)) {
        const ACC v = ACC(x[p.x_off + offset4(uvec4(k, u % p.ne.y, t, 0u), p.nb)]);
        sum += v * v;
        ++rows;
      }
  acc[c] += sum;
  if (k == 0u) counts[e] += rows;
}
#elif defined(CPU_DEVICE)
uint u[UNITS];  // this invocation's units
ACC s0[UNITS], s1[UNITS];  // their sums (s1: the second column of a pair)

// Adds every row's units u[] to the sums: pairs or single columns (a
// constant once inlined: no branch in the loop).
void add_rows(bool as_pairs) {
  for (uint i3 = 0u; i3 < p.ne.w; ++i3)
    for (uint i2 = 0u; i2 < p.ne.z; ++i2)
      for (uint i1 = 0u; i1 < p.ne.y; ++i1) {
        const uint row = p.x_off + offset4(uvec4(0u, i1, i2, i3), p.nb);
        for (uint j = 0u; j < UNITS; ++j) {
#if defined(ACC_F64)
          if (as_pairs) {
            const vec2 v = uintBitsToFloat(unpackDouble2x32(x2[row / 2u + u[j]]));
            s0[j] += ACC(v.x) * ACC(v.x);
            s1[j] += ACC(v.y) * ACC(v.y);
            continue;
          }
#endif
          const ACC v = ACC(x[row + u[j] * p.nb.x]);
          s0[j] += v * v;
        }
      }
}

void main() {
  const uint first = group_index() * WG * UNITS + gl_LocalInvocationID.x;
#if defined(ACC_F64)
  const uint width = p.pairs != 0u ? 2u : 1u;
#else
  const uint width = 1u;  // no pairs without doubles
#endif
  const uint units = p.ne.x / width;
  // Invocations past the last unit read it again and write nothing.
  for (uint j = 0u; j < UNITS; ++j) {
    u[j] = min(first + j * WG, units - 1u);
    s0[j] = s1[j] = ACC(0);
  }
  if (units > 0u) {
    if (width == 2u) {
      add_rows(true);
    } else {
      add_rows(false);
    }
  }
  for (uint j = 0u; j < UNITS; ++j)
    if (first + j * WG < units) {
      acc[width * u[j]] += s0[j];
      if (width == 2u) acc[2u * u[j] + 1u] += s1[j];
    }
  // With pairs, the last column of an odd K.
  if (first == 0u && width * units < p.ne.x) acc[p.ne.x - 1u] += column_sum_sq(p.ne.x - 1u);
}
#else
void main() {
  const uint k = group_index() * WG + gl_LocalInvocationID.x;
  if (k < p.ne.x) acc[k] += column_sum_sq(k);
}
#endif

// Tiled matrix-matrix mul_mat (prompts): a workgroup computes a TM x TN tile
// of the result, stepping through K in slices of TK. Each step dequantizes
// the weights' TM x TK slice and loads the activations' TN x TK slice into
// shared memory (zero-padded past the edges), then each of the 16 x 16
// threads accumulates a 4 x 4 block of outputs (rows tx + 16r, columns
// ty + 16c: neighbouring threads read neighbouring rows, no bank conflicts
// with the padded rows). Variants: TYPE_* (weight_types.glsl); DIRECT, for
// devices that run invocations as SIMD lanes of CPU threads (lavapipe), where
// shared memory and barriers are slow (each barrier switches between the
// workgroup's coroutines, each shared access is a per-lane loop): the same
// 4 x 4 blocks, each thread reading its weights and activations straight
// from the buffers.
#version 450
#include "common.glsl"
#define WEIGHT_BINDING 0
#include "weight_types.glsl"
#include "mul_mat_params.glsl"

const uint TM = 64u, TN = 64u, TK = 32u;  // = kMulMatTile* on the host
const uint STRIDE = TK + 1u;
layout(local_size_x = 256) in;

layout(binding = 1) readonly buffer B { float b[]; };
layout(binding = 2) writeonly buffer D { float d[]; };

#if !defined(DIRECT)
shared float tile_a[TM * STRIDE];
shared float tile_b[TN * STRIDE];
#endif

void main() {
  uint g = group_index();
  const uint tiles_m = (p.M + TM - 1u) / TM, tiles_n = (p.N + TN - 1u) / TN;
  const uint m0 = (g % tiles_m) * TM;
  g /= tiles_m;
  const uint n0 = (g % tiles_n) * TN;
  g /= tiles_n;
  const uint i2 = g % p.ne2, i3 = g / p.ne2;
  if (i3 >= p.ne3) return;  // the whole workgroup: no barrier is skipped by some threads only
  const uint a_base = p.a_off + (i2 / p.r2) * p.a_nb2 + (i3 / p.r3) * p.a_nb3;
  const uint b_base = p.b_off + i2 * p.b_nb2 + i3 * p.b_nb3;
  const uint t = gl_LocalInvocationID.x, tx = t % 16u, ty = t / 16u;

  float acc[4][4];
  for (uint r = 0u; r < 4u; ++r)
    for (uint c = 0u; c < 4u; ++c) acc[r][c] = 0.0;

#if defined(DIRECT)
  if (m0 + tx >= p.M || n0 + ty >= p.N) return;  // the whole 4 x 4 block is outside
  uint a_rows[4], b_cols[4];  // edges: clamped to the last row / column, not stored
  for (uint r = 0u; r < 4u; ++r) a_rows[r] = a_base + min(m0 + tx + 16u * r, p.M - 1u) * p.a_nb1;
  for (uint c = 0u; c < 4u; ++c) b_cols[c] = b_base + min(n0 + ty + 16u * c, p.N - 1u) * p.b_nb1;
  const uint units = p.K / SUB_SIZE;
  for (uint u = 0u; u < units; ++u) {
    float w[4][SUB_SIZE];
    for (uint r = 0u; r < 4u; ++r) dequantize_unit(a_rows[r], u, w[r]);
    for (uint s = 0u; s < SUB_SIZE; ++s) {
      const uint k = (u * SUB_SIZE + s) * p.b_nb0;
      float bv[4];
      for (uint c = 0u; c < 4u; ++c) bv[c] = b[b_cols[c] + k];
      for (uint r = 0u; r < 4u; ++r)
        for (uint c = 0u; c < 4u; ++c) acc[r][c] += w[r][s] * bv[c];
    }
  }
#else
  const uint units_per_row = TK / SUB_SIZE;
  for (uint k0 = 0u; k0 < p.K; k0 += TK) {
    for (uint u = t; u < TM * units_per_row; u += 256u) {
      const uint r = u / units_per_row, su = u % units_per_row;
      const uint row = m0 + r, k = k0 + su * SUB_SIZE;
      float v[SUB_SIZE];
      if (row < p.M && k < p.K) {
        dequantize_unit(a_base + row * p.a_nb1, k / SUB_SIZE, v);
      } else {
        for (uint s = 0u; s < SUB_SIZE; ++s) v[s] = 0.0;
      }
      for (uint s = 0u; s < SUB_SIZE; ++s) tile_a[r * STRIDE + su * SUB_SIZE + s] = v[s];
    }
    for (uint e = t; e < TN * TK; e += 256u) {
      const uint c = e / TK, kk = e % TK;
      const uint col = n0 + c, k = k0 + kk;
      tile_b[c * STRIDE + kk] = col < p.N && k < p.K ? b[b_base + k * p.b_nb0 + col * p.b_nb1] : 0.0;
    }
    barrier();
    for (uint kk = 0u; kk < TK; ++kk) {
      float av[4], bv[4];
      for (uint r = 0u; r < 4u; ++r) av[r] = tile_a[(tx + 16u * r) * STRIDE + kk];
      for (uint c = 0u; c < 4u; ++c) bv[c] = tile_b[(ty + 16u * c) * STRIDE + kk];
      for (uint r = 0u; r < 4u; ++r)
        for (uint c = 0u; c < 4u; ++c) acc[r][c] += av[r] * bv[c];
    }
    barrier();
  }
#endif
  for (uint r = 0u; r < 4u; ++r)
    for (uint c = 0u; c < 4u; ++c) {
      const uint row = m0 + tx + 16u * r, col = n0 + ty + 16u * c;
      if (row < p.M && col < p.N) d[p.d_off + row + col * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3] = acc[r][c];
    }
}

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
// from the buffers. MUL_MAT_ID (the expert matmul, mul_mat_params.glsl): a
// workgroup per tile and expert, the tile's columns being the expert's
// (slot, token) pairs, found by scanning the ids (gather_pairs); the slice
// after the last expert writes NaN into the rows of pairs whose id is out of
// range.
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

const uint TM = 64u, TN = 64u, TK = 32u;  // = kMulMatTile* on the host
const uint STRIDE = TK + 1u;
const uint WG = 256u;
layout(local_size_x = 256) in;

layout(binding = 1) readonly buffer B { float b[]; };
layout(binding = 2) writeonly buffer D { float d[]; };

#if !defined(DIRECT)
shared float tile_a[TM * STRIDE];
shared float tile_b[TN * STRIDE];
#endif

// The tile's columns: where column c (< the tile's column count) reads its
// activation row and writes its result row.
#if defined(MUL_MAT_ID)
shared uint tile_b_rows[TN], tile_d_rows[TN];  // of the tile's pairs
uint column_b(uint c) { return tile_b_rows[c]; }
uint column_d(uint c) { return tile_d_rows[c]; }

shared uint chunk_rank[WG];  // per invocation: the expert's pairs before its chunk
shared uint n_routed;

// Whether pair r goes to expert slice e (the slice n_expert: ids out of range).
bool routed_to(uint r, uint e) {
  const uint id = expert_of(r);
  return e < p.n_expert ? id == e : id >= p.n_expert;
}

// Finds the pairs of slice e that rank n0 .. n0 + TN - 1 among its pairs in
// pair order, stores their rows in tile_b_rows and tile_d_rows and returns
// their number. Each invocation
// counts a chunk of the pairs, one prefix sum, then each stores its chunk's
// pairs that fall into the tile. Every invocation calls it (barriers).
uint gather_pairs(uint e, uint n0) {
  const uint t = gl_LocalInvocationID.x, chunk = (p.N + WG - 1u) / WG;
  const uint r0 = min(t * chunk, p.N), r1 = min(r0 + chunk, p.N);
  uint mine = 0u;
  for (uint r = r0; r < r1; ++r) mine += routed_to(r, e) ? 1u : 0u;
  chunk_rank[t] = mine;
  barrier();
  if (t == 0u) {
    uint sum = 0u;
    for (uint i = 0u; i < WG; ++i) {
      const uint c = chunk_rank[i];
      chunk_rank[i] = sum;
      sum += c;
    }
    n_routed = sum;
  }
  barrier();
  uint rank = chunk_rank[t];
  for (uint r = r0; r < r1 && rank < n0 + TN; ++r)
    if (routed_to(r, e)) {
      if (rank >= n0) {
        tile_b_rows[rank - n0] = pair_b_row(r);
        tile_d_rows[rank - n0] = pair_d_row(r);
      }
      ++rank;
    }
  barrier();
  return n_routed > n0 ? min(n_routed - n0, TN) : 0u;
}
#else
uint first_b, first_d;  // column 0's rows
uint column_b(uint c) { return first_b + c * p.b_nb1; }
uint column_d(uint c) { return first_d + c * p.d_nb1; }
#endif

void main() {
  uint g = group_index();
  const uint tiles_m = (p.M + TM - 1u) / TM, tiles_n = (p.N + TN - 1u) / TN;
  const uint m0 = (g % tiles_m) * TM;
  g /= tiles_m;
  const uint n0 = (g % tiles_n) * TN;
  g /= tiles_n;
  const uint t = gl_LocalInvocationID.x, tx = t % 16u, ty = t / 16u;
  // Returns below are taken by the whole workgroup: no barrier is skipped
  // by some threads only.
#if defined(MUL_MAT_ID)
  const uint expert = g;
  if (expert > p.n_expert) return;
  const uint n_cols = gather_pairs(expert, n0);
  if (n_cols == 0u) return;
  if (expert == p.n_expert) {
    for (uint r = 0u; r < 4u; ++r)
      for (uint c = 0u; c < 4u; ++c) {
        const uint row = m0 + tx + 16u * r, col = ty + 16u * c;
        if (row < p.M && col < n_cols) d[column_d(col) + row] = uintBitsToFloat(0x7fc00000u);
      }
    return;
  }
  const uint a_base = p.a_off + expert * p.a_nb2;
#else
  const uint i2 = g % p.ne2, i3 = g / p.ne2;
  if (i3 >= p.ne3) return;
  const uint a_base = p.a_off + (i2 / p.r2) * p.a_nb2 + (i3 / p.r3) * p.a_nb3;
  first_b = p.b_off + i2 * p.b_nb2 + i3 * p.b_nb3 + n0 * p.b_nb1;
  first_d = p.d_off + i2 * p.d_nb2 + i3 * p.d_nb3 + n0 * p.d_nb1;
  const uint n_cols = min(p.N - n0, TN);
#endif

  float acc[4][4];
  for (uint r = 0u; r < 4u; ++r)
    for (uint c = 0u; c < 4u; ++c) acc[r][c] = 0.0;

#if defined(DIRECT)
  if (m0 + tx >= p.M || ty >= n_cols) return;  // the whole 4 x 4 block is outside
  uint a_rows[4], b_cols[4];  // edges: clamped to the last row / column, not stored
  for (uint r = 0u; r < 4u; ++r) a_rows[r] = a_base + min(m0 + tx + 16u * r, p.M - 1u) * p.a_nb1;
  for (uint c = 0u; c < 4u; ++c) b_cols[c] = column_b(min(ty + 16u * c, n_cols - 1u));
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
      const uint c = e / TK, kk = e % TK, k = k0 + kk;
      tile_b[c * STRIDE + kk] = c < n_cols && k < p.K ? b[column_b(c) + k * p.b_nb0] : 0.0;
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
      const uint row = m0 + tx + 16u * r, col = ty + 16u * c;
      if (row < p.M && col < n_cols) d[column_d(col) + row] = acc[r][c];
    }
}

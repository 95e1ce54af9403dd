// GatedDeltaNet, the recurrent form (tensor.h has the rule): an invocation
// per value dimension j of a head, holding column j of the state, S[:, j]
// over the key dimension, through all the tokens. A column's delta and
// update need no other column, so the invocations share nothing and never
// wait for each other; each reads the token's key and query itself (all
// the same addresses). The columns live in shared memory, each touched by
// its own invocation only: 32 columns of up to 128 keys (16 KiB, what every
// device has) per workgroup, a head's columns in ceil(S / 32) workgroups.
// (A column in registers would need its loops unrolled, which made lavapipe
// take seconds per shader.)
#version 450
#include "common.glsl"

#define COLUMNS 32u
#define MAX_KEYS 128u

layout(local_size_x = COLUMNS) in;

layout(binding = 0) readonly buffer Q { float q[]; };
layout(binding = 1) readonly buffer K { float k[]; };
layout(binding = 2) readonly buffer V { float v[]; };
layout(binding = 3) readonly buffer G { float g[]; };
layout(binding = 4) readonly buffer B { float beta[]; };
layout(binding = 5) readonly buffer S0 { float s0[]; };
layout(binding = 6) writeonly buffer D { float d[]; };

// Each source's offset (x) and its strides of dims 1-3 (yzw), in floats;
// the elements of a row are adjacent.
layout(push_constant) uniform Params {
  uvec4 q_at, k_at, v_at, g_at, b_at, s_at;
  uint d_off, S, H, T;
  uint H_k, seqs, per_key_gate;
  float scale;  // 1 / sqrt(S)
} p;

shared float columns[MAX_KEYS * COLUMNS];  // key i of this invocation's column at i * COLUMNS + c

uint row(uvec4 at, uint i1, uint i2, uint i3) { return at.x + i1 * at.y + i2 * at.z + i3 * at.w; }

void main() {
  const uint blocks = (p.S + COLUMNS - 1u) / COLUMNS;
  const uint group = group_index();
  const uint c = gl_LocalInvocationID.x, j = (group % blocks) * COLUMNS + c;
  const uint head = group / blocks;
  if (head >= p.H * p.seqs || j >= p.S) return;
  const uint h = head % p.H, s = head / p.H, hk = h % p.H_k;  // q and k heads tiled over v's (ggml's)
  const uint s_row = row(p.s_at, j, h, s);  // the state's element (i, j) is S[i, j]
  for (uint i = 0u; i < p.S; ++i) columns[i * COLUMNS + c] = s0[s_row + i];
  for (uint t = 0u; t < p.T; ++t) {
    const uint k_row = row(p.k_at, hk, t, s), q_row = row(p.q_at, hk, t, s), g_row = row(p.g_at, h, t, s);
    // Decay, and what the decayed state predicts for the key.
    const uint g_step = p.per_key_gate != 0u ? 1u : 0u;  // a per-key gate, or one for all keys
    float predicted = 0.0;
    for (uint i = 0u; i < p.S; ++i) {
      const float x = columns[i * COLUMNS + c] * exp(g[g_row + i * g_step]);
      columns[i * COLUMNS + c] = x;
      predicted += x * k[k_row + i];
    }
    const float delta = beta[row(p.b_at, h, t, s)] * (v[row(p.v_at, h, t, s) + j] - predicted);
    float o = 0.0;
    for (uint i = 0u; i < p.S; ++i) {
      const float x = columns[i * COLUMNS + c] + k[k_row + i] * delta;
      columns[i * COLUMNS + c] = x;
      o += x * q[q_row + i];
    }
    d[p.d_off + ((s * p.T + t) * p.H + h) * p.S + j] = o * p.scale;
  }
  // The final state after the outputs, in the source state's layout.
  const uint state_row = p.d_off + p.S * p.H * p.T * p.seqs + ((s * p.H + h) * p.S + j) * p.S;
  for (uint i = 0u; i < p.S; ++i) d[state_row + i] = columns[i * COLUMNS + c];
}

// ErrorStats tap between the node a and a second tensor b of its shape:
// over pairs where both are finite, sums of (a-b)^2, a^2, b^2, a*b and the
// largest |a-b|; pairs with a NaN or Inf are counted apart. Workgroup g adds
// into slot g: acc[5g..5g+4], counts[2g] = count, counts[2g+1] = non-finite.
// And per row (dim 0), sum (a-b)^2 / sum b^2 over the row's finite pairs
// (sum (a-b)^2 where sum b^2 = 0) into the LogHistogram of LOG_BUCKETS
// counters at counts[2 TAP_SLOTS...], by atomic adds: ErrorStats::add_row.
//
// The workgroups go over rows, so that one read of both tensors makes
// everything: workgroup g takes rows g*R.., then (g+TAP_SLOTS)*R.., ...,
// R = 2^(8 - row_shift) rows at once, 2^row_shift invocations per row
// reducing the row's sums in shared memory. Variant ROW_PER_INVOCATION (CPU
// devices, where barriers are slow): workgroups of 8 invocations, one per
// row, no barrier but the slot's final reduction.
#version 450
#include "common.glsl"
#include "tap_common.glsl"

#if defined(ROW_PER_INVOCATION)
const uint WG = 8u;  // a SIMD vector of lavapipe: faster there than 1, 64 or 256
#else
const uint WG = TAP_WG;
#endif
layout(local_size_x = WG) in;

layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer B { float b[]; };
layout(binding = 2) buffer Acc { ACC acc[]; };
layout(binding = 3) buffer Counts { uint counts[]; };

layout(push_constant) uniform Params {
  uvec4 ne;
  uvec4 a_nb;  // floats
  uvec4 b_nb;
  uint a_off, b_off;
  uint rows;       // ne.y * ne.z * ne.w
  uint row_shift;  // log2 of the invocations per row (0 in ROW_PER_INVOCATION)
} p;

const uint HIST = 2u * TAP_SLOTS;  // the histogram's first counter

shared ACC s_diff[WG], s_aa[WG], s_bb[WG], s_ab[WG], s_max[WG];
shared uint s_count[WG], s_bad[WG];

ACC diff = ACC(0), aa = ACC(0), bb = ACC(0), ab = ACC(0), mx = ACC(0);
uint count = 0u, bad = 0u;

// Adds elements lane, lane + step, ... of row `row` to the totals; returns
// their sums of (a-b)^2 and b^2.
void add_row(uint row, uint lane, uint step, out ACC row_diff, out ACC row_bb) {
  const uvec4 i = unravel(row, uvec4(1u, p.ne.yzw));  // (0, i1, i2, i3)
  const uint a0 = p.a_off + offset4(i, p.a_nb), b0 = p.b_off + offset4(i, p.b_nb);
  row_diff = ACC(0);
  row_bb = ACC(0);
  for (uint k = lane; k < p.ne.x; k += step) {
    const float va = a[a0 + k * p.a_nb.x], vb = b[b0 + k * p.b_nb.x];
    if (isnan(va) || isinf(va) || isnan(vb) || isinf(vb)) {
      ++bad;
    } else {
      const ACC x = ACC(va), y = ACC(vb), dxy = x - y, d2 = dxy * dxy, y2 = y * y;
      ++count;
      row_diff += d2;
      row_bb += y2;
      aa += x * x;
      ab += x * y;
      mx = max(mx, abs(dxy));
    }
  }
  diff += row_diff;
  bb += row_bb;
}

void add_to_histogram(ACC row_diff, ACC row_bb) {
  atomicAdd(counts[HIST + log_bucket(row_bb > ACC(0) ? row_diff / row_bb : row_diff)], 1u);
}

void main() {
  const uint g = gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
#if defined(ROW_PER_INVOCATION)
  for (uint row = g * WG + t; row < p.rows; row += TAP_SLOTS * WG) {
    ACC row_diff, row_bb;
    add_row(row, 0u, 1u, row_diff, row_bb);
    add_to_histogram(row_diff, row_bb);
  }
#else
  const uint per_row = 1u << p.row_shift, lane = t & (per_row - 1u), at_once = TAP_WG >> p.row_shift;
  // Uniform over the workgroup: every invocation meets every barrier.
  for (uint first = g * at_once; first < p.rows; first += TAP_SLOTS * at_once) {
    const uint row = first + (t >> p.row_shift);
    ACC row_diff = ACC(0), row_bb = ACC(0);
    if (row < p.rows) add_row(row, lane, per_row, row_diff, row_bb);
    s_diff[t] = row_diff;
    s_bb[t] = row_bb;
    barrier();
    for (uint s = per_row >> 1; s > 0u; s >>= 1) {
      if (lane < s) {
        s_diff[t] += s_diff[t + s];
        s_bb[t] += s_bb[t + s];
      }
      barrier();
    }
    // The last barrier ordered every read of another invocation's sums
    // before the next rows' writes.
    if (lane == 0u && row < p.rows) add_to_histogram(s_diff[t], s_bb[t]);
  }
#endif
  s_diff[t] = diff;
  s_aa[t] = aa;
  s_bb[t] = bb;
  s_ab[t] = ab;
  s_max[t] = mx;
  s_count[t] = count;
  s_bad[t] = bad;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (t < s) {
      s_diff[t] += s_diff[t + s];
      s_aa[t] += s_aa[t + s];
      s_bb[t] += s_bb[t + s];
      s_ab[t] += s_ab[t + s];
      s_max[t] = max(s_max[t], s_max[t + s]);
      s_count[t] += s_count[t + s];
      s_bad[t] += s_bad[t + s];
    }
    barrier();
  }
  if (t == 0u) {
    acc[5u * g] += s_diff[0];
    acc[5u * g + 1u] += s_aa[0];
    acc[5u * g + 2u] += s_bb[0];
    acc[5u * g + 3u] += s_ab[0];
    acc[5u * g + 4u] = max(acc[5u * g + 4u], s_max[0]);
    counts[2u * g] += s_count[0];
    counts[2u * g + 1u] += s_bad[0];
  }
}

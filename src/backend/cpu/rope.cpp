// Rope: rotary position embedding of the first n_dims of each row.
//   theta_i = pos * freq_scale * freq_base^(-2i / n_dims) / f_i, i < n_dims / 2
// (f_i the optional frequency factors, src[2]; 1 without)
// Normal mode rotates pairs (x[2i], x[2i+1]), NeoX mode (x[i], x[i + n_dims/2]);
// dims from n_dims on are copied. The multi-section modes (MRope, IMRope)
// rotate NeoX pairs, pair i by the one of the token's four positions its
// section assigns (rope_position_of). YaRN (ext_factor != 0) blends each angle
// with its extrapolation by a ramp over the dims and scales cos and sin by
// mscale, as ggml's rope_yarn does.
//
// Computed as ggml's CPU computes it, to the bit: theta_i in float by
// repeated multiplication with powf(freq_base, -2 / n_dims) from theta_0 = pos,
// cosf / sinf of freq_scale * theta_i, and each rotated value as one fma of
// x0 with a rounded product. The repeated product drifts from the exact angle
// by up to about i ulp (1e-3 rad at position 4096), but a query one ulp off
// rounds to another F16 in llama.cpp's attention, and models like Gemma 3
// carry such flips to the logits: qlens follows llama.cpp rather than the
// exact angle.
#include <algorithm>
#include <cmath>

#include "backend/cpu/ops.h"
#include "ops/op_table.h"

namespace qlens::cpu {

void op_rope(const Tensor& d, const KernelCtx& c) {
  const Tensor& a = *d.src[0];
  const Tensor& pos = *d.src[1];
  const int64_t n_dims = d.params[0];
  const RopeMode mode = rope_mode(d);
  const bool neox = rope_neox_pairs(mode);
  const RopeSections sections = rope_sections(d);
  const int n_positions = rope_is_multi(mode) ? 4 : 1;
  const float freq_base = d.param_f(2);
  const float freq_scale = d.param_f(3);
  const RopeYarnParams yarn = rope_yarn_params(d);
  const int64_t half = n_dims / 2;
  const int64_t n = a.ne[0];
  const int64_t xs = static_cast<int64_t>(a.nb[0] / sizeof(float));

  float* cos_t = reinterpret_cast<float*>(c.scratch);
  float* sin_t = cos_t + half;
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(n_dims));
  const float* factors = d.src[2] ? reinterpret_cast<const float*>(d.src[2]->data) : nullptr;

  int64_t r0, r1;
  split_range(a.nrows(), c.ith, c.nth, &r0, &r1);
  int64_t cached_token = -1;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    row_coords(a, r, &i1, &i2, &i3);
    if (i2 != cached_token) {
      cached_token = i2;
      // Each of the token's positions turns by theta_scale per pair, in
      // step (the multi-section modes take pair i's angle from the position
      // its section assigns, ggml's rope_multi).
      float thetas[4] = {};
      for (int p = 0; p < n_positions; ++p)
        thetas[p] = static_cast<float>(*reinterpret_cast<const int32_t*>(pos.at(p * a.ne[2] + i2)));
      for (int64_t i = 0; i < half; ++i) {
        const float theta = thetas[rope_position_of(mode, sections, i)];
        const float extrapolated = factors ? theta / factors[i] : theta;
        float t = freq_scale * extrapolated;
        if (yarn.ext_factor != 0.0f) {
          const float ramp =
              (1.0f - std::clamp((static_cast<float>(i) - yarn.low) / std::max(0.001f, yarn.high - yarn.low), 0.0f, 1.0f)) *
              yarn.ext_factor;
          t = t * (1.0f - ramp) + extrapolated * ramp;
        }
        cos_t[i] = std::cos(t) * yarn.mscale;
        sin_t[i] = std::sin(t) * yarn.mscale;
        for (int p = 0; p < n_positions; ++p) thetas[p] *= theta_scale;
      }
    }
    const float* x = reinterpret_cast<const float*>(a.at(0, i1, i2, i3));
    float* y = reinterpret_cast<float*>(d.at(0, i1, i2, i3));
    // Element indices of pair i: (i0, i0 + step).
    const int64_t step = neox ? half : 1;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t i0 = neox ? i : 2 * i;
      const float x0 = x[i0 * xs], x1 = x[(i0 + step) * xs];
      y[i0] = std::fma(x0, cos_t[i], -(x1 * sin_t[i]));
      y[i0 + step] = std::fma(x0, sin_t[i], x1 * cos_t[i]);
    }
    for (int64_t i = n_dims; i < n; ++i) y[i] = x[i * xs];
  }
}

}  // namespace qlens::cpu

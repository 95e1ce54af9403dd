// Dot products of the weight types that decode to small integer levels
// (src/quant/levels.h): the i-quants IQ1_S .. IQ3_S, TQ1_0 and TQ2_0 with
// activation rows quantized to Q8_K, per super-block the integer sums of
// each run, exact, then one float product,
//   d_x * (d_w * factor) * sum over runs (2 l + 1) * sum v q;
// Q1_0, Q2_0, MXFP4 and NVFP4 with Q8_0 activations, per activation block
// of 32 and weight scale, (scale * d_x) * sum v q. ggml's math. These are
// the plain reference kernels of the scalar table (matmul.cpp); the
// instruction sets' tables take the SIMD ones (simd_qdot_levels.h,
// simd_qdot_scaled.h) and only the type lists below from this file.
// Internal linkage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "qlens/types.h"
#include "quant/kquants.h"
#include "quant/legacy.h"
#include "quant/levels.h"

namespace qlens::cpu {
namespace {

// The run length of T, known when compiling (so that the int8 sums unroll):
// the format table's, checked against it once.
template <DType T>
constexpr int kLevelRun = T == DType::IQ2_XS || T == DType::IQ2_S || T == DType::IQ1_M ? 16
                          : T == DType::TQ1_0 || T == DType::TQ2_0                       ? 256
                                                                                         : 32;

template <DType T>
void qdot_levels(int64_t k, const void* w, const void* x, size_t x_stride, int nc, float* out) {
  static const quant::LevelFormat& f = *quant::level_format(T);
  constexpr int kRun = kLevelRun<T>;
  constexpr size_t kBlockBytes = kTypeFormats[static_cast<int>(T)].block_bytes;
  using XB = quant::kq::BlockQ8K;
  const int64_t nb = k / 256;
  float sum[4] = {};
  quant::Levels L;
  for (int64_t ib = 0; ib < nb; ++ib) {
    f.decode(static_cast<const char*>(w) + ib * kBlockBytes, L);
    const float dw = L.d * f.factor;
    for (int c = 0; c < nc; ++c) {
      const char* xb = static_cast<const char*>(x) + c * x_stride + ib * sizeof(XB);
      float dx;
      std::memcpy(&dx, xb + offsetof(XB, d), sizeof dx);
      const auto* q = reinterpret_cast<const int8_t*>(xb + offsetof(XB, qs));
      int32_t isum = 0;
      for (int r = 0; r < 256 / kRun; ++r) {
        int32_t s = 0;
        for (int e = 0; e < kRun; ++e) s += L.v[r * kRun + e] * q[r * kRun + e];
        isum += (2 * L.l[r] + 1) * s;
      }
      sum[c] += dx * dw * static_cast<float>(isum);
    }
  }
  for (int c = 0; c < nc; ++c) out[c] = sum[c];
}

template <DType T>
void qdot_scaled(int64_t k, const void* w, const void* x, size_t x_stride, int nc, float* out) {
  static const quant::ScaledFormat& f = *quant::scaled_format(T);
  using XB = quant::BlockQ8_0;
  const int64_t nb = k / f.block;
  const int per_x = 32 / f.sub;  // weight scales per activation block
  float sum[4] = {};
  quant::ScaledLevels L;
  for (int64_t ib = 0; ib < nb; ++ib) {
    f.decode(static_cast<const char*>(w) + ib * f.bytes, L);
    for (int c = 0; c < nc; ++c) {
      const char* xr = static_cast<const char*>(x) + c * x_stride;
      for (int j = 0; j < f.block / 32; ++j) {
        XB xb;
        std::memcpy(&xb, xr + (ib * f.block / 32 + j) * sizeof(XB), sizeof xb);
        const float dx = fp16_to_fp32(xb.d);
        for (int u = 0; u < per_x; ++u) {
          int32_t s = 0;
          for (int e = 0; e < f.sub; ++e) s += L.v[32 * j + f.sub * u + e] * xb.qs[f.sub * u + e];
          sum[c] += (L.scale[j * per_x + u] * dx) * static_cast<float>(s);
        }
      }
    }
  }
  for (int c = 0; c < nc; ++c) out[c] = sum[c];
}

// Calls f.template operator()<T>() for every such type: the lists every
// kernel table registers them from.
template <class F>
void for_each_scaled_qtype(F&& f) {
  f.template operator()<DType::Q1_0>();
  f.template operator()<DType::Q2_0>();
  f.template operator()<DType::MXFP4>();
  f.template operator()<DType::NVFP4>();
}
template <class F>
void for_each_level_qtype(F&& f) {
  f.template operator()<DType::IQ1_S>();
  f.template operator()<DType::IQ1_M>();
  f.template operator()<DType::IQ2_XXS>();
  f.template operator()<DType::IQ2_XS>();
  f.template operator()<DType::IQ2_S>();
  f.template operator()<DType::IQ3_XXS>();
  f.template operator()<DType::IQ3_S>();
  f.template operator()<DType::TQ1_0>();
  f.template operator()<DType::TQ2_0>();
}

}  // namespace
}  // namespace qlens::cpu

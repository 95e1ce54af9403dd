// Dot products of the weight types that decode to small integer levels (the
// i-quants IQ1_S .. IQ3_S, TQ1_0, TQ2_0: src/quant/levels.h) with activation
// rows quantized to Q8_K: per super-block the integer sums of each run,
// exact, then one float product,
//   d_x * (d_w * factor) * sum over runs (2 l + 1) * sum v q,
// ggml's math. Internal linkage: included by the scalar table (matmul.cpp)
// and by the instruction sets' tables (simd_matmul.h), where the compiler
// vectorizes the int8 sums.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "qlens/types.h"
#include "quant/kquants.h"
#include "quant/levels.h"

namespace qlens::cpu {
namespace {

template <DType T>
void qdot_levels(int64_t k, const void* w, const void* x, size_t x_stride, int nc, float* out) {
  static const quant::LevelFormat& f = *quant::level_format(T);
  constexpr size_t kBlockBytes = kTypeFormats[static_cast<int>(T)].block_bytes;
  using XB = quant::kq::BlockQ8K;
  const int64_t nb = k / 256;
  const int runs = 256 / f.run;
  float sum[4] = {};
  quant::Levels L;
  for (int64_t ib = 0; ib < nb; ++ib) {
    f.decode(static_cast<const char*>(w) + ib * kBlockBytes, L);
    for (int c = 0; c < nc; ++c) {
      const char* xb = static_cast<const char*>(x) + c * x_stride + ib * sizeof(XB);
      float dx;
      std::memcpy(&dx, xb + offsetof(XB, d), sizeof dx);
      const auto* q = reinterpret_cast<const int8_t*>(xb + offsetof(XB, qs));
      int32_t isum = 0;
      for (int r = 0; r < runs; ++r) {
        int32_t s = 0;
        for (int e = r * f.run; e < (r + 1) * f.run; ++e) s += L.v[e] * q[e];
        isum += (2 * L.l[r] + 1) * s;
      }
      sum[c] += dx * (L.d * f.factor) * static_cast<float>(isum);
    }
  }
  for (int c = 0; c < nc; ++c) out[c] = sum[c];
}

// Calls f.template operator()<T>() for every such type: the one list every
// kernel table registers them from.
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

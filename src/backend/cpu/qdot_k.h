// Dot products of K-quant weight rows (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS)
// with activation rows quantized to Q8_K (their vec_dot_type): the scalar
// reference kernels (internal linkage: safe to include from files compiled for
// any instruction set). The AVX2 kernels are in simd_qdot_k.h.
//
// The math is ggml's. Per super-block of 256, with sub-blocks j (16 or 32
// elements), integer sub-block scales s_j (and mins m_j), the weight's integer
// level v_e of each element and the activation's int8 q_e:
//   (d_x * d_w) * sum_j s_j sum_{e in j} v_e q_e  -  (d_x * dmin_w) * sum_j m_j B_j
// where B_j is the sum of q over sub-block j, taken from the Q8_K bsums (the
// second term only for the types with mins: Q2_K, Q4_K, Q5_K). The integer
// sums are exact; the float rounding differs between kernels only in the
// order of the super-block terms' additions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "qlens/types.h"
#include "quant/kquants.h"
#include "quant/kquants_codec.h"

namespace qlens::cpu {
namespace {

// The codec (block bytes <-> integer fields, src/quant/kquants_codec.h) of K
// weight type T.
template <DType T>
struct KCodec;
template <>
struct KCodec<DType::Q2_K> {
  using type = quant::kq::Q2K;
};
template <>
struct KCodec<DType::Q3_K> {
  using type = quant::kq::Q3K;
};
template <>
struct KCodec<DType::Q4_K> {
  using type = quant::kq::Q4K;
};
template <>
struct KCodec<DType::Q5_K> {
  using type = quant::kq::Q5K;
};
template <>
struct KCodec<DType::Q6_K> {
  using type = quant::kq::Q6K;
};
template <>
struct KCodec<DType::IQ4_XS> {
  using type = quant::kq::IQ4XS;
};

// The scalar reference kernel (VecDotFn): super-blocks in order, one float sum
// per activation row. Blocks are copied out of the (possibly unaligned) rows.
template <DType T>
void qdot_k_scalar(int64_t k, const void* w, const void* x, size_t x_stride, int nc, float* out) {
  using C = typename KCodec<T>::type;
  using B = typename C::Block;
  using XB = quant::kq::BlockQ8K;
  constexpr int kQK = quant::kq::kQK;
  const int64_t nb = k / kQK;
  const char* wr = static_cast<const char*>(w);
  float sum[4] = {};
  for (int64_t ib = 0; ib < nb; ++ib) {
    B blk;
    std::memcpy(&blk, wr + ib * sizeof(B), sizeof(B));
    quant::kq::Unpacked u;
    C::unpack(blk, u);
    int v[kQK];
    for (int e = 0; e < kQK; ++e) v[e] = static_cast<int>(C::level(u.q[e]));  // exact small integers
    const float dw = fp16_to_fp32(u.d), dmin = fp16_to_fp32(u.dmin);
    for (int c = 0; c < nc; ++c) {
      XB xb;
      std::memcpy(&xb, static_cast<const char*>(x) + c * x_stride + ib * sizeof(XB), sizeof(XB));
      int isum = 0, msum = 0;
      for (int j = 0; j < kQK / C::kSub; ++j) {
        int sumi = 0;
        for (int e = j * C::kSub; e < (j + 1) * C::kSub; ++e) sumi += v[e] * xb.qs[e];
        isum += u.sc[j] * sumi;
        if constexpr (C::kAffine) {
          int bsum = 0;
          for (int g = j * C::kSub / 16; g < (j + 1) * C::kSub / 16; ++g) bsum += xb.bsums[g];
          msum += u.m[j] * bsum;
        }
      }
      sum[c] += (xb.d * dw) * static_cast<float>(isum);
      if constexpr (C::kAffine) sum[c] -= (xb.d * dmin) * static_cast<float>(msum);
    }
  }
  for (int c = 0; c < nc; ++c) out[c] = sum[c];
}

// Calls f.template operator()<T>() for every K-quant weight type (Q8_K activations): the one list
// every kernel table registers them from.
template <class F>
void for_each_k_qtype(F&& f) {
  f.template operator()<DType::Q2_K>();
  f.template operator()<DType::Q3_K>();
  f.template operator()<DType::Q4_K>();
  f.template operator()<DType::Q5_K>();
  f.template operator()<DType::Q6_K>();
  f.template operator()<DType::IQ4_XS>();
}

}  // namespace
}  // namespace qlens::cpu

// Dot products of legacy quantized weight rows (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// IQ4_NL) with activation rows quantized to Q8_0 / Q8_1 (the weight type's
// vec_dot_type): the per-type block description shared by all instruction
// sets, and the scalar reference kernels (internal linkage: safe to include
// from files compiled for any instruction set).
//
// The math is ggml's. Per block of 32, with v_j the weight's integer value
// (signed level for the symmetric types, unsigned code for the offset types)
// and q_j the activation's int8:
//   symmetric (Q4_0, Q5_0, Q8_0, IQ4_NL):  (d_w * d_x) * sum_j v_j q_j
//   offset    (Q4_1, Q5_1):                (d_w * d_x) * sum_j v_j q_j + m_w * s_x
// where s_x is the Q8_1 block's stored d * sum(q). The integer sum is exact;
// the float rounding differs between kernels only in the order of the block
// terms' additions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "qlens/types.h"
#include "quant/legacy.h"
#include "quant/registry.h"

namespace qlens::cpu {
namespace {

// The block description of weight type T: Block (the weight block), XBlock
// (the activation block), kBits (4, 5 or 8), kBias (subtracted from the
// code: 8 for Q4_0, 16 for Q5_0), kTable (IQ4_NL's levels), kOffset (m and s).
template <DType T>
struct QFormat;

template <>
struct QFormat<DType::Q4_0> {
  using Block = quant::BlockQ4_0;
  using XBlock = quant::BlockQ8_0;
  static constexpr int kBits = 4, kBias = 8;
  static constexpr bool kTable = false, kOffset = false;
};
template <>
struct QFormat<DType::Q4_1> {
  using Block = quant::BlockQ4_1;
  using XBlock = quant::BlockQ8_1;
  static constexpr int kBits = 4, kBias = 0;
  static constexpr bool kTable = false, kOffset = true;
};
template <>
struct QFormat<DType::Q5_0> {
  using Block = quant::BlockQ5_0;
  using XBlock = quant::BlockQ8_0;
  static constexpr int kBits = 5, kBias = 16;
  static constexpr bool kTable = false, kOffset = false;
};
template <>
struct QFormat<DType::Q5_1> {
  using Block = quant::BlockQ5_1;
  using XBlock = quant::BlockQ8_1;
  static constexpr int kBits = 5, kBias = 0;
  static constexpr bool kTable = false, kOffset = true;
};
template <>
struct QFormat<DType::Q8_0> {
  using Block = quant::BlockQ8_0;
  using XBlock = quant::BlockQ8_0;
  static constexpr int kBits = 8, kBias = 0;
  static constexpr bool kTable = false, kOffset = false;
};
template <>
struct QFormat<DType::IQ4_NL> {
  using Block = quant::BlockIq4nl;
  using XBlock = quant::BlockQ8_0;
  static constexpr int kBits = 4, kBias = 0;
  static constexpr bool kTable = true, kOffset = false;
};

// The weight types with quantized dot kernels.
inline constexpr DType kQdotTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0,
                                       DType::Q5_1, DType::Q8_0, DType::IQ4_NL};

// Byte offsets of the block fields (blocks are read from byte buffers of any
// alignment: fields are copied out, never dereferenced through the struct).
template <class B>
constexpr size_t qs_offset() {
  return offsetof(B, qs);
}

inline uint16_t load_u16(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The 32 integer values v_j of a weight block (see the top of the file).
template <DType T>
void block_values(const char* blk, int v[quant::kLegacyBlock]) {
  using F = QFormat<T>;
  using B = typename F::Block;
  const auto* qs = reinterpret_cast<const unsigned char*>(blk + qs_offset<B>());
  if constexpr (F::kBits == 8) {
    for (int j = 0; j < 32; ++j) v[j] = static_cast<int8_t>(qs[j]);
  } else {
    uint32_t qh = 0;
    if constexpr (F::kBits == 5) std::memcpy(&qh, blk + offsetof(B, qh), sizeof qh);  // little-endian
    for (int j = 0; j < 16; ++j) {
      int lo = qs[j] & 0x0f, hi = qs[j] >> 4;
      if constexpr (F::kBits == 5) {
        lo |= static_cast<int>((qh >> j) & 1) << 4;
        hi |= static_cast<int>((qh >> (j + 16)) & 1) << 4;
      }
      if constexpr (F::kTable) {
        v[j] = quant::kIq4nlValues[lo];
        v[j + 16] = quant::kIq4nlValues[hi];
      } else {
        v[j] = lo - F::kBias;
        v[j + 16] = hi - F::kBias;
      }
    }
  }
}

// The scalar reference kernel (VecDotFn): blocks in order, one float sum.
template <DType T>
void qdot_scalar(int64_t k, const void* w, const void* x, size_t x_stride, int nc, float* out) {
  using F = QFormat<T>;
  using B = typename F::Block;
  using XB = typename F::XBlock;
  const int64_t nb = k / quant::kLegacyBlock;
  const char* wr = static_cast<const char*>(w);
  for (int c = 0; c < nc; ++c) {
    const char* xr = static_cast<const char*>(x) + c * x_stride;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < nb; ++ib) {
      const char* wb = wr + ib * sizeof(B);
      const char* xb = xr + ib * sizeof(XB);
      int v[32];
      block_values<T>(wb, v);
      const auto* q = reinterpret_cast<const int8_t*>(xb + qs_offset<XB>());
      int sumi = 0;
      for (int j = 0; j < 32; ++j) sumi += v[j] * q[j];
      const float d = fp16_to_fp32(load_u16(wb + offsetof(B, d))) * fp16_to_fp32(load_u16(xb + offsetof(XB, d)));
      if constexpr (F::kOffset) {
        const float ms = fp16_to_fp32(load_u16(wb + offsetof(B, m))) * fp16_to_fp32(load_u16(xb + offsetof(XB, s)));
        sum += d * static_cast<float>(sumi) + ms;
      } else {
        sum += d * static_cast<float>(sumi);
      }
    }
    out[c] = sum;
  }
}

// Calls f.template operator()<T>() for every legacy quantized weight type: the one list
// every kernel table registers them from.
template <class F>
void for_each_legacy_qtype(F&& f) {
  f.template operator()<DType::Q4_0>();
  f.template operator()<DType::Q4_1>();
  f.template operator()<DType::Q5_0>();
  f.template operator()<DType::Q5_1>();
  f.template operator()<DType::Q8_0>();
  f.template operator()<DType::IQ4_NL>();
}

}  // namespace
}  // namespace qlens::cpu

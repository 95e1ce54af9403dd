// Reading and writing single elements of the plain float types (internal
// linkage: safe to include from files compiled for any instruction set).
#pragma once

#include <cstdint>
#include <cstring>

#include "qlens/types.h"

namespace qlens::cpu {
namespace {

// The element at p (of type F32, F16, BF16 or I32) as a float.
inline float load_elem(DType type, const void* p) {
  uint16_t h;
  switch (type) {
    case DType::F32: {
      float f;
      std::memcpy(&f, p, sizeof f);
      return f;
    }
    case DType::F16:
      std::memcpy(&h, p, sizeof h);
      return fp16_to_fp32(h);
    case DType::BF16:
      std::memcpy(&h, p, sizeof h);
      return bf16_to_fp32(h);
    case DType::I32: {
      int32_t i;
      std::memcpy(&i, p, sizeof i);
      return static_cast<float>(i);
    }
    default:
      return 0.0f;  // callers check types up front
  }
}

// Stores f at p as type F32, F16 or BF16.
inline void store_elem(DType type, void* p, float f) {
  uint16_t h;
  switch (type) {
    case DType::F32:
      std::memcpy(p, &f, sizeof f);
      break;
    case DType::F16:
      h = fp32_to_fp16(f);
      std::memcpy(p, &h, sizeof h);
      break;
    case DType::BF16:
      h = fp32_to_bf16(f);
      std::memcpy(p, &h, sizeof h);
      break;
    default:
      break;
  }
}

// Element i of a row of type WT (F32, F16 or BF16), known at compile time.
template <DType WT>
float weight_at(const void* w, int64_t i) {
  if constexpr (WT == DType::F32) {
    return static_cast<const float*>(w)[i];
  } else if constexpr (WT == DType::F16) {
    return fp16_to_fp32(static_cast<const uint16_t*>(w)[i]);
  } else {
    static_assert(WT == DType::BF16);
    return bf16_to_fp32(static_cast<const uint16_t*>(w)[i]);
  }
}

}  // namespace
}  // namespace qlens::cpu

// Element types and their traits.
//
// The types (DType, by GGUF's type ids) and what the format says of each
// (name, block size, bytes per block) come from the one list of types,
// src/core/types.tsv, through the generated qlens/type_list.h. Every id the
// format defines has a row, so files with types the engine cannot compute
// with still load, are inspected and copied, and are refused by name by the
// tools that would compute with them rather than misread. TypeTraits adds
// the functions the engine computes with: src/quant/traits.cpp binds them,
// nullptr for the types it cannot compute with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "qlens/type_list.h"

namespace qlens {

// The format facts of a type id, or nullptr when the id is not a type.
constexpr const TypeFormat* find_type_format(uint32_t id) {
  return id < kDTypeCount && kTypeFormats[id].name ? &kTypeFormats[id] : nullptr;
}

// The plain floating-point types (F32, F16, BF16).
constexpr bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// Converts `n` elements (a multiple of the block size) to or from float.
using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);
// Quantizes `nrows` rows of `n_per_row` values (a multiple of the block size)
// into rows of this type, choosing each row's scales to minimize the squared
// error weighted per column by importance[0..n_per_row) (from an imatrix);
// importance == nullptr: the type's default weighting. from_float is the
// fast, unweighted conversion (used for activations).
using QuantizeRowsFn = void (*)(const float* src, void* dst, int64_t nrows, int64_t n_per_row,
                                const float* importance);

// A type's format facts and the functions the engine computes with.
struct TypeTraits : TypeFormat {
  ToFloatFn to_float = nullptr;      // nullptr: the engine cannot read (compute with) this type
  FromFloatFn from_float = nullptr;  // nullptr: the engine cannot write this type
  QuantizeRowsFn quantize = nullptr;  // nullptr: no weighted quantizer (not a weight type)
  // Type that activations are converted to before a dot product with a weight
  // row of this type (F32 for the plain float types).
  DType vec_dot_type = DType::F32;
  // Where a block may start in memory for the engine to read it in place (a
  // float's 4, the 2 of a quantized block's fp16 scale); 1 for the types the
  // engine cannot read.
  size_t data_alignment = 1;
};

// The traits of a type id, or nullptr when the id is not a known type
// (src/quant/traits.cpp: the table that binds quant's functions).
const TypeTraits* find_type_traits(uint32_t id);
// The traits of a valid type (asserts it is known).
const TypeTraits& type_traits(DType type);

// Format facts only (src/core/types.cpp).
std::string_view type_name(DType type);                      // "unknown" for an id that is not a type
std::optional<DType> type_from_name(std::string_view name);  // case-insensitive

// Bytes of a row of `n` elements; n must be a multiple of the block size.
size_t row_bytes(DType type, int64_t n);

// IEEE half and bfloat16 conversion (round to nearest even; NaN kept NaN).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

}  // namespace qlens

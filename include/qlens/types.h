// Element types and their traits.
//
// Type ids are GGUF's (and ggml's), so a tensor's type in a file maps to a DType
// by value. Every type the format defines has a row in the traits table (name,
// block size, bytes per block) so that files with types we cannot compute with
// still load, are inspected and are rejected by name rather than misread. The
// function pointers are filled in for types the engine computes with; block-
// quantized types plug in here without changes elsewhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace qlens {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  // 4 and 5 were Q4_2 and Q4_3, removed from the format.
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  // 31..33 were Q4_0_4_4, Q4_0_4_8, Q4_0_8_8, removed from the format.
  TQ1_0 = 34,
  TQ2_0 = 35,
};

constexpr uint32_t kDTypeCount = 36;

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

struct TypeTraits {
  const char* name = nullptr;  // nullptr: the id is not a type
  int64_t block_size = 0;      // elements per block (1 for plain types)
  size_t block_bytes = 0;      // bytes per block
  bool is_quantized = false;
  ToFloatFn to_float = nullptr;      // nullptr: the engine cannot read this type
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

// The traits of a type id, or nullptr when the id is not a known type.
const TypeTraits* find_type_traits(uint32_t id);
// The traits of a valid type (asserts it is known).
const TypeTraits& type_traits(DType type);

std::string_view type_name(DType type);
std::optional<DType> type_from_name(std::string_view name);  // case-insensitive

// Bytes of a row of `n` elements; n must be a multiple of the block size.
size_t row_bytes(DType type, int64_t n);

// IEEE half and bfloat16 conversion (round to nearest even; NaN kept NaN).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

}  // namespace qlens

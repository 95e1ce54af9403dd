// The block-quantized types' functions, bound to core's format facts in the
// type traits table (src/quant/traits.cpp). Each family of formats lives in
// its own file and answers for its types; a type computed with is a new case
// in that file (its format facts are a row of src/core/types.tsv).
#pragma once

#include "qlens/types.h"

namespace qlens::quant {

struct Functions {
  ToFloatFn to_float = nullptr;
  FromFloatFn from_float = nullptr;
  QuantizeRowsFn quantize = nullptr;
  DType vec_dot_type = DType::F32;  // activation type for dot products with this weight type
  size_t block_alignment = 1;       // alignof the block's struct, which code reading blocks in place needs
};

// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, IQ4_NL (blocks of 32): src/quant/legacy.cpp.
// nullptr for other types.
const Functions* legacy_functions(DType type);
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_XS (super-blocks of 256): src/quant/kquants.cpp.
const Functions* kquant_functions(DType type);

// The 16 non-uniform levels of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

}  // namespace qlens::quant

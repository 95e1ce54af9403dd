// The block-quantized types' functions, bound to core's format facts in the
// type traits table (src/quant/traits.cpp). Each family of formats lives in
// its own file with a table of its types; a type computed with is a row of
// that table (its format facts are a row of src/core/types.tsv).
#pragma once

#include <span>

#include "qlens/types.h"

namespace qlens::quant {

struct Functions {
  ToFloatFn to_float = nullptr;
  FromFloatFn from_float = nullptr;
  QuantizeRowsFn quantize = nullptr;
  DType vec_dot_type = DType::F32;  // activation type for dot products with this weight type
  size_t block_alignment = 1;       // alignof the block's struct, which code reading blocks in place needs
};

// A type's functions. Each family file has one table of these, a row per
// type it computes with; the type traits table (traits.cpp) takes them all.
struct Binding {
  DType type;
  Functions functions;
};

// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, IQ4_NL (blocks of 32): src/quant/legacy.cpp.
std::span<const Binding> legacy_bindings();
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_XS (super-blocks of 256): src/quant/kquants.cpp.
std::span<const Binding> kquant_bindings();
// IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S (lattice grids, super-blocks of 256): src/quant/iquants.cpp.
std::span<const Binding> iquant_bindings();
// Q1_0, Q2_0, TQ1_0, TQ2_0 (one scale per block): src/quant/lowbit.cpp.
std::span<const Binding> lowbit_bindings();
// MXFP4, NVFP4 (E2M1 codes): src/quant/fp4.cpp.
std::span<const Binding> fp4_bindings();

// The 16 non-uniform levels of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

}  // namespace qlens::quant

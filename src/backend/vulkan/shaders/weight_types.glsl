// How mul_mat and get_rows read a weight type. A type plugs in by defining,
// under its TYPE_* macro:
//   BLOCK_SIZE   elements per block (1 for the plain float types)
//   BLOCK_BYTES  bytes per block
//   SUB_SIZE     elements one dequantize_sub call produces (divides
//                BLOCK_SIZE and 32, the matrix-matrix tile depth)
//   dequantize_sub(block_byte, sub, v)  elements [sub*SUB_SIZE, +SUB_SIZE)
//                of the block starting at byte block_byte of the weights
// reading the weights through arrays declared at binding WEIGHT_BINDING.
// Byte offsets of blocks are even (ggml's blocks are 2-byte aligned), so
// scales are read as half words and quants as bytes.
#ifndef WEIGHT_BINDING
#define WEIGHT_BINDING 0
#endif

#if defined(TYPE_F32)
layout(binding = WEIGHT_BINDING) readonly buffer WeightF32 { float w_f32[]; };
const uint BLOCK_SIZE = 1u, BLOCK_BYTES = 4u, SUB_SIZE = 1u;
void dequantize_sub(uint block_byte, uint sub, out float v[SUB_SIZE]) { v[0] = w_f32[block_byte >> 2]; }

#elif defined(TYPE_F16)
layout(binding = WEIGHT_BINDING) readonly buffer WeightU16 { uint16_t w_u16[]; };
const uint BLOCK_SIZE = 1u, BLOCK_BYTES = 2u, SUB_SIZE = 1u;
void dequantize_sub(uint block_byte, uint sub, out float v[SUB_SIZE]) {
  v[0] = half_to_float(uint(w_u16[block_byte >> 1]));
}

#elif defined(TYPE_BF16)
layout(binding = WEIGHT_BINDING) readonly buffer WeightU16 { uint16_t w_u16[]; };
const uint BLOCK_SIZE = 1u, BLOCK_BYTES = 2u, SUB_SIZE = 1u;
void dequantize_sub(uint block_byte, uint sub, out float v[SUB_SIZE]) {
  v[0] = bf16_to_float(uint(w_u16[block_byte >> 1]));
}

#elif defined(TYPE_Q8_0)
// {f16 d; int8 qs[32]}: value j = d * qs[j].
layout(binding = WEIGHT_BINDING) readonly buffer WeightU16 { uint16_t w_u16[]; };
layout(binding = WEIGHT_BINDING) readonly buffer WeightI8 { int8_t w_i8[]; };
const uint BLOCK_SIZE = 32u, BLOCK_BYTES = 34u, SUB_SIZE = 8u;
void dequantize_sub(uint block_byte, uint sub, out float v[SUB_SIZE]) {
  const float d = half_to_float(uint(w_u16[block_byte >> 1]));
  const uint q = block_byte + 2u + sub * SUB_SIZE;
  for (uint j = 0u; j < SUB_SIZE; ++j) v[j] = d * float(int(w_i8[q + j]));
}

#elif defined(TYPE_Q4_0)
// {f16 d; uint8 qs[16]}: value j < 16 = d * ((qs[j] & 15) - 8),
// j >= 16 = d * ((qs[j - 16] >> 4) - 8).
layout(binding = WEIGHT_BINDING) readonly buffer WeightU16 { uint16_t w_u16[]; };
layout(binding = WEIGHT_BINDING) readonly buffer WeightU8 { uint8_t w_u8[]; };
const uint BLOCK_SIZE = 32u, BLOCK_BYTES = 18u, SUB_SIZE = 8u;
void dequantize_sub(uint block_byte, uint sub, out float v[SUB_SIZE]) {
  const float d = half_to_float(uint(w_u16[block_byte >> 1]));
  const uint q = block_byte + 2u + (sub & 1u) * SUB_SIZE;  // subs 0,1: low nibbles; 2,3: high
  const uint shift = (sub >> 1) * 4u;
  for (uint j = 0u; j < SUB_SIZE; ++j) v[j] = d * (float((uint(w_u8[q + j]) >> shift) & 15u) - 8.0);
}

#else
#error "weight_types.glsl: define one TYPE_* macro"
#endif

const uint SUBS_PER_BLOCK = BLOCK_SIZE / SUB_SIZE;

// Elements [u*SUB_SIZE, +SUB_SIZE) of the row starting at byte row_byte.
void dequantize_unit(uint row_byte, uint u, out float v[SUB_SIZE]) {
  dequantize_sub(row_byte + (u / SUBS_PER_BLOCK) * BLOCK_BYTES, u % SUBS_PER_BLOCK, v);
}

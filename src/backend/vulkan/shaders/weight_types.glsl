// How mul_mat and get_rows read a weight type. A type plugs in by its SUB_SIZE
// in the vulkan column of src/core/types.tsv and by defining, under its
// TYPE_* macro:
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

#else  // the block types: blocks are read as bytes and half words
layout(binding = WEIGHT_BINDING) readonly buffer WeightU16 { uint16_t w_u16[]; };
layout(binding = WEIGHT_BINDING) readonly buffer WeightU8 { uint8_t w_u8[]; };
layout(binding = WEIGHT_BINDING) readonly buffer WeightI8 { int8_t w_i8[]; };
uint byte_at(uint b) { return uint(w_u8[b]); }
int sbyte_at(uint b) { return int(w_i8[b]); }
float half_at(uint b) { return half_to_float(uint(w_u16[b >> 1])); }  // b even
uint half_bits_at(uint b) { return uint(w_u16[b >> 1]); }
// Little-endian 32 bits at a 2-byte aligned b.
uint u32_at(uint b) { return half_bits_at(b) | (half_bits_at(b + 2u) << 16); }
// The 16 levels of IQ4_NL and IQ4_XS (kIq4nlValues).
const float IQ4NL_VALUES[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0,
                                         25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

// Legacy blocks of 32 with 4-bit codes: element j in byte j % 16 of the codes
// at qs, low nibble for j < 16.
uint nibble32(uint qs, uint j) { return (byte_at(qs + (j & 15u)) >> ((j & 16u) >> 2)) & 15u; }

// K-quant super-blocks of 256 are read in subs of 16 elements (every
// sub-block scale covers whole subs). Element e = 16 sub + i.
// 2-bit crumbs (Q2_K, Q3_K): byte 32 (e / 128) + e % 32, bit 2 ((e % 128) / 32).
uint crumb(uint qs, uint sub, uint i) {
  return (byte_at(qs + 32u * (sub >> 3) + 16u * (sub & 1u) + i) >> (2u * ((sub & 7u) >> 1))) & 3u;
}
// One bit per element (Q3_K hmask, Q5_K qh): bit e / 32 of byte e % 32.
uint plane_bit(uint plane, uint sub, uint i) { return (byte_at(plane + 16u * (sub & 1u) + i) >> (sub >> 1)) & 1u; }
// 8 6-bit scales and mins in 12 bytes (Q4_K, Q5_K), sub-block j of 32.
void scale_min_k4(uint s, uint j, out float sc, out float m) {
  if (j < 4u) {
    sc = float(byte_at(s + j) & 63u);
    m = float(byte_at(s + j + 4u) & 63u);
  } else {
    const uint lo = byte_at(s + j + 4u);
    sc = float((lo & 15u) | ((byte_at(s + j - 4u) >> 6) << 4));
    m = float((lo >> 4) | ((byte_at(s + j) >> 6) << 4));
  }
}

#if defined(TYPE_Q8_0)
// {f16 d; int8 qs[32]}: value j = d * qs[j].
const uint BLOCK_SIZE = 32u, BLOCK_BYTES = 34u, SUB_SIZE = 8u;
void dequantize_sub(uint block_byte, uint sub, out float v[SUB_SIZE]) {
  const float d = half_at(block_byte);
  const uint q = block_byte + 2u + sub * SUB_SIZE;
  for (uint j = 0u; j < SUB_SIZE; ++j) v[j] = d * float(sbyte_at(q + j));
}

#elif defined(TYPE_Q4_0) || defined(TYPE_IQ4_NL)
// {f16 d; uint8 qs[16]}: Q4_0 value j = d * (c_j - 8), IQ4_NL d * values[c_j].
const uint BLOCK_SIZE = 32u, BLOCK_BYTES = 18u, SUB_SIZE = 8u;
void dequantize_sub(uint block_byte, uint sub, out float v[SUB_SIZE]) {
  const float d = half_at(block_byte);
  for (uint s = 0u; s < SUB_SIZE; ++s) {
    const uint c = nibble32(block_byte + 2u, sub * SUB_SIZE + s);
#if defined(TYPE_Q4_0)
    v[s] = d * (float(c) - 8.0);
#else
    v[s] = d * IQ4NL_VALUES[c];
#endif
  }
}

#elif defined(TYPE_Q4_1) || defined(TYPE_Q5_0) || defined(TYPE_Q5_1)
// Q4_1 {f16 d, m; uint8 qs[16]}: c_j * d + m. Q5_0 {f16 d; uint8 qh[4],
// qs[16]}: (c_j - 16) * d, Q5_1 {f16 d, m; qh[4]; qs[16]}: c_j * d + m, the
// fifth bit of c_j being bit j of the little-endian qh.
#if defined(TYPE_Q4_1)
const uint BLOCK_SIZE = 32u, BLOCK_BYTES = 20u, SUB_SIZE = 8u, QH = 0u, QS = 4u;
#elif defined(TYPE_Q5_0)
const uint BLOCK_SIZE = 32u, BLOCK_BYTES = 22u, SUB_SIZE = 8u, QH = 2u, QS = 6u;
#else
const uint BLOCK_SIZE = 32u, BLOCK_BYTES = 24u, SUB_SIZE = 8u, QH = 4u, QS = 8u;
#endif
void dequantize_sub(uint block_byte, uint sub, out float v[SUB_SIZE]) {
  const float d = half_at(block_byte);
#if defined(TYPE_Q5_0)
  const uint qh = u32_at(block_byte + QH);
#else
  const float m = half_at(block_byte + 2u);
#if defined(TYPE_Q5_1)
  const uint qh = u32_at(block_byte + QH);
#else
  const uint qh = 0u;
#endif
#endif
  for (uint s = 0u; s < SUB_SIZE; ++s) {
    const uint j = sub * SUB_SIZE + s;
    const uint c = nibble32(block_byte + QS, j) | (((qh >> j) & 1u) << 4);
#if defined(TYPE_Q5_0)
    v[s] = float(int(c) - 16) * d;
#else
    precise float x = float(c) * d + m;
    v[s] = x;
#endif
  }
}

#elif defined(TYPE_Q2_K)
// {uint8 scales[16] (scale | min << 4); qs[64] (crumbs); f16 d, dmin}:
// d * sc * q - dmin * m per sub-block of 16.
const uint BLOCK_SIZE = 256u, BLOCK_BYTES = 84u, SUB_SIZE = 16u;
void dequantize_sub(uint block_byte, uint sub, out float v[SUB_SIZE]) {
  const uint sm = byte_at(block_byte + sub);
  const float dl = half_at(block_byte + 80u) * float(sm & 15u);
  const float ml = half_at(block_byte + 82u) * float(sm >> 4);
  for (uint i = 0u; i < SUB_SIZE; ++i) {
    precise float x = dl * float(crumb(block_byte + 16u, sub, i)) - ml;
    v[i] = x;
  }
}

#elif defined(TYPE_Q3_K)
// {uint8 hmask[32], qs[64], scales[12]; f16 d}: d * (s_j - 32) * (q - 4), q =
// crumb | hmask bit << 2; 6-bit scale j: low 4 bits in the low (j < 8) or
// high nibble of scales[j % 8], top 2 bits at bit 2 (j / 4) of scales[8 + j % 4].
const uint BLOCK_SIZE = 256u, BLOCK_BYTES = 110u, SUB_SIZE = 16u;
void dequantize_sub(uint block_byte, uint sub, out float v[SUB_SIZE]) {
  const uint s = block_byte + 96u;
  const uint lo = (byte_at(s + (sub & 7u)) >> ((sub >> 3) * 4u)) & 15u;
  const uint hi = (byte_at(s + 8u + (sub & 3u)) >> (2u * (sub >> 2))) & 3u;
  const float dl = half_at(block_byte + 108u) * float(int(lo | (hi << 4)) - 32);
  for (uint i = 0u; i < SUB_SIZE; ++i) {
    const uint q = crumb(block_byte + 32u, sub, i) | (plane_bit(block_byte, sub, i) << 2);
    v[i] = dl * float(int(q) - 4);
  }
}

#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
// {f16 d, dmin; uint8 scales[12]; (Q5_K: qh[32]); qs[128]}: d * s_j * q -
// dmin * m_j per sub-block of 32; nibbles in runs of 64 (element e in byte
// 32 (e / 64) + e % 32, high nibble for e % 64 >= 32); Q5_K's fifth bits in qh.
#if defined(TYPE_Q4_K)
const uint BLOCK_SIZE = 256u, BLOCK_BYTES = 144u, SUB_SIZE = 16u, QS = 16u;
#else
const uint BLOCK_SIZE = 256u, BLOCK_BYTES = 176u, SUB_SIZE = 16u, QS = 48u;
#endif
void dequantize_sub(uint block_byte, uint sub, out float v[SUB_SIZE]) {
  float sc, m;
  scale_min_k4(block_byte + 4u, sub >> 1, sc, m);
  const float dl = half_at(block_byte) * sc, ml = half_at(block_byte + 2u) * m;
  const uint qs = block_byte + QS + 32u * (sub >> 2) + 16u * (sub & 1u), shift = ((sub >> 1) & 1u) * 4u;
  for (uint i = 0u; i < SUB_SIZE; ++i) {
    uint q = (byte_at(qs + i) >> shift) & 15u;
#if defined(TYPE_Q5_K)
    q |= plane_bit(block_byte + 16u, sub, i) << 4;
#endif
    precise float x = dl * float(q) - ml;
    v[i] = x;
  }
}

#elif defined(TYPE_Q6_K)
// {uint8 ql[128], qh[64]; int8 scales[16]; f16 d}: d * scales[j] * (q - 32).
// Element e = 128 h + 32 k + l: low 4 bits in ql[64 h + l + 32 (k % 2)] (high
// nibble for k >= 2), top 2 bits at bit 2 k of qh[32 h + l].
const uint BLOCK_SIZE = 256u, BLOCK_BYTES = 210u, SUB_SIZE = 16u;
void dequantize_sub(uint block_byte, uint sub, out float v[SUB_SIZE]) {
  const float dl = half_at(block_byte + 208u) * float(sbyte_at(block_byte + 192u + sub));
  const uint l0 = 16u * (sub & 1u);
  const uint ql = block_byte + 64u * (sub >> 3) + 32u * ((sub >> 1) & 1u) + l0;
  const uint qh = block_byte + 128u + 32u * (sub >> 3) + l0;
  const uint lo_shift = ((sub & 7u) >> 2) * 4u, hi_shift = 2u * ((sub & 7u) >> 1);
  for (uint i = 0u; i < SUB_SIZE; ++i) {
    const uint q = ((byte_at(ql + i) >> lo_shift) & 15u) | (((byte_at(qh + i) >> hi_shift) & 3u) << 4);
    v[i] = dl * float(int(q) - 32);
  }
}

#elif defined(TYPE_IQ4_XS)
// {f16 d; uint16 scales_h; uint8 scales_l[4], qs[128]}: d * (s_j - 32) *
// values[q] per sub-block of 32; s_j: low 4 bits in scales_l[j / 2] (low
// nibble for even j), top 2 bits at bit 2 j of scales_h; nibbles in runs of
// 32 (element e in byte 16 (e / 32) + e % 16, high nibble for e % 32 >= 16).
const uint BLOCK_SIZE = 256u, BLOCK_BYTES = 136u, SUB_SIZE = 16u;
void dequantize_sub(uint block_byte, uint sub, out float v[SUB_SIZE]) {
  const uint j = sub >> 1;
  const uint lo = (byte_at(block_byte + 4u + (j >> 1)) >> (4u * (j & 1u))) & 15u;
  const uint hi = (half_bits_at(block_byte + 2u) >> (2u * j)) & 3u;
  const float dl = half_at(block_byte) * float(int(lo | (hi << 4)) - 32);
  const uint qs = block_byte + 8u + 16u * j, shift = (sub & 1u) * 4u;
  for (uint i = 0u; i < SUB_SIZE; ++i) v[i] = dl * IQ4NL_VALUES[(byte_at(qs + i) >> shift) & 15u];
}

#else
#error "weight_types.glsl: define one TYPE_* macro"
#endif
#endif

// The host sizes its dispatches from src/core/types.tsv (vulkan.cmake passes
// the type's row as LIST_*): a section that disagrees with it fails to compile
// here ("array size must be a positive integer").
const bool SECTION_MATCHES_TYPE_LIST =
    BLOCK_SIZE == LIST_BLOCK_SIZE && BLOCK_BYTES == LIST_BLOCK_BYTES && SUB_SIZE == LIST_SUB_SIZE;
const uint SECTION_CHECK[SECTION_MATCHES_TYPE_LIST ? 1 : 0] = uint[](0u);

const uint SUBS_PER_BLOCK = BLOCK_SIZE / SUB_SIZE;

// Elements [u*SUB_SIZE, +SUB_SIZE) of the row starting at byte row_byte.
void dequantize_unit(uint row_byte, uint u, out float v[SUB_SIZE]) {
  dequantize_sub(row_byte + (u / SUBS_PER_BLOCK) * BLOCK_BYTES, u % SUBS_PER_BLOCK, v);
}

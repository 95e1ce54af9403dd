// How mul_mat and get_rows read a weight type. A type plugs in by its SUB_SIZE
// in the vulkan column of src/core/types.tsv and by defining, under its
// TYPE_* macro:
//   BLOCK_SIZE   elements per block (1 for the plain float types)
//   BLOCK_BYTES  bytes per block
//   SUB_SIZE     elements one dequantize_sub call produces (divides
//                BLOCK_SIZE and 32, the matrix-matrix tile depth)
//   dequantize_sub(block_byte, sub, v)  elements [sub*SUB_SIZE, +SUB_SIZE)
//                of the block starting at byte block_byte of the weights
// reading the weights through arrays declared at binding WEIGHT_BINDING (the
// i-quants also read the lattice buffer at LATTICE_BINDING, the shader's last:
// the host binds it for every weight shader).
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

#elif defined(TYPE_IQ2_XXS) || defined(TYPE_IQ2_XS) || defined(TYPE_IQ2_S) || defined(TYPE_IQ3_XXS) || \
    defined(TYPE_IQ3_S) || defined(TYPE_IQ1_S) || defined(TYPE_IQ1_M)
// The i-quants (src/quant/iquants.h, iq_grids.h): a sub is 8 elements, one
// lattice point (the 3-bit grids: two half-points of 4), whose coordinate j
// is the level of digit j of its compact form (the lattice buffer at binding
// LATTICE_BINDING, which the shader defines; vulkan.cmake), negated by sign
// bit j (the 2- and 3-bit grids) or shifted by +-1/8 (IQ1_*), times its run's
// scale, in ggml's float order.
#if defined(TYPE_IQ2_XXS)
const uint BLOCK_BYTES = 66u;
#elif defined(TYPE_IQ2_XS)
const uint BLOCK_BYTES = 74u;
#elif defined(TYPE_IQ2_S)
const uint BLOCK_BYTES = 82u;
#elif defined(TYPE_IQ3_XXS)
const uint BLOCK_BYTES = 98u;
#elif defined(TYPE_IQ3_S)
const uint BLOCK_BYTES = 110u;
#elif defined(TYPE_IQ1_S)
const uint BLOCK_BYTES = 50u;
#else
const uint BLOCK_BYTES = 56u;
#endif
#include "iq_grids.glsl"
layout(binding = LATTICE_BINDING) readonly buffer Lattice { uint16_t lattice[]; };
// Point i of the list starting at `list` (an offset of iq_grids.glsl), compact.
uint point(uint list, uint i) { return uint(lattice[list + i]); }
const uint BLOCK_SIZE = 256u, SUB_SIZE = 8u;
#if defined(TYPE_IQ3_XXS) || defined(TYPE_IQ3_S)
const uint DIGIT_BITS = 3u;
#if defined(TYPE_IQ3_XXS)
const float GRID_LEVELS[8] = float[8](4.0, 12.0, 20.0, 28.0, 36.0, 44.0, 52.0, 62.0);
#else
const float GRID_LEVELS[8] = float[8](1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0, 15.0);
#endif
#elif defined(TYPE_IQ1_S) || defined(TYPE_IQ1_M)
const uint DIGIT_BITS = 2u;
const float GRID_LEVELS[3] = float[3](-1.0, 0.0, 1.0);
#else
const uint DIGIT_BITS = 2u;
const float GRID_LEVELS[3] = float[3](8.0, 25.0, 43.0);
#endif

// The 7 stored sign bits and their parity (an even count of minus signs) as bit 7.
uint parity_signs(uint s7) { return s7 | ((uint(bitCount(s7)) & 1u) << 7); }

void lattice_values(float scale, uint digits, uint signs, float shift, out float v[SUB_SIZE]) {
  for (uint j = 0u; j < 8u; ++j) {
    const float level = GRID_LEVELS[(digits >> (DIGIT_BITS * j)) & ((1u << DIGIT_BITS) - 1u)];
    v[j] = scale * ((((signs >> j) & 1u) != 0u ? -level : level) + shift);
  }
}

// Sub k: IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S group g = k / 4 (32 elements, one
// scale code), point q = k % 4 of it; IQ2_XS, IQ2_S, IQ1_M run k / 2 of 16.
void dequantize_sub(uint b, uint k, out float v[SUB_SIZE]) {
  const uint g = k >> 2, q = k & 3u;
#if defined(TYPE_IQ2_XXS)
  const uint bits = u32_at(b + 6u + 8u * g);
  const uint digits = point(IQ2XXS_POINTS, (u32_at(b + 2u + 8u * g) >> (8u * q)) & 255u);
  precise float scale = half_at(b) * (0.5 + float(bits >> 28)) * 0.25;
  lattice_values(scale, digits, parity_signs((bits >> (7u * q)) & 127u), 0.0, v);
#elif defined(TYPE_IQ2_XS) || defined(TYPE_IQ2_S)
  const uint r = k >> 1, l = (byte_at(b + BLOCK_BYTES - 8u + (r >> 1)) >> (4u * (r & 1u))) & 15u;
  precise float scale = half_at(b) * (0.5 + float(l)) * 0.25;
#if defined(TYPE_IQ2_XS)
  const uint code = half_bits_at(b + 2u + 2u * k);
  lattice_values(scale, point(IQ2XS_POINTS, code & 511u), parity_signs(code >> 9), 0.0, v);
#else
  const uint index = byte_at(b + 2u + k) | ((byte_at(b + 66u + g) << (8u - 2u * q)) & 0x300u);
  lattice_values(scale, point(IQ2S_POINTS, index), byte_at(b + 34u + k), 0.0, v);
#endif
#elif defined(TYPE_IQ3_XXS)
  const uint bits = u32_at(b + 66u + 4u * g), qs = b + 2u + 8u * g + 2u * q;
  const uint digits = point(IQ3XXS_POINTS, byte_at(qs)) | (point(IQ3XXS_POINTS, byte_at(qs + 1u)) << 12);
  precise float scale = half_at(b) * (0.5 + float(bits >> 28)) * 0.5;
  lattice_values(scale, digits, parity_signs((bits >> (7u * q)) & 127u), 0.0, v);
#elif defined(TYPE_IQ3_S)
  const uint qh = byte_at(b + 66u + g), qs = b + 2u + 8u * g + 2u * q;
  const uint first = byte_at(qs) | ((qh << (8u - 2u * q)) & 256u);
  const uint second = byte_at(qs + 1u) | ((qh << (7u - 2u * q)) & 256u);
  const uint l = (byte_at(b + 106u + (g >> 1)) >> (4u * (g & 1u))) & 15u;
  precise float scale = half_at(b) * float(1u + 2u * l);
  lattice_values(scale, point(IQ3S_POINTS, first) | (point(IQ3S_POINTS, second) << 12), byte_at(b + 74u + k), 0.0, v);
#elif defined(TYPE_IQ1_S)
  // {f16 d; qs[32] (index low bytes); uint16 qh[8]}: qh holds 4 x 3 index
  // bits, the 3-bit scale code (bits 12-14) and the shift's sign (bit 15).
  const uint qh = half_bits_at(b + 34u + 2u * g);
  const uint index = byte_at(b + 2u + k) | (((qh >> (3u * q)) & 7u) << 8);
  precise float scale = half_at(b) * float(2u * ((qh >> 12) & 7u) + 1u);
  lattice_values(scale, point(IQ1S_POINTS, index), 0u, (qh & 0x8000u) != 0u ? -0.125 : 0.125, v);
#else  // IQ1_M
  // {qs[32]; qh[16] (a nibble per point: 3 index bits, the shift's sign);
  // uint16 scales[4] (four 3-bit codes each, fp16 d in the top nibbles)}.
  const uint s0 = half_bits_at(b + 48u), s1 = half_bits_at(b + 50u), s2 = half_bits_at(b + 52u),
             s3 = half_bits_at(b + 54u);
  const float d = half_to_float((s0 >> 12) | ((s1 >> 8) & 0xF0u) | ((s2 >> 4) & 0xF00u) | (s3 & 0xF000u));
  const uint r = k >> 1, l = (half_bits_at(b + 48u + 2u * (r >> 2)) >> (3u * (r & 3u))) & 7u;
  const uint h = byte_at(b + 32u + (k >> 1)) >> (4u * (k & 1u));
  precise float scale = d * float(2u * l + 1u);
  lattice_values(scale, point(IQ1S_POINTS, byte_at(b + k) | ((h & 7u) << 8)), 0u, (h & 8u) != 0u ? -0.125 : 0.125, v);
#endif
}

#elif defined(TYPE_TQ1_0) || defined(TYPE_TQ2_0)
// Ternary super-blocks, d * (c - 1) for base-3 or 2-bit codes c.
// TQ2_0 {qs[64]; f16 d}: c at bits 2 ((e / 32) % 4) of byte 32 (e / 128) + e % 32.
// TQ1_0 {qs[48]; qh[4]; f16 d}: 5 base-3 digits a byte (digit n of byte m:
// ((m * 3^n) % 256 * 3) / 256), elements 0-159 digit e / 32 of qs[e % 32],
// 160-239 digit (e - 160) / 16 of qs[32 + e % 16], 240-255 digit (e - 240) / 4
// of qh[e % 4].
#if defined(TYPE_TQ2_0)
const uint BLOCK_SIZE = 256u, BLOCK_BYTES = 66u, SUB_SIZE = 16u;
#else
const uint BLOCK_SIZE = 256u, BLOCK_BYTES = 54u, SUB_SIZE = 16u;
const uint POW3[5] = uint[5](1u, 3u, 9u, 27u, 81u);
#endif
void dequantize_sub(uint b, uint sub, out float v[SUB_SIZE]) {
  const float d = half_at(b + BLOCK_BYTES - 2u);
  for (uint i = 0u; i < SUB_SIZE; ++i) {
    const uint e = sub * SUB_SIZE + i;
#if defined(TYPE_TQ2_0)
    const uint c = (byte_at(b + 32u * (e >> 7) + (e & 31u)) >> (2u * ((e >> 5) & 3u))) & 3u;
#else
    const uint byte = e < 160u ? byte_at(b + (e & 31u)) : e < 240u ? byte_at(b + 32u + (e & 15u)) : byte_at(b + 48u + (e & 3u));
    const uint n = e < 160u ? e >> 5 : e < 240u ? (e - 160u) >> 4 : (e - 240u) >> 2;
    const uint c = (((byte * POW3[n]) & 255u) * 3u) >> 8;
#endif
    v[i] = d * float(int(c) - 1);
  }
}

#elif defined(TYPE_Q1_0) || defined(TYPE_Q2_0)
// {f16 d; uint8 qs[16]}: Q1_0 d * (bit j ? 1 : -1) (bit j % 8 of qs[j / 8]),
// Q2_0 d * (c - 1) for the crumb at bits 2 (j % 4) of qs[j / 4].
#if defined(TYPE_Q1_0)
const uint BLOCK_SIZE = 128u, BLOCK_BYTES = 18u, SUB_SIZE = 16u;
#else
const uint BLOCK_SIZE = 64u, BLOCK_BYTES = 18u, SUB_SIZE = 16u;
#endif
void dequantize_sub(uint b, uint sub, out float v[SUB_SIZE]) {
  const float d = half_at(b);
  for (uint i = 0u; i < SUB_SIZE; ++i) {
    const uint j = sub * SUB_SIZE + i;
#if defined(TYPE_Q1_0)
    const int c = int((byte_at(b + 2u + (j >> 3)) >> (j & 7u)) & 1u) * 2 - 1;
#else
    const int c = int((byte_at(b + 2u + (j >> 2)) >> (2u * (j & 3u))) & 3u) - 1;
#endif
    v[i] = float(c) * d;
  }
}

#elif defined(TYPE_MXFP4) || defined(TYPE_NVFP4)
// E2M1 codes (twice their value: 0, 1, 2, 3, 4, 6, 8, 12 and negatives) times
// half a block scale. MXFP4 {uint8 e; qs[16]}: 17 bytes, so blocks are only
// byte aligned (read as bytes alone); scale 2^(e - 128); element j < 16 the low
// nibble of qs[j], j >= 16 the high nibble of qs[j - 16]. NVFP4 {uint8 d[4];
// qs[32]}: per 16 elements a UE4M3 scale (halved) and 8 code bytes as MXFP4's.
const float E2M1_DOUBLED[16] = float[16](0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 0.0, -1.0, -2.0, -3.0, -4.0, -6.0,
                                         -8.0, -12.0);
#if defined(TYPE_MXFP4)
const uint BLOCK_SIZE = 32u, BLOCK_BYTES = 17u, SUB_SIZE = 16u;
float sub_scale(uint b, uint sub) {
  const uint e = byte_at(b);
  return uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23);
}
#else
const uint BLOCK_SIZE = 64u, BLOCK_BYTES = 36u, SUB_SIZE = 16u;
float sub_scale(uint b, uint sub) {
  const uint x = byte_at(b + sub);
  if (x == 0u || x == 0x7Fu) return 0.0;
  const int exponent = int((x >> 3) & 15u), mantissa = int(x & 7u);
  const float raw = exponent == 0 ? ldexp(float(mantissa), -9) : ldexp(1.0 + float(mantissa) / 8.0, exponent - 7);
  return raw * 0.5;
}
#endif
void dequantize_sub(uint b, uint sub, out float v[SUB_SIZE]) {
  const float scale = sub_scale(b, sub);
  // MXFP4's 16 elements of a sub are one nibble of all 16 code bytes; NVFP4's
  // are both nibbles of its 8.
#if defined(TYPE_MXFP4)
  const uint qs = b + 1u, shift = 4u * sub;
  for (uint i = 0u; i < 16u; ++i) v[i] = E2M1_DOUBLED[(byte_at(qs + i) >> shift) & 15u] * scale;
#else
  const uint qs = b + 4u + 8u * sub;
  for (uint i = 0u; i < 16u; ++i) v[i] = E2M1_DOUBLED[(byte_at(qs + (i & 7u)) >> (4u * (i >> 3))) & 15u] * scale;
#endif
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

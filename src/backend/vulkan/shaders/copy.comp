// Cpy and Cont: element e of the source in logical order goes to element e
// of the destination (shapes may differ, element counts agree), converting
// between F32, F16 and BF16 (rounding to nearest even). Variants:
// SRC_{F32,F16,BF16} x DST_{F32,F16,BF16}.
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;

#if defined(SRC_F32)
layout(binding = 0) readonly buffer Src { float src_f32[]; };
float load_src(uint i) { return src_f32[i]; }
#elif defined(SRC_F16)
layout(binding = 0) readonly buffer Src { uint16_t src_u16[]; };
float load_src(uint i) { return half_to_float(uint(src_u16[i])); }
#elif defined(SRC_BF16)
layout(binding = 0) readonly buffer Src { uint16_t src_u16[]; };
float load_src(uint i) { return bf16_to_float(uint(src_u16[i])); }
#endif

#if defined(DST_F32)
layout(binding = 1) writeonly buffer Dst { float dst_f32[]; };
void store_dst(uint i, float v) { dst_f32[i] = v; }
#elif defined(DST_F16)
layout(binding = 1) writeonly buffer Dst { uint16_t dst_u16[]; };
void store_dst(uint i, float v) { dst_u16[i] = uint16_t(float_to_half(v)); }
#elif defined(DST_BF16)
layout(binding = 1) writeonly buffer Dst { uint16_t dst_u16[]; };
void store_dst(uint i, float v) { dst_u16[i] = uint16_t(float_to_bf16(v)); }
#endif

// Strides and offsets in elements of each side's type.
layout(push_constant) uniform Params {
  uvec4 a_ne;
  uvec4 a_nb;
  uvec4 d_ne;
  uvec4 d_nb;
  uint a_off, d_off, n;
} p;

void main() {
  const uint e = group_index() * 256u + gl_LocalInvocationID.x;
  if (e >= p.n) return;
  store_dst(p.d_off + offset4(unravel(e, p.d_ne), p.d_nb), load_src(p.a_off + offset4(unravel(e, p.a_ne), p.a_nb)));
}

// Shared by every shader: 8/16-bit storage (blocks are 2-byte aligned, so
// weights and caches are read as byte and half-word arrays), the linear
// workgroup index of a 2-D dispatch, and exact float conversions.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require

// The host spreads large dispatches over x and y (x is limited to 65535).
uint group_index() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }

// IEEE half to float, exact for subnormals too (some GPUs flush them in
// unpackHalf2x16).
float half_to_float(uint h) {
  const uint sign = (h & 0x8000u) << 16;
  const uint e = (h >> 10) & 0x1fu;
  const uint m = h & 0x3ffu;
  if (e == 0u) {
    const float v = float(m) * 5.9604644775390625e-8;  // m * 2^-24
    return sign != 0u ? -v : v;
  }
  if (e == 31u) return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
  return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

// Float to half, rounding to nearest even as qlens::fp32_to_fp16 does.
uint float_to_half(float f) {
  const uint x = floatBitsToUint(f);
  const uint sign = (x >> 16) & 0x8000u;
  const uint a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN stays NaN
  if (a >= 0x47800000u) return sign | 0x7c00u;  // overflow to Inf
  if (a < 0x38800000u) return sign | uint(roundEven(uintBitsToFloat(a) * 16777216.0));
  uint m = a + 0xc8000000u;  // exponent - 112
  m += 0xfffu + ((m >> 13) & 1u);
  return sign | ((m >> 13) & 0xffffu);
}

float bf16_to_float(uint h) { return uintBitsToFloat(h << 16); }

uint float_to_bf16(float f) {
  uint x = floatBitsToUint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return ((x >> 16) | 0x40u) & 0xffffu;  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return x >> 16;
}

// Element offset of logical index (i0, i1, i2, i3) with strides nb.
uint offset4(uvec4 i, uvec4 nb) { return i.x * nb.x + i.y * nb.y + i.z * nb.z + i.w * nb.w; }

// Logical index of the e-th element (dim 0 fastest) of a tensor of shape ne.
uvec4 unravel(uint e, uvec4 ne) {
  uvec4 i;
  i.x = e % ne.x;
  e /= ne.x;
  i.y = e % ne.y;
  e /= ne.y;
  i.z = e % ne.z;
  i.w = e / ne.z;
  return i;
}

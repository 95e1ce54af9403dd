#include "qlens/types.h"

#include <bit>
#include <cassert>
#include <cctype>
#include <cmath>

namespace qlens {

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // Inf or NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    int shift = 0;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      ++shift;
    }
    mant &= 0x3ffu;
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t fp32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;  // NaN stays NaN
  if (abs >= 0x47800000u) return sign | 0x7c00u;  // overflow (>= 65536 rounds to Inf)
  if (abs < 0x38800000u) {                        // result is subnormal or zero
    // Scale so that the half subnormal unit (2^-24) becomes 1, round to nearest even.
    const float scaled = std::bit_cast<float>(abs) * 16777216.0f;  // exact
    // (nearbyint rounds to nearest even in the default rounding mode; clang 14
    // has no __builtin_roundevenf)
    const float r = std::nearbyint(scaled);
    return sign | static_cast<uint16_t>(r);
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t m = abs + 0xc8000000u;  // exponent - 112
  m += 0xfffu + ((m >> 13) & 1u);
  return sign | static_cast<uint16_t>(m >> 13);
}

float bf16_to_fp32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

uint16_t fp32_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

std::string_view type_name(DType type) {
  const TypeFormat* f = find_type_format(static_cast<uint32_t>(type));
  return f ? f->name : "unknown";
}

std::optional<DType> type_from_name(std::string_view name) {
  for (uint32_t id = 0; id < kDTypeCount; ++id) {
    const TypeFormat* f = find_type_format(id);
    if (!f) continue;
    std::string_view n = f->name;
    if (n.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < n.size() && eq; ++i)
      eq = std::toupper(static_cast<unsigned char>(name[i])) == n[i];
    if (eq) return static_cast<DType>(id);
  }
  return std::nullopt;
}

size_t row_bytes(DType type, int64_t n) {
  const TypeFormat* f = find_type_format(static_cast<uint32_t>(type));
  assert(f && n % f->block_size == 0);
  return static_cast<size_t>(n / f->block_size) * f->block_bytes;
}

}  // namespace qlens

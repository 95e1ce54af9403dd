#include "qlens/types.h"

#include <array>
#include <bit>
#include <cassert>
#include <cctype>
#include <cmath>
#include <cstring>

#include "quant/registry.h"

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

namespace {

void f32_to_float(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }
void f32_from_float(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }
void f16_to_float(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
}
void f16_from_float(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_fp16(src[i]);
}
void bf16_to_float(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
}
void bf16_from_float(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_bf16(src[i]);
}
// The plain float types have no scales to choose: importance changes nothing.
template <FromFloatFn convert>
void quantize_plain(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float*) {
  convert(src, dst, nrows * n_per_row);
}

void i32_to_float(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const int32_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
}

struct TraitsTable {
  std::array<TypeTraits, kDTypeCount> rows{};

  void set(DType t, const char* name, int64_t block, size_t bytes, bool quantized) {
    auto& r = rows[static_cast<uint32_t>(t)];
    r.name = name;
    r.block_size = block;
    r.block_bytes = bytes;
    r.is_quantized = quantized;
    if (!quantized) r.data_alignment = bytes;
  }

  TraitsTable() {
    // Layout facts of the GGUF format (block elements, bytes per block).
    set(DType::F32, "F32", 1, 4, false);
    set(DType::F16, "F16", 1, 2, false);
    set(DType::Q4_0, "Q4_0", 32, 18, true);
    set(DType::Q4_1, "Q4_1", 32, 20, true);
    set(DType::Q5_0, "Q5_0", 32, 22, true);
    set(DType::Q5_1, "Q5_1", 32, 24, true);
    set(DType::Q8_0, "Q8_0", 32, 34, true);
    set(DType::Q8_1, "Q8_1", 32, 36, true);
    set(DType::Q2_K, "Q2_K", 256, 84, true);
    set(DType::Q3_K, "Q3_K", 256, 110, true);
    set(DType::Q4_K, "Q4_K", 256, 144, true);
    set(DType::Q5_K, "Q5_K", 256, 176, true);
    set(DType::Q6_K, "Q6_K", 256, 210, true);
    set(DType::Q8_K, "Q8_K", 256, 292, true);
    set(DType::IQ2_XXS, "IQ2_XXS", 256, 66, true);
    set(DType::IQ2_XS, "IQ2_XS", 256, 74, true);
    set(DType::IQ3_XXS, "IQ3_XXS", 256, 98, true);
    set(DType::IQ1_S, "IQ1_S", 256, 50, true);
    set(DType::IQ4_NL, "IQ4_NL", 32, 18, true);
    set(DType::IQ3_S, "IQ3_S", 256, 110, true);
    set(DType::IQ2_S, "IQ2_S", 256, 82, true);
    set(DType::IQ4_XS, "IQ4_XS", 256, 136, true);
    set(DType::I8, "I8", 1, 1, false);
    set(DType::I16, "I16", 1, 2, false);
    set(DType::I32, "I32", 1, 4, false);
    set(DType::I64, "I64", 1, 8, false);
    set(DType::F64, "F64", 1, 8, false);
    set(DType::IQ1_M, "IQ1_M", 256, 56, true);
    set(DType::BF16, "BF16", 1, 2, false);
    set(DType::TQ1_0, "TQ1_0", 256, 54, true);
    set(DType::TQ2_0, "TQ2_0", 256, 66, true);

    auto& f32 = rows[static_cast<uint32_t>(DType::F32)];
    f32.to_float = f32_to_float;
    f32.from_float = f32_from_float;
    auto& f16 = rows[static_cast<uint32_t>(DType::F16)];
    f16.to_float = f16_to_float;
    f16.from_float = f16_from_float;
    auto& bf16 = rows[static_cast<uint32_t>(DType::BF16)];
    bf16.to_float = bf16_to_float;
    bf16.from_float = bf16_from_float;
    rows[static_cast<uint32_t>(DType::I32)].to_float = i32_to_float;
    f32.quantize = quantize_plain<f32_from_float>;
    f16.quantize = quantize_plain<f16_from_float>;
    bf16.quantize = quantize_plain<bf16_from_float>;

    for (uint32_t id = 0; id < kDTypeCount; ++id) {
      const auto type = static_cast<DType>(id);
      const quant::Functions* q = quant::legacy_functions(type);
      if (!q) q = quant::kquant_functions(type);
      if (!q) continue;
      rows[id].to_float = q->to_float;
      rows[id].from_float = q->from_float;
      rows[id].quantize = q->quantize;
      rows[id].vec_dot_type = q->vec_dot_type;
      rows[id].data_alignment = q->block_alignment;
    }
  }
};

const TraitsTable& table() {
  static const TraitsTable t;
  return t;
}

}  // namespace

const TypeTraits* find_type_traits(uint32_t id) {
  if (id >= kDTypeCount) return nullptr;
  const TypeTraits& r = table().rows[id];
  return r.name ? &r : nullptr;
}

const TypeTraits& type_traits(DType type) {
  const TypeTraits* r = find_type_traits(static_cast<uint32_t>(type));
  assert(r);
  return *r;
}

std::string_view type_name(DType type) {
  const TypeTraits* r = find_type_traits(static_cast<uint32_t>(type));
  return r ? r->name : "unknown";
}

std::optional<DType> type_from_name(std::string_view name) {
  for (uint32_t id = 0; id < kDTypeCount; ++id) {
    const TypeTraits* r = find_type_traits(id);
    if (!r) continue;
    std::string_view n = r->name;
    if (n.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < n.size() && eq; ++i)
      eq = std::toupper(static_cast<unsigned char>(name[i])) == n[i];
    if (eq) return static_cast<DType>(id);
  }
  return std::nullopt;
}

size_t row_bytes(DType type, int64_t n) {
  const TypeTraits& t = type_traits(type);
  assert(n % t.block_size == 0);
  return static_cast<size_t>(n / t.block_size) * t.block_bytes;
}

}  // namespace qlens

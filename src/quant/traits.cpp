// The type traits table: core's format facts of every type (qlens/type_list.h)
// with the functions the engine computes with bound to them. It lives here,
// above core, so that dependencies point one way: core knows the format,
// quant knows the kernels and binds them.
#include <array>
#include <cassert>
#include <cstring>

#include "qlens/types.h"
#include "quant/registry.h"

namespace qlens {

namespace {

// Empty tensors pass null pointers, which memcpy may not be given even for 0 bytes.
void f32_to_float(const void* src, float* dst, int64_t n) {
  if (n > 0) std::memcpy(dst, src, n * sizeof(float));
}
void f32_from_float(const float* src, void* dst, int64_t n) {
  if (n > 0) std::memcpy(dst, src, n * sizeof(float));
}
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

  TypeTraits& row(DType t) { return rows[static_cast<uint32_t>(t)]; }

  void bind_plain(DType t, ToFloatFn to_float, FromFloatFn from_float, QuantizeRowsFn quantize) {
    row(t).to_float = to_float;
    row(t).from_float = from_float;
    row(t).quantize = quantize;
  }

  TraitsTable() {
    for (uint32_t id = 0; id < kDTypeCount; ++id) {
      const TypeFormat& format = kTypeFormats[id];
      static_cast<TypeFormat&>(rows[id]) = format;
      // A plain type's elements are read in place at their own size.
      if (format.name && !format.is_quantized) rows[id].data_alignment = format.block_bytes;
    }
    bind_plain(DType::F32, f32_to_float, f32_from_float, quantize_plain<f32_from_float>);
    bind_plain(DType::F16, f16_to_float, f16_from_float, quantize_plain<f16_from_float>);
    bind_plain(DType::BF16, bf16_to_float, bf16_from_float, quantize_plain<bf16_from_float>);
    row(DType::I32).to_float = i32_to_float;

    for (auto family : {quant::legacy_bindings, quant::kquant_bindings, quant::iquant_bindings,
                        quant::lowbit_bindings, quant::fp4_bindings})
      for (const quant::Binding& b : family()) {
        TypeTraits& r = row(b.type);
        assert(r.name && !r.to_float);  // a type of the list, bound once
        r.to_float = b.functions.to_float;
        r.from_float = b.functions.from_float;
        r.quantize = b.functions.quantize;
        r.vec_dot_type = b.functions.vec_dot_type;
        r.data_alignment = b.functions.block_alignment;
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

}  // namespace qlens

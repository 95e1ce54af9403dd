// GGUF v3 writer: header, metadata in insertion order, tensor infos, then the
// data section with each tensor at an aligned offset and zero padding between.
// Written all or nothing (core/atomic_file.h).
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/atomic_file.h"
#include "core/round_up.h"
#include "gguf/util.h"
#include "qlens/error.h"
#include "qlens/gguf.h"

namespace qlens::gguf {

namespace {

constexpr uint32_t kVersion = 3;
constexpr size_t kMaxKeyLength = 65535;
constexpr size_t kMaxStringLength = 256ull << 20;  // same limit as the reader
constexpr int kMaxArrayDepth = 8;                  // same limit as the reader
constexpr size_t kMaxTensorName = 63;              // llama.cpp's GGML_MAX_NAME - 1
constexpr size_t kDefaultAlignment = 32;

std::string quoted(std::string_view s) {
  std::string q(1, '\'');
  q += detail::escape_for_display(s);
  q += '\'';
  return q;
}

[[noreturn]] void fail(const std::string& msg) { throw Error("GGUF writer: " + msg); }

bool valid_type(ValueType t) { return static_cast<uint32_t>(t) <= static_cast<uint32_t>(ValueType::F64); }

void check_value(const std::string& key, const Value& v, int depth) {
  auto range = [&](bool ok, const std::string& shown) {
    if (!ok) fail("key " + quoted(key) + ": value " + shown + " does not fit type " + value_type_name(v.type));
  };
  switch (v.type) {
    case ValueType::U8:
      range(v.u <= 0xff, std::to_string(v.u));
      break;
    case ValueType::U16:
      range(v.u <= 0xffff, std::to_string(v.u));
      break;
    case ValueType::U32:
      range(v.u <= 0xffffffffu, std::to_string(v.u));
      break;
    case ValueType::U64:
      break;
    case ValueType::I8:
      range(v.i >= -128 && v.i <= 127, std::to_string(v.i));
      break;
    case ValueType::I16:
      range(v.i >= -32768 && v.i <= 32767, std::to_string(v.i));
      break;
    case ValueType::I32:
      range(v.i >= std::numeric_limits<int32_t>::min() && v.i <= std::numeric_limits<int32_t>::max(),
            std::to_string(v.i));
      break;
    case ValueType::I64:
      break;
    case ValueType::Bool:
      range(v.i == 0 || v.i == 1, std::to_string(v.i));
      break;
    case ValueType::F32:
      range(!std::isfinite(v.f) || std::fabs(v.f) <= FLT_MAX, detail::format_double(v.f));
      break;
    case ValueType::F64:
      break;
    case ValueType::String:
      if (v.str.size() > kMaxStringLength)
        fail("key " + quoted(key) + ": string of " + std::to_string(v.str.size()) + " bytes exceeds the limit of " +
             std::to_string(kMaxStringLength));
      break;
    case ValueType::Array:
      if (depth >= kMaxArrayDepth)
        fail("key " + quoted(key) + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
      if (!valid_type(v.elem_type))
        fail("key " + quoted(key) + ": invalid array element type id " +
             std::to_string(static_cast<uint32_t>(v.elem_type)));
      for (size_t k = 0; k < v.arr.size(); ++k) {
        if (v.arr[k].type != v.elem_type)
          fail("key " + quoted(key) + ": array element " + std::to_string(k) + " has type " +
               value_type_name(v.arr[k].type) + " but the array's element type is " + value_type_name(v.elem_type));
        check_value(key, v.arr[k], depth + 1);
      }
      break;
    default:
      fail("key " + quoted(key) + ": invalid value type id " + std::to_string(static_cast<uint32_t>(v.type)));
  }
}

struct Buffer {
  std::vector<uint8_t> bytes;
  void le(uint64_t v, size_t n) {
    for (size_t k = 0; k < n; ++k) bytes.push_back(static_cast<uint8_t>(v >> (8 * k)));
  }
  void u32(uint32_t v) { le(v, 4); }
  void u64(uint64_t v) { le(v, 8); }
  void str(std::string_view s) {
    u64(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void value(const Value& v) {
    switch (v.type) {
      case ValueType::U8:
        le(v.u, 1);
        break;
      case ValueType::U16:
        le(v.u, 2);
        break;
      case ValueType::U32:
        le(v.u, 4);
        break;
      case ValueType::U64:
        le(v.u, 8);
        break;
      case ValueType::I8:
        le(static_cast<uint64_t>(v.i), 1);
        break;
      case ValueType::I16:
        le(static_cast<uint64_t>(v.i), 2);
        break;
      case ValueType::I32:
        le(static_cast<uint64_t>(v.i), 4);
        break;
      case ValueType::I64:
        le(static_cast<uint64_t>(v.i), 8);
        break;
      case ValueType::Bool:
        le(v.i ? 1 : 0, 1);
        break;
      case ValueType::F32:
        u32(std::bit_cast<uint32_t>(static_cast<float>(v.f)));
        break;
      case ValueType::F64:
        u64(std::bit_cast<uint64_t>(v.f));
        break;
      case ValueType::String:
        str(v.str);
        break;
      case ValueType::Array:
        u32(static_cast<uint32_t>(v.elem_type));
        u64(v.arr.size());
        for (const Value& e : v.arr) value(e);
        break;
    }
  }
};

}  // namespace

void Writer::set(const std::string& key, Value value) {
  for (KeyValue& kv : kv_) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  }
  kv_.push_back(KeyValue{key, std::move(value)});
}

void Writer::remove(const std::string& key) {
  kv_.erase(std::remove_if(kv_.begin(), kv_.end(), [&](const KeyValue& kv) { return kv.key == key; }), kv_.end());
}

void Writer::add_tensor(const std::string& name, DType type, std::span<const int64_t> ne, const void* data,
                        size_t nbytes) {
  const std::string t = "tensor " + quoted(name);
  if (name.empty()) fail("tensor name is empty");
  if (name.size() > kMaxTensorName)
    fail(t + ": name is " + std::to_string(name.size()) + " bytes; llama.cpp allows at most " +
         std::to_string(kMaxTensorName));
  for (const PendingTensor& p : tensors_)
    if (p.info.name == name) fail(t + ": a tensor of that name was already added");
  const TypeFormat* tr = find_type_format(static_cast<uint32_t>(type));
  if (!tr) fail(t + ": unknown type id " + std::to_string(static_cast<uint32_t>(type)));
  if (ne.empty() || ne.size() > 4) fail(t + ": " + std::to_string(ne.size()) + " dimensions (allowed 1..4)");
  TensorInfo info;
  info.name = name;
  info.n_dims = static_cast<int>(ne.size());
  info.type = type;
  int64_t n = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] <= 0) fail(t + ": dimension " + std::to_string(d) + " is " + std::to_string(ne[d]) + " (must be >= 1)");
    if (__builtin_mul_overflow(n, ne[d], &n)) fail(t + ": element count overflows a signed 64-bit integer");
    info.ne[d] = ne[d];
  }
  if (ne[0] % tr->block_size != 0)
    fail(t + ": row length " + std::to_string(ne[0]) + " is not a multiple of the " + tr->name + " block size " +
         std::to_string(tr->block_size));
  uint64_t expected = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(n / tr->block_size), static_cast<uint64_t>(tr->block_bytes),
                             &expected))
    fail(t + ": byte size overflows 64 bits");
  if (expected != nbytes)
    fail(t + ": " + std::to_string(nbytes) + " bytes given but a " + tr->name + " tensor of " + std::to_string(n) +
         " elements takes " + std::to_string(expected));
  if (!data) fail(t + ": data pointer is null");
  info.nbytes = nbytes;
  tensors_.push_back(PendingTensor{std::move(info), data});
}

size_t Writer::alignment() const {
  for (const KeyValue& kv : kv_) {
    if (kv.key != "general.alignment") continue;
    if (kv.value.type != ValueType::U32)
      fail(std::string("key 'general.alignment' must be u32, not ") + value_type_name(kv.value.type));
    const uint64_t a = kv.value.u;
    if (a == 0 || (a & (a - 1)) != 0 || a > 0xffffffffu)
      fail("key 'general.alignment' is " + std::to_string(a) + ", not a non-zero power of two");
    // GGUF's spec asks for a multiple of 8; below it a float could start at
    // an address the reader refuses.
    if (a < 8) fail("key 'general.alignment' is " + std::to_string(a) + ", below the 8 GGUF requires");
    return static_cast<size_t>(a);
  }
  return kDefaultAlignment;
}

void Writer::write(const std::string& path) const {
  // Validate everything before touching the file system.
  uint64_t align = 0;
  try {
    for (const KeyValue& kv : kv_) {
      if (kv.key.empty()) fail("empty metadata key");
      if (kv.key.size() > kMaxKeyLength)
        fail("key of " + std::to_string(kv.key.size()) + " bytes exceeds the limit of " +
             std::to_string(kMaxKeyLength));
      check_value(kv.key, kv.value, 0);
    }
    align = alignment();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }

  Buffer h;
  h.u32(0x46554747u);  // "GGUF"
  h.u32(kVersion);
  h.u64(tensors_.size());
  h.u64(kv_.size());
  for (const KeyValue& kv : kv_) {
    h.str(kv.key);
    h.u32(static_cast<uint32_t>(kv.value.type));
    h.value(kv.value);
  }
  std::vector<uint64_t> offsets;
  uint64_t off = 0;
  for (const PendingTensor& p : tensors_) {
    offsets.push_back(off);
    h.str(p.info.name);
    h.u32(static_cast<uint32_t>(p.info.n_dims));
    for (int d = 0; d < p.info.n_dims; ++d) h.u64(static_cast<uint64_t>(p.info.ne[d]));
    h.u32(static_cast<uint32_t>(p.info.type));
    h.u64(off);
    off = round_up<uint64_t>(off + p.info.nbytes, align);
  }
  h.bytes.resize(round_up<uint64_t>(h.bytes.size(), align), 0);

  AtomicFile file(path);
  file.write(h.bytes.data(), h.bytes.size(), "the header");
  static const uint8_t zeros[256] = {};
  for (const PendingTensor& p : tensors_) {
    file.write(p.data, p.info.nbytes, "tensor " + quoted(p.info.name));
    uint64_t pad = round_up<uint64_t>(p.info.nbytes, align) - p.info.nbytes;
    while (pad > 0) {
      const size_t n = std::min<uint64_t>(pad, sizeof zeros);
      file.write(zeros, n, "padding");
      pad -= n;
    }
  }
  file.commit();
}

}  // namespace qlens::gguf

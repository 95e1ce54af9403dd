// GGUF metadata values: constructors, conversions and display.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include "core/utf8.h"
#include "gguf/util.h"
#include "qlens/error.h"
#include "qlens/gguf.h"

namespace qlens::gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8:
      return "u8";
    case ValueType::I8:
      return "i8";
    case ValueType::U16:
      return "u16";
    case ValueType::I16:
      return "i16";
    case ValueType::U32:
      return "u32";
    case ValueType::I32:
      return "i32";
    case ValueType::F32:
      return "f32";
    case ValueType::Bool:
      return "bool";
    case ValueType::String:
      return "string";
    case ValueType::Array:
      return "array";
    case ValueType::U64:
      return "u64";
    case ValueType::I64:
      return "i64";
    case ValueType::F64:
      return "f64";
  }
  return "unknown";
}

namespace {
Value scalar(ValueType t) {
  Value v;
  v.type = t;
  return v;
}
Value array_of(ValueType elem) {
  Value v;
  v.type = ValueType::Array;
  v.elem_type = elem;
  return v;
}
}  // namespace

Value Value::make_u8(uint8_t x) {
  Value v = scalar(ValueType::U8);
  v.u = x;
  return v;
}
Value Value::make_i8(int8_t x) {
  Value v = scalar(ValueType::I8);
  v.i = x;
  return v;
}
Value Value::make_u16(uint16_t x) {
  Value v = scalar(ValueType::U16);
  v.u = x;
  return v;
}
Value Value::make_i16(int16_t x) {
  Value v = scalar(ValueType::I16);
  v.i = x;
  return v;
}
Value Value::make_u32(uint32_t x) {
  Value v = scalar(ValueType::U32);
  v.u = x;
  return v;
}
Value Value::make_i32(int32_t x) {
  Value v = scalar(ValueType::I32);
  v.i = x;
  return v;
}
Value Value::make_u64(uint64_t x) {
  Value v = scalar(ValueType::U64);
  v.u = x;
  return v;
}
Value Value::make_i64(int64_t x) {
  Value v = scalar(ValueType::I64);
  v.i = x;
  return v;
}
Value Value::make_f32(float x) {
  Value v = scalar(ValueType::F32);
  v.f = x;
  return v;
}
Value Value::make_f64(double x) {
  Value v = scalar(ValueType::F64);
  v.f = x;
  return v;
}
Value Value::make_bool(bool x) {
  Value v = scalar(ValueType::Bool);
  v.i = x ? 1 : 0;
  return v;
}

Value Value::make_string(std::string x) {
  Value v = scalar(ValueType::String);
  v.str = std::move(x);
  return v;
}

Value Value::make_array(ValueType elem, std::vector<Value> items) {
  Value v = array_of(elem);
  v.arr = std::move(items);
  return v;
}

Value Value::make_string_array(std::vector<std::string> x) {
  Value v = array_of(ValueType::String);
  v.arr.reserve(x.size());
  for (auto& s : x) v.arr.push_back(make_string(std::move(s)));
  return v;
}

Value Value::make_f32_array(const std::vector<float>& x) {
  Value v = array_of(ValueType::F32);
  v.arr.reserve(x.size());
  for (float f : x) v.arr.push_back(make_f32(f));
  return v;
}

Value Value::make_i32_array(const std::vector<int32_t>& x) {
  Value v = array_of(ValueType::I32);
  v.arr.reserve(x.size());
  for (int32_t i : x) v.arr.push_back(make_i32(i));
  return v;
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::U16:
    case ValueType::I16:
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::U64:
    case ValueType::I64:
      return true;
    default:
      return false;
  }
}

namespace {
bool is_unsigned(ValueType t) {
  return t == ValueType::U8 || t == ValueType::U16 || t == ValueType::U32 || t == ValueType::U64;
}
}  // namespace

int64_t Value::as_int() const {
  if (type == ValueType::Bool) return i != 0;
  if (!is_integer()) throw Error(std::string("value of type ") + value_type_name(type) + " is not an integer");
  if (is_unsigned(type)) {
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw Error("u64 value " + std::to_string(u) + " does not fit a signed 64-bit integer");
    return static_cast<int64_t>(u);
  }
  return i;
}

double Value::as_float() const {
  if (is_float()) return f;
  if (is_integer()) return is_unsigned(type) ? static_cast<double>(u) : static_cast<double>(i);
  throw Error(std::string("value of type ") + value_type_name(type) + " is not a number");
}

const std::string& Value::as_string() const {
  if (type != ValueType::String)
    throw Error(std::string("value of type ") + value_type_name(type) + " is not a string");
  return str;
}

std::string Value::to_string(size_t max_array_items) const {
  switch (type) {
    case ValueType::U8:
    case ValueType::U16:
    case ValueType::U32:
    case ValueType::U64:
      return std::to_string(u);
    case ValueType::I8:
    case ValueType::I16:
    case ValueType::I32:
    case ValueType::I64:
      return std::to_string(i);
    case ValueType::Bool:
      return i ? "true" : "false";
    case ValueType::F32:
      return detail::format_float(static_cast<float>(f));
    case ValueType::F64:
      return detail::format_double(f);
    case ValueType::String: {
      std::string q(1, '"');
      q += detail::escape_for_display(str);
      q += '"';
      return q;
    }
    case ValueType::Array: {
      std::string out = "[";
      const size_t shown = std::min(arr.size(), max_array_items);
      for (size_t k = 0; k < shown; ++k) {
        if (k) out += ", ";
        out += arr[k].to_string(max_array_items);
      }
      if (shown < arr.size()) {
        out += shown ? ", ...] (" : "...] (";
        out += std::to_string(arr.size()) + " items)";
      } else {
        out += "]";
      }
      return out;
    }
  }
  return "<unknown type " + std::to_string(static_cast<uint32_t>(type)) + ">";
}

namespace detail {

std::string format_double(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d);
  return std::string(buf, r.ptr);
}

std::string format_float(float x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}


std::string escape_for_display(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() + 2);
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t k = 0;
  while (k < s.size()) {
    const unsigned char c = p[k];
    switch (c) {
      case '"':
        out += "\\\"";
        ++k;
        continue;
      case '\\':
        out += "\\\\";
        ++k;
        continue;
      case '\n':
        out += "\\n";
        ++k;
        continue;
      case '\r':
        out += "\\r";
        ++k;
        continue;
      case '\t':
        out += "\\t";
        ++k;
        continue;
      default:
        break;
    }
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
      ++k;
      continue;
    }
    const size_t len = utf8_sequence_length(p + k, s.size() - k);
    if (len == 0) {  // invalid UTF-8: show the byte
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
      ++k;
      continue;
    }
    out.append(s.data() + k, len);
    k += len;
  }
  return out;
}

}  // namespace detail

}  // namespace qlens::gguf

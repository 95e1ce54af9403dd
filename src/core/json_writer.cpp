#include "core/json_writer.h"

#include <charconv>
#include <cmath>
#include <stdexcept>

#include "core/utf8.h"

namespace qlens {

std::string JsonWriter::escape(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t k = 0;
  while (k < s.size()) {
    const unsigned char c = p[k];
    if (c < 0x80) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          if (c < 0x20 || c == 0x7f) {
            out += "\\u00";
            out += hex[c >> 4];
            out += hex[c & 15];
          } else {
            out += static_cast<char>(c);
          }
      }
      ++k;
      continue;
    }
    const size_t len = utf8_sequence_length(p + k, s.size() - k);
    if (len == 0) {
      out += "\xef\xbf\xbd";  // U+FFFD REPLACEMENT CHARACTER
      ++k;
    } else {
      out.append(s.data() + k, len);
      k += len;
    }
  }
  return out;
}

void JsonWriter::newline_indent() {
  if (!pretty_) return;
  os_ << '\n';
  for (size_t k = 0; k < stack_.size(); ++k) os_ << "  ";
}

void JsonWriter::before_value() {
  if (stack_.empty()) {
    if (wrote_top_) throw std::logic_error("JsonWriter: a second top-level value");
    wrote_top_ = true;
    return;
  }
  Level& l = stack_.back();
  if (l.ctx == Ctx::Object) {
    if (!l.have_key) throw std::logic_error("JsonWriter: value in an object without a key");
    l.have_key = false;
    return;
  }
  if (!l.first) os_ << ',';
  l.first = false;
  newline_indent();
}

void JsonWriter::key(std::string_view k) {
  if (stack_.empty() || stack_.back().ctx != Ctx::Object) throw std::logic_error("JsonWriter: key outside an object");
  Level& l = stack_.back();
  if (l.have_key) throw std::logic_error("JsonWriter: two keys in a row");
  if (!l.first) os_ << ',';
  l.first = false;
  l.have_key = true;
  newline_indent();
  os_ << '"' << escape(k) << (pretty_ ? "\": " : "\":");
}

void JsonWriter::begin_object() {
  before_value();
  os_ << '{';
  stack_.push_back(Level{Ctx::Object});
}

void JsonWriter::begin_array() {
  before_value();
  os_ << '[';
  stack_.push_back(Level{Ctx::Array});
}

void JsonWriter::end_object() {
  if (stack_.empty() || stack_.back().ctx != Ctx::Object)
    throw std::logic_error("JsonWriter: end_object without a matching begin_object");
  if (stack_.back().have_key) throw std::logic_error("JsonWriter: key without a value");
  const bool empty = stack_.back().first;
  stack_.pop_back();
  if (!empty) newline_indent();
  os_ << '}';
}

void JsonWriter::end_array() {
  if (stack_.empty() || stack_.back().ctx != Ctx::Array)
    throw std::logic_error("JsonWriter: end_array without a matching begin_array");
  const bool empty = stack_.back().first;
  stack_.pop_back();
  if (!empty) newline_indent();
  os_ << ']';
}

void JsonWriter::value(std::string_view s) {
  before_value();
  os_ << '"' << escape(s) << '"';
}

namespace {
// Shortest text that reads back to the same value; JSON has no NaN or Inf.
template <typename T>
void write_number(std::ostream& os, T v) {
  if (!std::isfinite(v)) {
    os << "null";
    return;
  }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  os.write(buf, r.ptr - buf);
}
}  // namespace

void JsonWriter::value(double d) {
  before_value();
  write_number(os_, d);
}

void JsonWriter::value(float f) {
  before_value();
  write_number(os_, f);
}

void JsonWriter::value(bool b) {
  before_value();
  os_ << (b ? "true" : "false");
}

// Integers go through to_chars so that stream flags and locales cannot change them.
void JsonWriter::value_int(int64_t v) {
  before_value();
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  os_.write(buf, r.ptr - buf);
}

void JsonWriter::value_uint(uint64_t v) {
  before_value();
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  os_.write(buf, r.ptr - buf);
}

void JsonWriter::null() {
  before_value();
  os_ << "null";
}

}  // namespace qlens

#include "core/json_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <system_error>
#include <unordered_set>

#include "core/json_writer.h"
#include "core/utf8.h"
#include "qlens/error.h"

namespace qlens {

namespace {

bool is_identifier(std::string_view key) {
  if (key.empty()) return false;
  for (size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!letter && !(digit && i > 0)) return false;
  }
  return true;
}

// Path of a member: "a.b" for plain keys, a["odd key"] otherwise, so every
// path reads back unambiguously.
std::string member_path(const std::string& parent, std::string_view key) {
  if (is_identifier(key)) return parent.empty() ? std::string(key) : parent + "." + std::string(key);
  return parent + "[\"" + JsonWriter::escape(key) + "\"]";
}

std::string element_path(const std::string& parent, size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

// 2^53: every integer of at most this magnitude is exact in a double.
constexpr double kMaxExactDoubleInt = 9007199254740992.0;

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

int hex_digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

// ---- the parser ----

class JsonParser {
 public:
  JsonParser(std::string_view text, std::shared_ptr<const std::string> source)
      : text_(text), source_(std::move(source)) {}

  JsonValue parse_document() {
    skip_byte_order_mark();
    skip_whitespace();
    JsonValue root;
    parse_value(root, "", 0);
    skip_whitespace();
    if (pos_ < text_.size()) fail("expected end of input after the top-level value");
    return root;
  }

 private:
  void skip_byte_order_mark() {
    if (text_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;
  }

  void skip_whitespace() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return;
      ++pos_;
    }
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void expect(char c, const char* what) {
    if (at_end() || text_[pos_] != c) fail(std::string("expected ") + what);
    ++pos_;
  }

  void parse_value(JsonValue& out, std::string path, int depth) {
    out.path_ = std::move(path);
    out.source_ = source_;
    if (at_end()) fail("expected a value");
    switch (text_[pos_]) {
      case '{':
        check_depth(depth);
        parse_object(out, depth + 1);
        return;
      case '[':
        check_depth(depth);
        parse_array(out, depth + 1);
        return;
      case '"':
        out.kind_ = JsonValue::Kind::String;
        out.string_ = parse_string();
        return;
      case 't':
        parse_literal("true");
        out.kind_ = JsonValue::Kind::Bool;
        out.bool_ = true;
        return;
      case 'f':
        parse_literal("false");
        out.kind_ = JsonValue::Kind::Bool;
        out.bool_ = false;
        return;
      case 'n':
        parse_literal("null");
        out.kind_ = JsonValue::Kind::Null;
        return;
      default:
        if (text_[pos_] == '-' || is_digit(text_[pos_])) {
          parse_number(out);
          return;
        }
        fail("expected a value (object, array, string, number, true, false or null)");
    }
  }

  void check_depth(int depth) {
    if (depth >= kJsonMaxDepth)
      fail("arrays and objects nested deeper than " + std::to_string(kJsonMaxDepth) + " levels");
  }

  void parse_object(JsonValue& out, int depth) {
    out.kind_ = JsonValue::Kind::Object;
    ++pos_;  // '{'
    skip_whitespace();
    if (peek() == '}') {
      ++pos_;
      return;
    }
    std::unordered_set<std::string> keys;
    for (;;) {
      skip_whitespace();
      const size_t key_offset = pos_;
      if (peek() != '"') fail(out.object_.empty() ? "expected a string key or '}'" : "expected a string key");
      std::string key = parse_string();
      if (!keys.insert(key).second)
        fail_at(key_offset, "duplicate key '" + JsonWriter::escape(key) + "' in the object at " +
                                (out.path_.empty() ? std::string("(top level)") : out.path_));
      skip_whitespace();
      expect(':', "':' after an object key");
      skip_whitespace();
      std::string child_path = member_path(out.path_, key);
      out.object_.emplace_back(std::move(key), JsonValue());
      parse_value(out.object_.back().second, std::move(child_path), depth);
      skip_whitespace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}', "',' or '}' after an object member");
      return;
    }
  }

  void parse_array(JsonValue& out, int depth) {
    out.kind_ = JsonValue::Kind::Array;
    ++pos_;  // '['
    skip_whitespace();
    if (peek() == ']') {
      ++pos_;
      return;
    }
    for (;;) {
      skip_whitespace();
      out.array_.emplace_back();
      parse_value(out.array_.back(), element_path(out.path_, out.array_.size() - 1), depth);
      skip_whitespace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']', "',' or ']' after an array element");
      return;
    }
  }

  void parse_literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) {
      // Point at the first byte that differs, so "nul" and "trux" say where.
      size_t i = 0;
      while (pos_ + i < text_.size() && i < word.size() && text_[pos_ + i] == word[i]) ++i;
      fail_at(pos_ + i, "expected '" + std::string(word) + "'");
    }
    pos_ += word.size();
  }

  std::string parse_string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (at_end()) fail("expected '\"' to close the string");
      const unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c == '\\') {
        parse_escape(out);
      } else if (c < 0x20) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "%04x", c);
        fail(std::string("control characters must be escaped in strings (write \\u") + hex + ")");
      } else if (c < 0x80) {
        out += static_cast<char>(c);
        ++pos_;
      } else {
        const auto* bytes = reinterpret_cast<const unsigned char*>(text_.data()) + pos_;
        const size_t length = utf8_sequence_length(bytes, text_.size() - pos_);
        if (length == 0) fail("invalid UTF-8 in string");
        out.append(text_.substr(pos_, length));
        pos_ += length;
      }
    }
  }

  void parse_escape(std::string& out) {
    ++pos_;  // backslash
    if (at_end()) fail("expected an escape character after '\\'");
    const char c = text_[pos_];
    switch (c) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u':
        append_utf8(out, parse_unicode_escape());
        return;
      default:
        fail("invalid escape (expected one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
    }
    ++pos_;
  }

  // At the 'u' of \uXXXX; reads a surrogate pair as one code point.
  uint32_t parse_unicode_escape() {
    const size_t escape_offset = pos_ - 1;
    ++pos_;  // 'u'
    const uint32_t first = parse_four_hex_digits();
    if (first >= 0xDC00 && first <= 0xDFFF)
      fail_at(escape_offset, "lone low surrogate \\u" + hex4(first) + " (it must follow a high surrogate)");
    if (first < 0xD800 || first > 0xDBFF) return first;
    if (text_.substr(pos_, 2) != "\\u")
      fail_at(escape_offset, "high surrogate \\u" + hex4(first) + " is not followed by a \\u low surrogate");
    const size_t second_offset = pos_;
    pos_ += 2;
    const uint32_t second = parse_four_hex_digits();
    if (second < 0xDC00 || second > 0xDFFF)
      fail_at(second_offset, "expected a low surrogate (\\uDC00..\\uDFFF) after \\u" + hex4(first) + ", got \\u" +
                                 hex4(second));
    return 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
  }

  uint32_t parse_four_hex_digits() {
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      const int digit = at_end() ? -1 : hex_digit_value(text_[pos_]);
      if (digit < 0) fail("expected 4 hex digits after \\u");
      value = value * 16 + static_cast<uint32_t>(digit);
      ++pos_;
    }
    return value;
  }

  static std::string hex4(uint32_t v) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%04X", v);
    return buf;
  }

  // Number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  void parse_number(JsonValue& out) {
    const size_t start = pos_;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (is_digit(peek())) fail("leading zeros are not allowed in numbers");
    } else if (is_digit(peek())) {
      while (is_digit(peek())) ++pos_;
    } else {
      fail("expected a digit");
    }
    bool integer_literal = true;
    if (peek() == '.') {
      integer_literal = false;
      ++pos_;
      if (!is_digit(peek())) fail("expected a digit after the decimal point");
      while (is_digit(peek())) ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      integer_literal = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!is_digit(peek())) fail("expected a digit in the exponent");
      while (is_digit(peek())) ++pos_;
    }
    const std::string_view literal = text_.substr(start, pos_ - start);
    out.kind_ = JsonValue::Kind::Number;
    out.number_ = literal_to_double(literal, start);
    if (integer_literal) {
      int64_t exact = 0;
      const auto [end, ec] = std::from_chars(literal.data(), literal.data() + literal.size(), exact);
      if (ec == std::errc() && end == literal.data() + literal.size()) {
        out.int_ = exact;
        out.has_exact_int_ = true;
      }
    }
  }

  double literal_to_double(std::string_view literal, size_t offset) const {
    double value = 0;
    const auto [end, ec] = std::from_chars(literal.data(), literal.data() + literal.size(), value);
    if (ec == std::errc() && end == literal.data() + literal.size()) return value;
    if (ec == std::errc::result_out_of_range) {
      if (decimal_magnitude(literal) > 0)
        fail_at(offset, "number " + std::string(literal) + " is beyond the range of a double");
      return literal[0] == '-' ? -0.0 : 0.0;  // underflow
    }
    fail_at(offset, "unreadable number " + std::string(literal));
  }

  // Roughly the decimal exponent of a (nonzero) literal: positive when its
  // magnitude is >= 1, so an out-of-range result is an overflow.
  static long long decimal_magnitude(std::string_view literal) {
    size_t i = literal[0] == '-' ? 1 : 0;
    long long magnitude = 0;
    bool seen_nonzero = false;
    for (; i < literal.size() && is_digit(literal[i]); ++i) {
      if (literal[i] != '0') seen_nonzero = true;
      if (seen_nonzero) ++magnitude;
    }
    if (i < literal.size() && literal[i] == '.') {
      for (++i; i < literal.size() && is_digit(literal[i]); ++i) {
        if (seen_nonzero) break;
        if (literal[i] != '0') {
          seen_nonzero = true;
          break;
        }
        --magnitude;
      }
      while (i < literal.size() && is_digit(literal[i])) ++i;
    }
    if (i < literal.size() && (literal[i] == 'e' || literal[i] == 'E')) {
      ++i;
      const bool negative = literal[i] == '-';
      if (literal[i] == '+' || literal[i] == '-') ++i;
      long long exponent = 0;
      for (; i < literal.size(); ++i) exponent = std::min(exponent * 10 + (literal[i] - '0'), 1000000000LL);
      magnitude += negative ? -exponent : exponent;
    }
    return magnitude;
  }

  [[noreturn]] void fail(const std::string& message) const { fail_at(pos_, message); }

  [[noreturn]] void fail_at(size_t offset, const std::string& message) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < offset && i < text_.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(text_[i]);
      if (c == '\n') {
        ++line;
        column = 1;
      } else if ((c & 0xC0) != 0x80) {  // count characters, not UTF-8 continuation bytes
        ++column;
      }
    }
    throw Error(*source_ + ":" + std::to_string(line) + ":" + std::to_string(column) + " (byte " +
                std::to_string(offset) + "): " + message + ", found " + describe(offset));
  }

  std::string describe(size_t offset) const {
    if (offset >= text_.size()) return "end of input";
    const unsigned char c = static_cast<unsigned char>(text_[offset]);
    char buf[32];
    if (c >= 0x20 && c < 0x7F)
      std::snprintf(buf, sizeof buf, "'%c'", c);
    else if (c < 0x80)
      std::snprintf(buf, sizeof buf, "control character U+%04X", c);
    else
      std::snprintf(buf, sizeof buf, "byte 0x%02X", c);
    return buf;
  }

  std::string_view text_;
  std::shared_ptr<const std::string> source_;
  size_t pos_ = 0;
};

JsonValue parse_json(std::string_view text, const std::string& what_for_errors) {
  JsonParser parser(text, std::make_shared<const std::string>(what_for_errors));
  return parser.parse_document();
}

// ---- access ----

const char* JsonValue::kind_name(Kind kind) {
  switch (kind) {
    case Kind::Null: return "null";
    case Kind::Bool: return "a boolean";
    case Kind::Number: return "a number";
    case Kind::String: return "a string";
    case Kind::Array: return "an array";
    case Kind::Object: return "an object";
  }
  return "?";
}

std::string JsonValue::display_path() const { return path_.empty() ? "(top level)" : path_; }

std::string JsonValue::where() const {
  const std::string source = source_ ? *source_ : std::string("JSON");
  return path_.empty() ? source : source + ": " + path_;
}

void JsonValue::throw_wrong_kind(const char* wanted) const {
  throw Error(where() + ": expected " + wanted + ", found " + kind_name(kind_));
}

bool JsonValue::as_bool() const {
  if (kind_ != Kind::Bool) throw_wrong_kind("a boolean");
  return bool_;
}

double JsonValue::as_number() const {
  if (kind_ != Kind::Number) throw_wrong_kind("a number");
  return number_;
}

int64_t JsonValue::as_int() const {
  if (kind_ != Kind::Number) throw_wrong_kind("an integer");
  if (has_exact_int_) return int_;
  if (number_ != std::trunc(number_) || std::fabs(number_) > kMaxExactDoubleInt) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", number_);
    throw Error(where() + ": expected an integer, found " + buf);
  }
  return static_cast<int64_t>(number_);
}

const std::string& JsonValue::as_string() const {
  if (kind_ != Kind::String) throw_wrong_kind("a string");
  return string_;
}

const JsonValue::Array& JsonValue::as_array() const {
  if (kind_ != Kind::Array) throw_wrong_kind("an array");
  return array_;
}

const JsonValue::Object& JsonValue::as_object() const {
  if (kind_ != Kind::Object) throw_wrong_kind("an object");
  return object_;
}

const JsonValue* JsonValue::find(std::string_view key) const {
  if (kind_ != Kind::Object) return nullptr;
  for (const auto& [k, v] : object_)
    if (k == key) return &v;
  return nullptr;
}

const JsonValue& JsonValue::at(std::string_view key) const {
  if (kind_ != Kind::Object) throw_wrong_kind(("an object with key '" + std::string(key) + "'").c_str());
  if (const JsonValue* v = find(key)) return *v;
  const std::string source = source_ ? *source_ : std::string("JSON");
  throw Error(source + ": " + member_path(path_, key) + ": missing (the object at " + display_path() +
              " has no key '" + std::string(key) + "')");
}

const JsonValue& JsonValue::at(size_t index) const {
  const Array& elements = as_array();
  if (index >= elements.size())
    throw Error(where() + ": index " + std::to_string(index) + " is out of range (the array has " +
                std::to_string(elements.size()) + " elements)");
  return elements[index];
}

size_t JsonValue::size() const {
  if (kind_ == Kind::Array) return array_.size();
  if (kind_ == Kind::Object) return object_.size();
  return 0;
}

}  // namespace qlens

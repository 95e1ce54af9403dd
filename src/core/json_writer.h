// A small streaming JSON writer.
//
//   JsonWriter w(std::cout, /*pretty=*/true);
//   w.begin_object();
//   w.key("x"); w.value(1.5);
//   w.key("list"); w.begin_array(); w.value(1); w.value("two"); w.null(); w.end_array();
//   w.end_object();
//
// Strings are escaped per RFC 8259 (quotes, backslashes, all control
// characters); invalid UTF-8 bytes are replaced by U+FFFD so the output is
// always valid UTF-8. Doubles are printed with the shortest text that reads
// back to the same value; NaN and infinities are written as null. Misuse
// (a value where a key is due, unbalanced end_*) throws std::logic_error.
// No newline is written after the top-level value.
#pragma once

#include <concepts>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace qlens {

class JsonWriter {
 public:
  explicit JsonWriter(std::ostream& os, bool pretty = false) : os_(os), pretty_(pretty) {}

  void begin_object();
  void end_object();
  void begin_array();
  void end_array();
  void key(std::string_view k);

  void value(std::string_view s);
  void value(const char* s) { value(std::string_view(s)); }
  void value(const std::string& s) { value(std::string_view(s)); }
  void value(double d);
  void value(float f);  // shortest text for the float (1e-05, not 9.99999974737875e-06)
  void value(bool b);
  template <std::integral T>
  requires(!std::same_as<T, bool>) void value(T v) {
    if constexpr (std::is_signed_v<T>)
      value_int(static_cast<int64_t>(v));
    else
      value_uint(static_cast<uint64_t>(v));
  }
  void null();
  // An array of the range's values.
  template <class Range>
  void array(const Range& values) {
    begin_array();
    for (const auto& v : values) value(v);
    end_array();
  }

  // True once the top-level value is complete.
  bool done() const { return stack_.empty() && wrote_top_; }

  // Escapes `s` as the body of a JSON string (without the quotes).
  static std::string escape(std::string_view s);

 private:
  enum class Ctx { Object, Array };
  struct Level {
    Ctx ctx;
    bool first = true;
    bool have_key = false;
  };
  void before_value();
  void value_int(int64_t v);
  void value_uint(uint64_t v);
  void newline_indent();
  void raw(std::string_view s) { os_ << s; }

  std::ostream& os_;
  bool pretty_;
  std::vector<Level> stack_;
  bool wrote_top_ = false;
};

}  // namespace qlens

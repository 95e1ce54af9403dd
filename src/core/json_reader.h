// A small, strict JSON reader (RFC 8259) for the files qlens reads back
// (sensitivity tables, reports).
//
//   JsonValue doc = parse_json(text, "sens.json");
//   for (const JsonValue& t : doc.at("tensors").as_array())
//     uint64_t bytes = t.at("candidates").at(0).at("bytes").as_int();
//
// Every value remembers where it sits in the document ("tensors[3].bytes"), so
// a wrong type or a missing key is reported with the file and that path.
//
// Policies (all errors are qlens::Error):
// - Syntax errors name the source, line:column (1-based, column in UTF-8
//   characters) and byte offset, what was expected and what was found.
// - Strings must be valid UTF-8 without raw control characters; escapes
//   include \uXXXX, with surrogate pairs combined into one code point. A lone
//   surrogate is an error. \u0000 yields an embedded NUL.
// - Numbers follow the JSON grammar exactly (no leading '+', leading zeros,
//   "1.", ".5", NaN or Infinity). Each is kept as the nearest double; an
//   integer literal (no fraction, no exponent) that fits int64 is also kept
//   exactly, so 9007199254740993 (2^53 + 1) reads back exactly through
//   as_int() while as_number() gives 9007199254740992. Magnitudes beyond the
//   double range are an error; values below it underflow to (signed) zero.
// - Duplicate keys in one object are an error: a table that says two things
//   about one key is more likely broken than meant.
// - Nesting deeper than kJsonMaxDepth arrays/objects is an error (the reader
//   recurses; this bounds the stack on hostile input).
// - A leading UTF-8 byte order mark is skipped (RFC 8259 section 8.1 permits
//   ignoring it); anything but whitespace after the top-level value is an error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qlens {

constexpr int kJsonMaxDepth = 512;

class JsonValue {
 public:
  enum class Kind { Null, Bool, Number, String, Array, Object };
  using Array = std::vector<JsonValue>;
  using Member = std::pair<std::string, JsonValue>;
  using Object = std::vector<Member>;  // in document order; keys are unique

  JsonValue() = default;

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::Null; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_number() const { return kind_ == Kind::Number; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_object() const { return kind_ == Kind::Object; }
  // True for a number given as an integer literal that fits int64.
  bool is_exact_int() const { return kind_ == Kind::Number && has_exact_int_; }

  // Typed access; each throws an Error naming the path when the kind differs.
  bool as_bool() const;
  double as_number() const;
  // The exact integer of an integer literal; otherwise a number with an
  // integral value of magnitude <= 2^53 (1e3, 2.0), where every integer is
  // exact in a double. Anything else (1.5, 1e300) is an error.
  int64_t as_int() const;
  const std::string& as_string() const;
  const Array& as_array() const;
  const Object& as_object() const;

  // Object member by key: at() throws an Error naming the key and this path;
  // find() returns nullptr when the key is absent (or this is not an object).
  const JsonValue& at(std::string_view key) const;
  const JsonValue* find(std::string_view key) const;
  // Array element: throws an Error when out of range.
  const JsonValue& at(size_t index) const;
  // Elements of an array or members of an object; 0 for other kinds.
  size_t size() const;

  // Where this value sits: "" for the top level, "tensors[3].candidates[1].bytes".
  const std::string& path() const { return path_; }
  // The path as shown in messages: "(top level)" for the root.
  std::string display_path() const;
  // "FILE: PATH" (or "FILE" at the top level), the prefix of messages about this value.
  std::string where() const;
  // "null", "a boolean", "a number", ...
  static const char* kind_name(Kind kind);

 private:
  friend class JsonParser;
  [[noreturn]] void throw_wrong_kind(const char* wanted) const;

  Kind kind_ = Kind::Null;
  bool bool_ = false;
  bool has_exact_int_ = false;
  double number_ = 0;
  int64_t int_ = 0;
  std::string string_;
  Array array_;
  Object object_;
  std::string path_;
  std::shared_ptr<const std::string> source_;  // the what_for_errors text, shared by all values
};

// Parses a whole document. `what_for_errors` (usually the file name) starts
// every error message.
JsonValue parse_json(std::string_view text, const std::string& what_for_errors);

}  // namespace qlens

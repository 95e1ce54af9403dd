// The strict JSON reader: every value kind, escapes and surrogate pairs,
// number grammar and exactness, error positions for truncated and invalid
// input, duplicate keys, the nesting limit, paths in access errors, and a
// round trip through JsonWriter.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>

#include "core/json_reader.h"
#include "core/json_writer.h"
#include "qlens/error.h"

namespace qlens {
namespace {

JsonValue parse(std::string_view text) { return parse_json(text, "test.json"); }

// The message of the Error that parsing `text` throws ("" if it does not).
std::string parse_error(std::string_view text) {
  try {
    parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---- value kinds ----

TEST(JsonReader, EveryValueKind) {
  const JsonValue v = parse(R"({"n":null,"t":true,"f":false,"x":-12.5e1,"s":"hi","a":[1,"two",null],"o":{}})");
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v.size(), 7u);
  EXPECT_TRUE(v.at("n").is_null());
  EXPECT_TRUE(v.at("t").as_bool());
  EXPECT_FALSE(v.at("f").as_bool());
  EXPECT_EQ(v.at("x").as_number(), -125.0);
  EXPECT_EQ(v.at("s").as_string(), "hi");
  const auto& a = v.at("a").as_array();
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].as_int(), 1);
  EXPECT_EQ(a[1].as_string(), "two");
  EXPECT_TRUE(a[2].is_null());
  EXPECT_TRUE(v.at("o").is_object());
  EXPECT_EQ(v.at("o").size(), 0u);
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_EQ(v.at("s").find("s"), nullptr);  // find on a non-object: nullptr, no throw
}

TEST(JsonReader, TopLevelScalarsAndWhitespace) {
  EXPECT_TRUE(parse(" \t\r\n null \n").is_null());
  EXPECT_EQ(parse("42").as_int(), 42);
  EXPECT_EQ(parse("\"x\"").as_string(), "x");
  EXPECT_TRUE(parse("[]").as_array().empty());
  EXPECT_EQ(parse("\xEF\xBB\xBF[1]").size(), 1u);  // a byte order mark is skipped
}

TEST(JsonReader, MembersKeepDocumentOrder) {
  const JsonValue v = parse(R"({"z":1,"a":2,"m":3})");
  const auto& members = v.as_object();
  ASSERT_EQ(members.size(), 3u);
  EXPECT_EQ(members[0].first, "z");
  EXPECT_EQ(members[1].first, "a");
  EXPECT_EQ(members[2].first, "m");
}

// ---- strings ----

TEST(JsonReader, SimpleEscapes) {
  EXPECT_EQ(parse(R"("\" \\ \/ \b \f \n \r \t")").as_string(), "\" \\ / \b \f \n \r \t");
}

TEST(JsonReader, UnicodeEscapesBecomeUtf8) {
  EXPECT_EQ(parse(R"("\u0041")").as_string(), "A");
  EXPECT_EQ(parse(R"("\u00e9")").as_string(), "\xC3\xA9");      // é, two bytes
  EXPECT_EQ(parse(R"("\u20AC")").as_string(), "\xE2\x82\xAC");  // €, three bytes
  EXPECT_EQ(parse(R"("\uD83D\uDE00")").as_string(), "\xF0\x9F\x98\x80");  // 😀 from a surrogate pair
  EXPECT_EQ(parse(R"("\uDBFF\uDFFF")").as_string(), "\xF4\x8F\xBF\xBF");  // U+10FFFF, the last code point
  const std::string nul = parse(R"("a\u0000b")").as_string();
  ASSERT_EQ(nul.size(), 3u);
  EXPECT_EQ(nul[1], '\0');
  EXPECT_EQ(parse("\"caf\xC3\xA9 \xF0\x9F\x98\x80\"").as_string(), "caf\xC3\xA9 \xF0\x9F\x98\x80");  // raw UTF-8 kept
}

TEST(JsonReader, BadSurrogatesAreErrors) {
  EXPECT_TRUE(contains(parse_error(R"("\uD83D")"), "not followed by a \\u low surrogate"));
  EXPECT_TRUE(contains(parse_error(R"("\uD83Dx")"), "not followed by a \\u low surrogate"));
  EXPECT_TRUE(contains(parse_error(R"("\uD83D\u0041")"), "expected a low surrogate"));
  EXPECT_TRUE(contains(parse_error(R"("\uDE00")"), "lone low surrogate"));
}

TEST(JsonReader, BadStringsAreErrors) {
  EXPECT_TRUE(contains(parse_error(R"("\q")"), "invalid escape"));
  EXPECT_TRUE(contains(parse_error(R"("\u12")"), "expected 4 hex digits"));
  EXPECT_TRUE(contains(parse_error(R"("\u12G4")"), "expected 4 hex digits"));
  EXPECT_TRUE(contains(parse_error("\"a\tb\""), "control characters must be escaped"));
  EXPECT_TRUE(contains(parse_error("\"a\nb\""), "control characters must be escaped"));
  EXPECT_TRUE(contains(parse_error("\"\xC3\x28\""), "invalid UTF-8"));      // bad continuation byte
  EXPECT_TRUE(contains(parse_error("\"\xC0\xAF\""), "invalid UTF-8"));      // overlong '/'
  EXPECT_TRUE(contains(parse_error("\"\xED\xA0\x80\""), "invalid UTF-8"));  // encoded surrogate
  EXPECT_TRUE(contains(parse_error("\"abc"), "expected '\"' to close the string"));
  EXPECT_TRUE(contains(parse_error("'single'"), "expected a value"));
}

// ---- numbers ----

TEST(JsonReader, NumbersFollowTheGrammar) {
  EXPECT_EQ(parse("0").as_number(), 0.0);
  EXPECT_TRUE(std::signbit(parse("-0").as_number()));
  EXPECT_EQ(parse("-123").as_int(), -123);
  EXPECT_EQ(parse("1.5").as_number(), 1.5);
  EXPECT_EQ(parse("-1.5e-3").as_number(), -1.5e-3);
  EXPECT_EQ(parse("1E+2").as_number(), 100.0);
  EXPECT_EQ(parse("2.5e10").as_number(), 2.5e10);
  EXPECT_EQ(parse("0.1").as_number(), 0.1);  // nearest double, as the writer's shortest form reads back
  EXPECT_EQ(parse("4.9406564584124654e-324").as_number(), 4.9406564584124654e-324);  // smallest subnormal
  for (const char* bad : {"01", "-01", "+1", ".5", "1.", "1.e3", "1e", "1e+", "-", "--1", "NaN", "Infinity",
                          "-Infinity", "0x10", "1_000"}) {
    EXPECT_FALSE(parse_error(bad).empty()) << bad;
  }
}

TEST(JsonReader, IntegersAreExactInInt64) {
  // 2^53 + 1 is not a double: as_number rounds it, as_int keeps it.
  const JsonValue big = parse("9007199254740993");
  EXPECT_TRUE(big.is_exact_int());
  EXPECT_EQ(big.as_int(), 9007199254740993LL);
  EXPECT_EQ(big.as_number(), 9007199254740992.0);
  EXPECT_EQ(parse("9223372036854775807").as_int(), INT64_MAX);
  EXPECT_EQ(parse("-9223372036854775808").as_int(), INT64_MIN);
  // Beyond int64: a double only, and too large for as_int to vouch for.
  const JsonValue beyond = parse("9223372036854775808");
  EXPECT_FALSE(beyond.is_exact_int());
  EXPECT_EQ(beyond.as_number(), 9223372036854775808.0);
  EXPECT_TRUE(contains(error_of([&] { beyond.as_int(); }), "expected an integer"));
  // Integral values written as decimals or exponents are integers up to 2^53.
  EXPECT_EQ(parse("1e3").as_int(), 1000);
  EXPECT_EQ(parse("2.0").as_int(), 2);
  EXPECT_EQ(parse("9007199254740992e0").as_int(), 9007199254740992LL);
  EXPECT_FALSE(parse("1e3").is_exact_int());
  EXPECT_TRUE(contains(error_of([] { parse("1.5").as_int(); }), "expected an integer, found 1.5"));
  EXPECT_TRUE(contains(error_of([] { parse("1e300").as_int(); }), "expected an integer"));
}

TEST(JsonReader, OverflowIsAnErrorUnderflowIsZero) {
  EXPECT_TRUE(contains(parse_error("1e400"), "beyond the range of a double"));
  EXPECT_TRUE(contains(parse_error("-123456789e999"), "beyond the range of a double"));
  EXPECT_EQ(parse("1e-400").as_number(), 0.0);
  const double negative_zero = parse("-0.0000001e-400").as_number();
  EXPECT_EQ(negative_zero, 0.0);
  EXPECT_TRUE(std::signbit(negative_zero));
  EXPECT_EQ(parse("0e999999").as_number(), 0.0);
}

// ---- syntax errors and their positions ----

TEST(JsonReader, ErrorsGiveLineColumnAndOffset) {
  // "{\n  \"a\": tru\n}": the literal breaks at the newline, byte 12, line 2 column 11.
  const std::string e = parse_error("{\n  \"a\": tru\n}");
  EXPECT_TRUE(contains(e, "test.json:2:11 (byte 12)")) << e;
  EXPECT_TRUE(contains(e, "expected 'true'")) << e;
  EXPECT_TRUE(contains(e, "found control character U+000A")) << e;
}

TEST(JsonReader, ColumnsCountCharactersNotBytes) {
  // '[' '"' 'é'(2 bytes) '"' ',' ' ' then x at byte 7, character 7.
  const std::string e = parse_error("[\"\xC3\xA9\", x]");
  EXPECT_TRUE(contains(e, "test.json:1:7 (byte 7)")) << e;
  EXPECT_TRUE(contains(e, "found 'x'")) << e;
}

TEST(JsonReader, TruncatedInput) {
  struct Case {
    const char* text;
    const char* expected;
  };
  for (const Case& c : {Case{"", "expected a value, found end of input"},
                        Case{"   ", "expected a value, found end of input"},
                        Case{"[1, 2", "expected ',' or ']' after an array element, found end of input"},
                        Case{"{\"a\":", "expected a value, found end of input"},
                        Case{"{\"a\"", "expected ':' after an object key, found end of input"},
                        Case{"{\"a\":1", "expected ',' or '}' after an object member, found end of input"},
                        Case{"{", "expected a string key or '}', found end of input"},
                        Case{"[\"abc", "expected '\"' to close the string, found end of input"},
                        Case{"\"\\", "expected an escape character after '\\', found end of input"},
                        Case{"nul", "expected 'null', found end of input"},
                        Case{"-", "expected a digit, found end of input"},
                        Case{"1.", "expected a digit after the decimal point, found end of input"}}) {
    const std::string e = parse_error(c.text);
    EXPECT_TRUE(contains(e, c.expected)) << "input '" << c.text << "': " << e;
  }
  const std::string e = parse_error("[1, 2");
  EXPECT_TRUE(contains(e, "test.json:1:6 (byte 5)")) << e;
}

TEST(JsonReader, InvalidInput) {
  struct Case {
    const char* text;
    const char* expected;
  };
  for (const Case& c : {Case{"[1,]", "expected a value (object, array, string, number, true, false or null), found ']'"},
                        Case{"{\"a\":1,}", "expected a string key, found '}'"},
                        Case{"{a:1}", "expected a string key or '}', found 'a'"},
                        Case{"[1 2]", "expected ',' or ']' after an array element, found '2'"},
                        Case{"1 2", "expected end of input after the top-level value, found '2'"},
                        Case{"truex", "expected end of input after the top-level value, found 'x'"},
                        Case{"trUe", "expected 'true', found 'U'"},
                        Case{"// comment\n1", "found '/'"},
                        Case{"[1]\x01", "found control character U+0001"},
                        Case{"\xC3\xA9", "found byte 0xC3"}}) {
    const std::string e = parse_error(c.text);
    EXPECT_TRUE(contains(e, c.expected)) << "input '" << c.text << "': " << e;
  }
}

TEST(JsonReader, DuplicateKeysAreErrors) {
  const std::string e = parse_error(R"({"a":{"k":1,"k":2}})");
  EXPECT_TRUE(contains(e, "duplicate key 'k' in the object at a")) << e;
  EXPECT_TRUE(contains(e, "1:13 (byte 12)")) << e;  // points at the second "k"
  EXPECT_TRUE(contains(parse_error(R"({"x":1,"x":1})"), "duplicate key 'x' in the object at (top level)"));
  // Equal keys in different objects are fine.
  EXPECT_NO_THROW(parse(R"([{"k":1},{"k":2}])"));
}

TEST(JsonReader, NestingDepthIsLimited) {
  const auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  EXPECT_NO_THROW(parse(nested(kJsonMaxDepth)));
  const std::string e = parse_error(nested(kJsonMaxDepth + 1));
  EXPECT_TRUE(contains(e, "nested deeper than 512 levels")) << e;
  EXPECT_TRUE(contains(e, "(byte 512)")) << e;
  // Hostile input: a million openers fail cleanly instead of exhausting the stack.
  EXPECT_TRUE(contains(parse_error(std::string(1000000, '[')), "nested deeper"));
  EXPECT_TRUE(contains(parse_error(std::string(1000000, '{')), "expected a string key or '}'"));
  std::string objects;
  for (int i = 0; i <= kJsonMaxDepth; ++i) objects += "{\"a\":";
  EXPECT_TRUE(contains(parse_error(objects + "1" + std::string(kJsonMaxDepth + 1, '}')), "nested deeper"));
}

// ---- access errors name the path ----

TEST(JsonReader, MissingKeysNameThePath) {
  const JsonValue v = parse(R"({"tensors":[{},{"candidates":[{"type":"Q4_0"},{"type":"Q8_0"}]}]})");
  const JsonValue& candidate = v.at("tensors").at(1).at("candidates").at(1);
  EXPECT_EQ(candidate.path(), "tensors[1].candidates[1]");
  const std::string e = error_of([&] { candidate.at("bytes"); });
  EXPECT_EQ(e, "test.json: tensors[1].candidates[1].bytes: missing (the object at tensors[1].candidates[1] has no key "
               "'bytes')");
  EXPECT_TRUE(contains(error_of([&] { v.at("nope"); }), "the object at (top level) has no key 'nope'"));
}

TEST(JsonReader, WrongKindsNameThePath) {
  const JsonValue v = parse(R"({"t":[{"bytes":"12"}],"odd key":{"x y":[true]}})");
  EXPECT_EQ(error_of([&] { v.at("t").at(0).at("bytes").as_int(); }),
            "test.json: t[0].bytes: expected an integer, found a string");
  EXPECT_EQ(error_of([&] { v.at("t").as_object(); }), "test.json: t: expected an object, found an array");
  EXPECT_EQ(error_of([&] { v.as_array(); }), "test.json: expected an array, found an object");
  const JsonValue& odd = v.at("odd key").at("x y").at(0);
  EXPECT_EQ(odd.path(), "[\"odd key\"][\"x y\"][0]");
  EXPECT_TRUE(contains(error_of([&] { odd.as_string(); }), "expected a string, found a boolean"));
  EXPECT_TRUE(contains(error_of([&] { v.at("t").at(5); }), "t: index 5 is out of range (the array has 1 elements)"));
}

// ---- round trip with the writer ----

TEST(JsonReader, ReadsBackWhatJsonWriterWrites) {
  const std::vector<double> doubles = {0.1, -1e-5, 1.0 / 3, 6.02214076e23, 5e-324, -0.0, 123456789.125};
  const std::string tricky = std::string("tab\t quote\" slash\\ nul") + '\0' + " \x01 caf\xC3\xA9 \xF0\x9F\x98\x80";
  std::ostringstream s;
  JsonWriter w(s, true);
  w.begin_object();
  w.key("doubles");
  w.begin_array();
  for (double d : doubles) w.value(d);
  w.end_array();
  w.key(tricky);
  w.value(tricky);
  w.key("big");
  w.value(uint64_t{18446744073709551615u});
  w.key("neg");
  w.value(int64_t{-9007199254740993});
  w.end_object();

  const JsonValue v = parse(s.str());
  const auto& read = v.at("doubles").as_array();
  ASSERT_EQ(read.size(), doubles.size());
  for (size_t i = 0; i < doubles.size(); ++i) {
    EXPECT_EQ(read[i].as_number(), doubles[i]) << i;
    EXPECT_EQ(std::signbit(read[i].as_number()), std::signbit(doubles[i])) << i;
  }
  EXPECT_EQ(v.at(tricky).as_string(), tricky);
  EXPECT_EQ(v.at("big").as_number(), 18446744073709551615.0);  // beyond int64: the double only
  EXPECT_EQ(v.at("neg").as_int(), -9007199254740993LL);
}

}  // namespace
}  // namespace qlens

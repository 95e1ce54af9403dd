#include "tools/user_regex.h"

#include <cctype>

#include "qlens/error.h"

namespace qlens::tools {

namespace {

// libstdc++ compiles a pattern by recursive descent, one level per atom and
// per group: a pattern of tens of thousands of characters (a hostile
// tensor-type file) overflows the stack. Real patterns are far shorter.
constexpr size_t kMaxPatternLength = 4096;

// What libstdc++'s regex compiler must not see, as a reason ("" when none):
// a back-reference (\1 .. \9) outside a bracket expression (see below), or
// a number of more than 9 digits after a backslash or in a repetition count
// {m,n}, which overflows its counter (signed overflow in
// _Compiler::_M_cur_int_value). The bracket tracking follows libstdc++'s
// scanner: an escape takes one character, except the control escape \cX,
// which takes X whatever it is (so in [\c\]\1] the class ends at the first
// ']', and \1 is a back-reference). Digits after a backslash are refused
// inside brackets too, so a difference in that tracking cannot let them by.
std::string unsupported(const std::string& p) {
  const auto is_digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      size_t digits = 0;
      while (i + 1 + digits < p.size() && is_digit(p[i + 1 + digits])) ++digits;
      if (digits > 9) return "an escape of more than 9 digits";
      if (!in_class && p[i + 1] >= '1' && p[i + 1] <= '9') return "back-references (\\1 .. \\9) are not supported";
      i += p[i + 1] == 'c' && i + 2 < p.size() ? 2 : 1;
    } else if (p[i] == '[') {
      in_class = true;
    } else if (p[i] == ']') {
      in_class = false;
    } else if (p[i] == '{' && !in_class) {
      size_t digits = 0;
      for (size_t j = i + 1; j < p.size() && (is_digit(p[j]) || p[j] == ','); ++j) {
        digits = p[j] == ',' ? 0 : digits + 1;
        if (digits > 9) return "a repetition count {m,n} of more than 9 digits";
      }
    }
  }
  return "";
}

}  // namespace

std::regex user_regex(const std::string& pattern, const std::string& what) {
  const auto refuse = [&](const std::string& why) {
    const std::string shown = pattern.size() > 80 ? pattern.substr(0, 80) + "..." : pattern;
    return Error(what + ": '" + shown + "' is not a valid regular expression: " + why);
  };
  if (pattern.size() > kMaxPatternLength)
    throw refuse("it is " + std::to_string(pattern.size()) + " characters long; at most " +
                 std::to_string(kMaxPatternLength) + " are accepted");
  auto flags = std::regex::ECMAScript;
  if (const std::string why = unsupported(pattern); !why.empty()) throw refuse(why);
#ifdef __GLIBCXX__
  // libstdc++'s default matcher backtracks: a pattern such as (.*)*(.*)*z
  // takes exponential time. Its breadth-first matcher (the __polynomial
  // extension) answers the same yes/no question in polynomial time, and
  // yes/no is all qlens asks; it cannot follow back-references.
  flags |= std::regex_constants::__polynomial;
#endif
  try {
    return std::regex(pattern, flags);
  } catch (const std::regex_error& e) {
    throw refuse(e.what());
  }
}

}  // namespace qlens::tools

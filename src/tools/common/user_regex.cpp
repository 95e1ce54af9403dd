#include "tools/common/user_regex.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "qlens/error.h"

namespace qlens::tools {

namespace {

// libstdc++ compiles a pattern by recursive descent, one level per atom and
// per group: a pattern of tens of thousands of characters (a hostile
// tensor-type file) overflows the stack. Real patterns are far shorter.
constexpr size_t kMaxPatternLength = 4096;

bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

// Where the escape starting with the backslash at i ends (its last
// character), as libstdc++'s scanner reads it: one character after the
// backslash, two for the control escape \cX.
size_t escape_end(const std::string& p, size_t i) {
  if (i + 1 >= p.size()) return i;
  return p[i + 1] == 'c' && i + 2 < p.size() ? i + 2 : i + 1;
}

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
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      size_t digits = 0;
      while (i + 1 + digits < p.size() && is_digit(p[i + 1 + digits])) ++digits;
      if (digits > 9) return "an escape of more than 9 digits";
      if (!in_class && p[i + 1] >= '1' && p[i + 1] <= '9') return "back-references (\\1 .. \\9) are not supported";
      i = escape_end(p, i);
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

// An upper bound, roughly, of the states libstdc++'s compiler makes for the
// pattern: one per atom, two per group and quantifier, and a repetition
// count {m,n} clones what it repeats max(m, n) + 1 times (nested counts
// multiply). libstdc++ refuses more than 100,000 states, but compiling and
// matching that many takes seconds per pattern under a sanitizer and
// milliseconds without: a hostile tensor-type file could stall quantize, and
// the fuzz target spent half its time there. Real patterns need tens.
constexpr size_t kMaxStates = 10000;

size_t estimated_states(const std::string& p) {
  const auto saturate = [](double v) { return v > 1e12 ? size_t{1000000000000} : static_cast<size_t>(v); };
  std::vector<size_t> open{0};  // states of each open group so far (the pattern is the outermost)
  size_t last = 0;              // states of the last atom or group: what a quantifier repeats
  bool in_class = false;
  const auto add = [&](size_t n) {
    open.back() = saturate(static_cast<double>(open.back()) + n);
    last = n;
  };
  for (size_t i = 0; i < p.size(); ++i) {
    const char ch = p[i];
    if (in_class) {
      if (ch == '\\') i = escape_end(p, i);
      else if (ch == ']') in_class = false;
      continue;
    }
    if (ch == '\\') {
      i = escape_end(p, i);
      add(1);
    } else if (ch == '[') {
      in_class = true;
      add(1);
    } else if (ch == '(') {
      open.push_back(0);
    } else if (ch == ')' && open.size() > 1) {
      const size_t group = open.back() + 2;
      open.pop_back();
      add(group);
    } else if (ch == '|') {
      add(1);
    } else if (ch == '*' || ch == '+' || ch == '?') {
      open.back() = saturate(static_cast<double>(open.back()) + 2);
      last += 2;
    } else if (ch == '{') {
      size_t j = i + 1, most = 0, value = 0;
      bool digits = false;
      for (; j < p.size() && (is_digit(p[j]) || p[j] == ','); ++j) {
        value = p[j] == ',' ? 0 : std::min<size_t>(value * 10 + (p[j] - '0'), size_t{1} << 40);
        most = std::max(most, value);
        digits = digits || p[j] != ',';
      }
      if (digits && j < p.size() && p[j] == '}') {
        const double copies = static_cast<double>(most) + 1;
        open.back() = saturate(static_cast<double>(open.back()) + static_cast<double>(last) * copies);
        last = saturate(static_cast<double>(last) * (copies + 1));
        i = j;
      } else {
        add(1);
      }
    } else {
      add(1);
    }
  }
  double total = 0;
  for (size_t n : open) total += static_cast<double>(n);
  return saturate(total);
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
  if (estimated_states(pattern) > kMaxStates)
    throw refuse("its repetitions would expand it to more than " + std::to_string(kMaxStates) +
                 " states (a count {m,n} copies what it repeats, and nested counts multiply)");
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

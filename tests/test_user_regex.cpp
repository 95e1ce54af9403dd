// User-given regular expressions: compiled as ECMAScript; a bad one is an
// Error naming where it came from and the pattern.
#include <gtest/gtest.h>

#include "qlens/error.h"
#include "tools/common/user_regex.h"

namespace qlens::tools {
namespace {

TEST(UserRegex, CompilesAndSearches) {
  EXPECT_TRUE(std::regex_search("blk.3.ffn_down.weight", user_regex("ffn_(down|up)", "--tensors")));
  EXPECT_FALSE(std::regex_search("blk.3.attn_q.weight", user_regex("ffn_(down|up)", "--tensors")));
}

TEST(UserRegex, BadPatternNamesTheFlagAndThePattern) {
  try {
    user_regex("attn_(q", "compare: --nodes");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("compare: --nodes: 'attn_(q' is not a valid regular expression", 0), 0u) << what;
  }
}


// Patterns libstdc++'s compiler would misread (signed overflow in its
// counters) or its polynomial matcher cannot follow are refused before they
// reach it; the fuzz target tensor_types found the control-escape case.
TEST(UserRegex, RefusesWhatTheLibraryCannotTakeWithAReason) {
  const std::pair<const char*, const char*> refused[] = {
      {"(blk)\\.\\1", "back-references"},
      {"a{12345678901}", "more than 9 digits"},
      {"a{1,12345678901}", "more than 9 digits"},
      {"[\\77777777777]", "an escape of more than 9 digits"},
      // \c takes the next character, here the backslash: the class ends at
      // the first ']', and what follows is a back-reference.
      {"[\\c\\]\\1]", "back-references"},
      {"[\\c\\]\\77777777777777777777", "an escape of more than 9 digits"},
      // Repetitions that would make libstdc++ build (and walk) up to its
      // limit of 100,000 states.
      {"a{20000}", "more than 10000 states"},
      {"(ab{100}){100}", "more than 10000 states"},
      {"((x|y){30}z){100}", "more than 10000 states"},
      {"(.{0,64}){1000}", "more than 10000 states"},
  };
  for (const auto& [pattern, reason] : refused) {
    try {
      user_regex(pattern, "--tensor-type");
      ADD_FAILURE() << pattern << ": accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("is not a valid regular expression"), std::string::npos) << what;
      EXPECT_NE(what.find(reason), std::string::npos) << pattern << ": " << what;
    }
  }
  for (const char* pattern : {"a{2,3}", "blk\\.1[0-9]\\.", "[\\c]]x", "\\d{1,3}", ".{0,64}", "[{]{3}",
                              "blk\\.(1[0-9]|2[0-3])\\.ffn_(down|up)\\.weight", "^(token_embd|output)\\.weight$",
                              "blk\\.([0-9]{1,2})\\.(attn_(q|k|v)|ffn_.*){1}", "((a|b){10}c){20}"})
    EXPECT_NO_THROW(user_regex(pattern, "--tensor-type")) << pattern;
}

}  // namespace
}  // namespace qlens::tools

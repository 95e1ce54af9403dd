// User-given regular expressions: compiled as ECMAScript; a bad one is an
// Error naming where it came from and the pattern.
#include <gtest/gtest.h>

#include "qlens/error.h"
#include "tools/user_regex.h"

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

}  // namespace
}  // namespace qlens::tools

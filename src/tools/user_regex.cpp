#include "tools/user_regex.h"

#include "qlens/error.h"

namespace qlens::tools {

std::regex user_regex(const std::string& pattern, const std::string& what) {
  try {
    return std::regex(pattern);
  } catch (const std::regex_error& e) {
    throw Error(what + ": '" + pattern + "' is not a valid regular expression: " + e.what());
  }
}

}  // namespace qlens::tools

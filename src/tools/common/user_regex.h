// Regular expressions a user passes on the command line (--nodes, --tensors,
// --tensor-type, --include): ECMAScript syntax, and an Error naming the flag
// and the pattern when it does not compile.
#pragma once

#include <regex>
#include <string>

namespace qlens::tools {

// `what` names where the pattern came from, e.g. "compare: --nodes".
std::regex user_regex(const std::string& pattern, const std::string& what);

}  // namespace qlens::tools

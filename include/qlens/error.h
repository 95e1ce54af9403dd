// Errors: one exception type for everything a user can cause (bad files, bad flags,
// mismatched models). The message always names the thing at fault.
#pragma once

#include <stdexcept>
#include <string>

namespace qlens {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace qlens

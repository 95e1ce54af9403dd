// Helpers shared by the test suites.
#pragma once

#include <string>

namespace qlens::test {

// Path of a file under ../shared, or "" when the shared folder is absent.
std::string shared_path(const std::string& relative);

// Skips the current test with a clear message when a shared file is missing.
#define QLENS_REQUIRE_SHARED(var, relative)                                             \
  const std::string var = ::qlens::test::shared_path(relative);                         \
  if (var.empty()) GTEST_SKIP() << "needs ../shared/" << (relative)                     \
                                << " (the shared data folder is absent; see DATA.md)"

// A fresh temporary directory for this test (removed at process exit).
std::string temp_dir();

// Runs a shell command, returns its exit status; output captured into *out.
int run_command(const std::string& cmd, std::string* out);

}  // namespace qlens::test

// What the fuzz targets share: the entry points libFuzzer calls, a scratch
// file for the readers that take a path, and the rule every target follows:
// qlens::Error is an expected outcome of hostile input (caught); anything else
// (a crash, a sanitizer report, std::bad_alloc from a hostile size, another
// exception escaping, a hang) is a bug and ends the run.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "qlens/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace qlens::fuzz {

// A per-process scratch path ending in `suffix` (in /dev/shm when it exists:
// every input is written there once); the files written are removed at exit.
inline std::string scratch_path(const std::string& suffix) {
  static const std::string base = [] {
    const char* tmp = std::getenv("TMPDIR");
    const std::string dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (tmp && *tmp ? tmp : "/tmp");
    return dir + "/qlens-fuzz-" + std::to_string(getpid());
  }();
  return base + suffix;
}

// Writes the input to the scratch file of `suffix` and returns its path.
inline std::string write_scratch(const uint8_t* data, size_t size, const std::string& suffix) {
  static std::set<std::string> written;
  static const bool cleanup = [] {
    std::atexit([] {
      for (const std::string& p : written) std::remove(p.c_str());
    });
    return true;
  }();
  (void)cleanup;
  const std::string path = scratch_path(suffix);
  written.insert(path);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  if (std::fclose(f) != 0) std::abort();
  return path;
}

// Runs `fn`; qlens::Error (the library's answer to bad input) is swallowed.
template <typename Fn>
bool expect_error_or_success(Fn&& fn) {
  try {
    fn();
    return true;
  } catch (const qlens::Error& e) {
    // QLENS_FUZZ_VERBOSE=1: say why (to check that seeds get deep).
    static const bool verbose = std::getenv("QLENS_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "qlens::Error: %s\n", e.what());
    return false;
  }
}

}  // namespace qlens::fuzz

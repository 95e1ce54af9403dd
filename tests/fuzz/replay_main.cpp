// The replay driver of the normal build: runs every file of the given
// directories (or the given files) through the fuzz target once, in name
// order, as libFuzzer runs a corpus. A crash or an uncaught exception fails
// the ctest test Fuzz.Replay.<target>; a missing directory is skipped (a
// target may have no regressions yet).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path p = argv[i];
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
    } else if (fs::is_regular_file(p)) {
      files.push_back(p);
    } else {
      std::printf("%s: not found, skipped\n", argv[i]);
    }
  }
  std::sort(files.begin(), files.end());
  size_t bytes = 0;
  for (const fs::path& p : files) {
    std::ifstream in(p, std::ios::binary);
    const std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "running %s (%zu bytes)\n", p.c_str(), data.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    bytes += data.size();
  }
  std::printf("replayed %zu inputs (%zu bytes)\n", files.size(), bytes);
  return 0;
}

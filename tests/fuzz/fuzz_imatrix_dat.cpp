// Fuzz target "imatrix_dat": llama.cpp's legacy .dat importance matrix (int32
// entry count; per entry name, ncall, nval, float values; optional chunk
// count and dataset name) read by load_imatrix, then used as quantize and the
// statistics use it. Inputs starting with "GGUF" are skipped (that path is the
// imatrix_gguf target's).
#include <cstring>

#include "imatrix_common.h"

using namespace qlens;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= 4 && std::memcmp(data, "GGUF", 4) == 0) return 0;
  const std::string path = fuzz::write_scratch(data, size, ".imatrix.dat");
  tools::Imatrix m;
  if (!fuzz::expect_error_or_success([&] { m = tools::load_imatrix(path); })) return 0;
  fuzz::use_imatrix(m);
  return 0;
}

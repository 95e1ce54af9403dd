// Fuzz target "imatrix_gguf": llama.cpp's GGUF importance matrix
// (general.type = imatrix; <tensor>.in_sum2 and <tensor>.counts tensors,
// imatrix.* keys, qlens's checkpoint keys) read by load_imatrix, then used as
// quantize and the statistics use it. Inputs that do not start with "GGUF"
// get the magic prepended, so every input reaches the GGUF path.
#include <cstring>
#include <vector>

#include "imatrix_common.h"

using namespace qlens;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes;
  if (size < 4 || std::memcmp(data, "GGUF", 4) != 0) bytes.assign({'G', 'G', 'U', 'F'});
  bytes.insert(bytes.end(), data, data + size);
  const std::string path = fuzz::write_scratch(bytes.data(), bytes.size(), ".imatrix.gguf");
  tools::Imatrix m;
  if (!fuzz::expect_error_or_success([&] { m = tools::load_imatrix(path); })) return 0;
  fuzz::use_imatrix(m);
  return 0;
}

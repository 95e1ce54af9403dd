// `qlens inspect`: a readable or JSON summary of a GGUF file (metadata, tensor
// table, totals).
#pragma once

#include <ostream>

#include "qlens/gguf.h"

namespace qlens::tools {

// Fixed-width text: header facts, every metadata key with its type and value
// (arrays longer than 8 items shown as `[first items, ...] (N items)`, long
// strings cut), the tensor table (name, type, shape in ggml order, bytes, bits
// per weight) and totals.
void inspect_text(const gguf::File& file, std::ostream& os);

// The same as one JSON object:
//   {"path", "version", "alignment", "file_size", "data_offset",
//    "metadata": {key: {"type": "u32" | "array[string]" | ..., "value": ...}},
//    "tensors": [{"name", "type", "shape", "offset", "bytes", "bits_per_weight"}],
//    "totals": {"tensor_count", "parameter_count", "total_bytes", "bits_per_weight"}}
// Arrays longer than 64 items are summarized as
//   {"type": element type, "count": N, "head": [first 16 items]}.
// Non-finite floats are written as null.
void inspect_json(const gguf::File& file, std::ostream& os, bool pretty = true);

// Every value of every tensor the engine can read, dequantized: the tensors
// holding NaN or an infinity (llama.cpp's --check-tensors), with how many and
// where the first is. Empty when all are finite.
struct NonFiniteTensor {
  std::string name;
  int64_t n_nan = 0, n_inf = 0;
  int64_t first = -1;        // index of the first bad value; -1: none
  bool first_is_nan = false;
  bool any() const { return first >= 0; }
};
std::vector<NonFiniteTensor> check_tensors(const gguf::File& file, int n_threads = 0);
// One tensor's values at `data` (nothing found for a type the engine cannot read).
NonFiniteTensor check_tensor(const gguf::TensorInfo& t, const uint8_t* data);

}  // namespace qlens::tools

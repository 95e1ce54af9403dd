// An imatrix GGUF file rewritten as earlier qlens versions wrote it: every
// tensor 2-D (a dense weight's in_sum2 [n_cols, 1] and counts [1, 1], where
// llama-imatrix writes [n_cols] and [1]), metadata and data as they are.
// Users still have such files: the reader's path for them is tested
// (test_imatrix) and stays in the fuzz corpus (fuzz/make_seeds).
#pragma once

#include <cstdint>
#include <string>

#include "qlens/gguf.h"

namespace qlens::test {

inline void write_imatrix_two_dimensional(const std::string& in, const std::string& out) {
  auto f = gguf::File::open(in);
  gguf::Writer w;
  for (const auto& kv : f->metadata()) w.set(kv.key, kv.value);
  for (const auto& t : f->tensors()) {
    const int64_t ne[2] = {t.ne[0], t.ne[1]};
    w.add_tensor(t.name, t.type, ne, f->tensor_data(t), t.nbytes);
  }
  w.write(out);
}

}  // namespace qlens::test

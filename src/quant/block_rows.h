// Helpers of the block formats' row functions: reading a block at any
// address, a block's largest magnitude, and the row driver of the quantizers
// that weigh each element's squared error by its importance alone (lowbit.cpp,
// fp4.cpp). Internal to src/quant.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "qlens/error.h"

namespace qlens::quant {

// Block i of a run of blocks at any address, copied out: tensor data sits
// where the file put it, which need not be the block struct's alignment.
template <class Block>
Block load_block(const void* blocks, int64_t i) {
  Block b;
  std::memcpy(&b, static_cast<const char*>(blocks) + i * sizeof(Block), sizeof(Block));
  return b;
}

inline float block_amax(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax;
}

// Quantizes rows block by block: kFit(x, w, block) minimizes sum_j w_j (x_j -
// y_j)^2 over a block of N, w the importance of its columns (negative or
// non-finite importance counts as 0), or 1 without an importance or where
// the block's importance is all 0.
template <int N, class Block, void (*kFit)(const float*, const float*, Block&)>
void quantize_block_rows(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance) {
  if (n_per_row < 0 || n_per_row % N != 0)
    throw Error("quantize: row length " + std::to_string(n_per_row) + " is not a multiple of the block size " +
                std::to_string(N));
  if (nrows < 0) throw Error("quantize: negative row count " + std::to_string(nrows));
  float w[N];
  auto* out = static_cast<char*>(dst);
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t ib = 0; ib < n_per_row / N; ++ib) {
      float total = 0.0f;
      for (int j = 0; j < N; ++j) {
        w[j] = importance ? std::max(importance[ib * N + j], 0.0f) : 1.0f;
        if (!std::isfinite(w[j])) w[j] = 0.0f;
        total += w[j];
      }
      if (!(total > 0.0f)) std::fill(w, w + N, 1.0f);
      Block b{};
      kFit(src + r * n_per_row + ib * N, w, b);
      std::memcpy(out + (r * (n_per_row / N) + ib) * sizeof b, &b, sizeof b);
    }
}

}  // namespace qlens::quant

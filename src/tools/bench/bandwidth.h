// How fast this machine reads memory: the ceiling of generation, which
// streams every weight once per token. A plain read loop over a buffer far
// larger than the caches, on n threads at once (each its own slice), best of
// several runs; `qlens bench --bandwidth` and bench/bench_bandwidth report it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "qlens/model.h"

namespace qlens::tools {

// GB/s (1e9 bytes per second) reading `bytes` (rounded down to 64-byte lines)
// with n_threads threads (<= 0: one per core), the best of `repeats` runs.
double read_bandwidth_gbs(int n_threads, size_t bytes = size_t{1} << 30, int repeats = 5);

// The weight bytes one generated token reads: every weight but a token
// embedding that only get_rows reads (a tied output matrix reads it whole).
uint64_t weight_bytes_per_token(const Model& model);

}  // namespace qlens::tools

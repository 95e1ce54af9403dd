// Taps: reductions that the backend running a node computes itself, so that
// observing a model costs almost nothing (no host copies, no extra
// synchronizations). A tap accumulates across graph computations until its
// owner reads it back (once per chunk, say).
//
//   ColumnSumSq  on a MulMat node: per input column k of the activations
//                (src[1], [K, rows...]) the sum over rows of x_k^2, and the
//                number of rows: exactly what an importance matrix holds.
//   Stats        on any node: count, min, max, sum, sum of squares, NaN and
//                Inf counts of its values (NaN/Inf excluded from the others).
//   ErrorStats   on a node `a` with a second tensor `b` of the same shape:
//                sums of (a-b)^2, a^2, b^2, a*b and max |a-b|.
//
// The plain host implementations below are the reference: the host-callback
// fallback uses them, and backend kernels are tested against them.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "qlens/tensor.h"

namespace qlens {

enum class TapKind : uint8_t { ColumnSumSq, Stats, ErrorStats };
const char* tap_kind_name(TapKind kind);

struct NodeStats {
  int64_t count = 0;  // finite values
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  double sum = 0;
  double sum_sq = 0;
  int64_t nan = 0;
  int64_t inf = 0;

  void add(float x);
  void merge(const NodeStats& o);
  double mean() const { return count ? sum / count : 0.0; }
};

struct ErrorStats {
  int64_t count = 0;
  double sum_sq_diff = 0;  // sum (a-b)^2
  double sum_sq_a = 0;     // sum a^2 (a: the node, the reference in compare)
  double sum_sq_b = 0;     // sum b^2
  double sum_ab = 0;       // sum a*b
  double max_abs_diff = 0;
  int64_t non_finite = 0;  // pairs where a or b is NaN/Inf (excluded above)

  void add(float a, float b);
  void merge(const ErrorStats& o);
};

// What one tap has accumulated.
struct TapResult {
  TapKind kind = TapKind::Stats;
  std::vector<double> column_sum_sq;  // ColumnSumSq: [K]
  int64_t rows = 0;                   // ColumnSumSq: activation rows seen
  NodeStats stats;                    // Stats
  ErrorStats error;                   // ErrorStats

  // Adds another result of the same kind (and column count).
  void merge(const TapResult& o);
};

// The host reference: accumulates node `node` (host-readable, any strides,
// F32) into `acc`. For ColumnSumSq the activations are node.src[1]; for
// ErrorStats `other` is the second tensor.
void tap_accumulate_host(TapKind kind, const Tensor& node, const Tensor* other, TapResult& acc);
// The same on values already copied to host as F32 (logical order, dim 0
// fastest): what the scheduler's fallback uses for tensors on devices.
void tap_accumulate_values(TapKind kind, const std::vector<float>& values, int64_t row_length,
                           const std::vector<float>* other, TapResult& acc);

// A tap the caller attaches to a node: the scheduler asks a TapSelector for
// each node of each graph; requests with the same key accumulate together
// (for the imatrix, the key is the weight's name).
struct TapRequest {
  TapKind kind = TapKind::Stats;
  std::string key;
  const Tensor* other = nullptr;  // ErrorStats only
};

}  // namespace qlens

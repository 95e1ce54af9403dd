// Taps: reductions that the backend running a node computes itself, so that
// observing a model costs almost nothing (no host copies, no extra
// synchronizations). A tap accumulates across graph computations until its
// owner reads it back (once per chunk, say).
//
//   ColumnSumSq  on a MulMat node: per input column k of the activations
//                (src[1], [K, rows...]) the sum over rows of x_k^2, and the
//                number of rows: exactly what an importance matrix holds.
//                On a MulMatId node the same per expert: each token's row
//                (for each of its slots) counts for the expert of that slot;
//                on a MulMat of a 3-D weight (DeepSeek's attn_k_b, a matrix
//                per head) per matrix: each row for the matrix it meets.
//   Stats        on any node: count, min, max, sum, sum of squares, NaN and
//                Inf counts of its values (NaN/Inf excluded from the others).
//   ErrorStats   on a node `a` with a second tensor `b` of the same shape:
//                sums of (a-b)^2, a^2, b^2, a*b, max |a-b|, and a histogram
//                of the per-row (per-token) normalized error.
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

// A sketch of the distribution of positive values (errors): counts over
// logarithmic buckets, 8 per octave, so quantiles come out within 2^(1/16)
// (4.4%) relative; histograms merge by adding counts, and any backend can fill
// one with atomic adds. Bucket 0 holds zero and values below 2^kMinExp (and
// negatives), the last bucket values from 2^kMaxExp up (and NaN).
struct LogHistogram {
  static constexpr int kStepsPerOctave = 8;
  static constexpr int kMinExp = -40;
  static constexpr int kMaxExp = 24;
  static constexpr int kBuckets = (kMaxExp - kMinExp) * kStepsPerOctave + 2;

  // kBuckets counts, or empty while nothing was added (so that the many
  // short-lived ErrorStats of per-row sums cost no allocation).
  std::vector<uint64_t> counts;

  static int bucket(double v);
  // The value a bucket stands for: the geometric middle of its range.
  static double bucket_value(int b);
  void add(double v) {
    if (counts.empty()) counts.assign(kBuckets, 0);
    ++counts[bucket(v)];
  }
  void merge(const LogHistogram& o);
  uint64_t total() const;
  // q in [0, 1]; 0 when empty.
  double quantile(double q) const;
};

struct ErrorStats {
  int64_t count = 0;
  double sum_sq_diff = 0;  // sum (a-b)^2
  double sum_sq_a = 0;     // sum a^2 (a: the node, the reference in compare)
  double sum_sq_b = 0;     // sum b^2
  double sum_ab = 0;       // sum a*b
  double max_abs_diff = 0;
  int64_t non_finite = 0;  // pairs where a or b is NaN/Inf (excluded above)
  // Per row (a token, for activations): sum (a-b)^2 / sum b^2 of the row,
  // the distribution of the error over tokens, relative to b (the second
  // tensor: the reference when a tap on a test node compares it with its
  // reference partner). A row with sum b^2 = 0 counts its sum (a-b)^2.
  LogHistogram row_nmse;

  void add(float a, float b);
  // Adds one row's error to row_nmse from the row's sums.
  void add_row(double row_sum_sq_diff, double row_sum_sq_b);
  void merge(const ErrorStats& o);
  // Everything but row_nmse (adding one row's sums costs no histogram pass).
  void merge_sums(const ErrorStats& o);
};

// What one tap has accumulated.
struct TapResult {
  TapKind kind = TapKind::Stats;
  std::vector<double> column_sum_sq;  // ColumnSumSq: [K], or [n_expert][K] on a MulMatId
  int64_t rows = 0;                   // ColumnSumSq: activation rows seen (all experts)
  std::vector<int64_t> expert_rows;   // ColumnSumSq on a MulMatId: rows per expert, else empty
  // ColumnSumSq on a MulMat of a 3-D weight: its matrices (column_sum_sq is
  // [batch_matrices][K], each matrix seeing rows / batch_matrices rows); 0 else.
  int64_t batch_matrices = 0;
  NodeStats stats;                    // Stats
  ErrorStats error;                   // ErrorStats

  // Adds another result of the same kind (and column count).
  void merge(const TapResult& o);
};

// The experts a ColumnSumSq tap on `node` keeps apart (a MulMatId's expert
// count; 0 for a MulMat), the matrices of a MulMat's 3-D weight it keeps
// apart (0 for a 2-D weight), the matrix an activation row of a MulMat meets
// (rows counted over src[1]'s dims 1 to 3), and the accumulator's size
// (columns times experts or matrices).
int64_t tap_experts(const Tensor& node);
int64_t tap_batch_matrices(const Tensor& node);
int64_t tap_batch_matrix(const Tensor& node, int64_t row);
int64_t tap_columns(TapKind kind, const Tensor& node);

// The host reference: accumulates node `node` (host-readable, any strides,
// F32) into `acc`. For ColumnSumSq the activations are node.src[1]; for
// ErrorStats `other` is the second tensor.
void tap_accumulate_host(TapKind kind, const Tensor& node, const Tensor* other, TapResult& acc);
// The same on values already copied to host as F32 (logical order, dim 0
// fastest): what the scheduler's fallback uses for tensors on devices.
void tap_accumulate_values(TapKind kind, const std::vector<float>& values, int64_t row_length,
                           const std::vector<float>* other, TapResult& acc);
// ColumnSumSq on a MulMat of a 3-D weight from a host copy of its
// activations (F32 in logical order): each row into its matrix's sums.
void tap_accumulate_batch_values(const std::vector<float>& x, const Tensor& node, TapResult& acc);

// ColumnSumSq on a MulMatId node from host copies of its activations x
// (F32 in logical order, [K, b1, N]) and expert ids ([n_used, N]).
void tap_accumulate_expert_values(const std::vector<float>& x, int64_t K, int64_t b1, const std::vector<int32_t>& ids,
                                  int64_t n_used, int64_t n_expert, TapResult& acc);

// A tap the caller attaches to a node: the scheduler asks a TapSelector for
// each node of each graph; requests with the same key accumulate together
// (for the imatrix, the key is the weight's name).
struct TapRequest {
  TapKind kind = TapKind::Stats;
  std::string key;
  const Tensor* other = nullptr;  // ErrorStats only
};

}  // namespace qlens

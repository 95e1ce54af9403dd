// Taps on the CPU backend: the reductions of qlens/tap.h computed by the
// pool's threads right after their node, into per-backend accumulators.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "backend/cpu/isa.h"
#include "qlens/backend.h"

namespace qlens::cpu {

class CpuTapState final : public TapState {
 public:
  CpuTapState(TapKind kind, int64_t n_columns, int n_threads);

  TapKind kind;
  std::vector<double> column_sum_sq;  // ColumnSumSq: one slot per column (per expert), each owned by one thread
  int64_t rows = 0;
  std::vector<int64_t> expert_rows;   // ColumnSumSq on a MulMatId
  int64_t batch_matrices = 0;         // ColumnSumSq on a MulMat of a 3-D weight: its matrices
  std::vector<NodeStats> stats;    // Stats: one partial per thread
  std::vector<ErrorStats> errors;  // ErrorStats: one partial per thread

  // Adds the accumulated values to `into` (whose kind the caller set).
  void read(TapResult& into, bool reset);
};

// Throws Error when the tap cannot run on the node (kind, types, shapes);
// sizes the state's per-expert counts on a MulMatId.
void check_tap(const TapWork& tap, const Tensor& node);

// Thread ith of nth does its share of the tap on `node` (already computed).
// ColumnSumSq splits columns (each column sums its rows in order, as the host
// reference does, so results are identical); the others split rows.
void run_tap(const TapWork& tap, const Tensor& node, int ith, int nth, Isa isa);

// Row kernels for adjacent F32 values (taps_avx2.cpp; the scalar ones in
// taps.cpp): false when the row holds NaN or Inf, which the caller then
// takes element by element.
bool stats_row_avx2(const float* x, int64_t n, NodeStats& s);
// acc[k] += x[r][k]^2 in double over `rows` rows of n adjacent floats,
// row_bytes apart (exact squares: the sums are the reference's).
void column_sum_sq_rows_avx2(const float* x, int64_t rows, size_t row_bytes, int64_t n, double* acc);
bool error_row_avx2(const float* a, const float* b, int64_t n, ErrorStats& e);
// What both kinds of kernels end with: the checks and the accumulation.
inline bool finish_stats_row(double sum, double sum_sq, float lo, float hi, int64_t n, NodeStats& s) {
  if (!std::isfinite(sum) || !std::isfinite(sum_sq)) return false;
  s.count += n;
  s.sum += sum;
  s.sum_sq += sum_sq;
  s.min = std::min<double>(s.min, lo);
  s.max = std::max<double>(s.max, hi);
  return true;
}

inline bool finish_error_row(double diff, double aa, double bb, double ab, double max_diff, int64_t n, ErrorStats& e) {
  if (!std::isfinite(diff) || !std::isfinite(aa) || !std::isfinite(bb) || !std::isfinite(ab)) return false;
  e.count += n;
  e.sum_sq_diff += diff;
  e.sum_sq_a += aa;
  e.sum_sq_b += bb;
  e.sum_ab += ab;
  e.max_abs_diff = std::max(e.max_abs_diff, max_diff);
  e.add_row(diff, bb);
  return true;
}


}  // namespace qlens::cpu

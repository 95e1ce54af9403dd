// Taps on the CPU backend: the reductions of qlens/tap.h computed by the
// pool's threads right after their node, into per-backend accumulators.
#pragma once

#include <memory>
#include <vector>

#include "backend/cpu/isa.h"
#include "qlens/backend.h"

namespace qlens::cpu {

class CpuTapState final : public TapState {
 public:
  CpuTapState(TapKind kind, int64_t n_columns, int n_threads);

  TapKind kind;
  std::vector<double> column_sum_sq;  // ColumnSumSq: one slot per column, each owned by one thread
  int64_t rows = 0;
  std::vector<NodeStats> stats;    // Stats: one partial per thread
  std::vector<ErrorStats> errors;  // ErrorStats: one partial per thread

  // Adds the accumulated values to `into` (whose kind the caller set).
  void read(TapResult& into, bool reset);
};

// Throws Error when the tap cannot run on the node (kind, types, shapes).
void check_tap(const TapWork& tap, const Tensor& node);

// Thread ith of nth does its share of the tap on `node` (already computed).
// ColumnSumSq splits columns (each column sums its rows in order, as the host
// reference does, so results are identical); the others split rows.
void run_tap(const TapWork& tap, const Tensor& node, int ith, int nth, Isa isa);

// Row kernels for adjacent F32 values (taps_avx2.cpp; the scalar ones in
// taps.cpp): false when the row holds NaN or Inf, which the caller then
// takes element by element.
bool stats_row_avx2(const float* x, int64_t n, NodeStats& s);
bool error_row_avx2(const float* a, const float* b, int64_t n, ErrorStats& e);
// What both kinds of kernels end with: the checks and the accumulation.
bool finish_stats_row(double sum, double sum_sq, float lo, float hi, int64_t n, NodeStats& s);
bool finish_error_row(double diff, double aa, double bb, double ab, double max_diff, int64_t n, ErrorStats& e);

}  // namespace qlens::cpu

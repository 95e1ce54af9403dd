#include "backend/cpu/taps.h"

#include <algorithm>
#include <cmath>

#include "qlens/error.h"

namespace qlens::cpu {

CpuTapState::CpuTapState(TapKind k, int64_t n_columns, int n_threads) : kind(k) {
  switch (kind) {
    case TapKind::ColumnSumSq: column_sum_sq.assign(n_columns, 0.0); break;
    case TapKind::Stats: stats.resize(n_threads); break;
    case TapKind::ErrorStats: errors.resize(n_threads); break;
  }
}

void CpuTapState::read(TapResult& into, bool reset) {
  TapResult mine;
  mine.kind = kind;
  mine.column_sum_sq = column_sum_sq;
  mine.rows = rows;
  mine.expert_rows = expert_rows;
  mine.batch_matrices = batch_matrices;
  for (const NodeStats& s : stats) mine.stats.merge(s);
  for (const ErrorStats& e : errors) mine.error.merge(e);
  into.merge(mine);
  if (reset) {
    std::fill(column_sum_sq.begin(), column_sum_sq.end(), 0.0);
    rows = 0;
    std::fill(expert_rows.begin(), expert_rows.end(), 0);
    std::fill(stats.begin(), stats.end(), NodeStats{});
    std::fill(errors.begin(), errors.end(), ErrorStats{});
  }
}

void check_tap(const TapWork& tap, const Tensor& node) {
  auto fail = [&](const std::string& what) {
    throw Error(std::string("cpu backend: ") + tap_kind_name(tap.kind) + " tap on '" + node.name + "': " + what);
  };
  auto& st = static_cast<CpuTapState&>(*tap.state);
  if (st.kind != tap.kind) fail("state of another kind");
  switch (tap.kind) {
    case TapKind::ColumnSumSq:
      if ((node.op != Op::MulMat && node.op != Op::MulMatId) || !node.src[1] || node.src[1]->type != DType::F32)
        fail("needs a MUL_MAT or MUL_MAT_ID with F32 activations");
      if (static_cast<int64_t>(st.column_sum_sq.size()) != tap_columns(tap.kind, node))
        fail(std::to_string(tap_columns(tap.kind, node)) + " columns, the tap has " +
             std::to_string(st.column_sum_sq.size()));
      // Sized here, before the threads start.
      if (st.expert_rows.empty()) st.expert_rows.assign(tap_experts(node), 0);
      st.batch_matrices = tap_batch_matrices(node);
      break;
    case TapKind::Stats:
      if (node.type != DType::F32) fail("needs an F32 node");
      break;
    case TapKind::ErrorStats:
      if (node.type != DType::F32 || !tap.other || tap.other->type != DType::F32 || !same_shape(node, *tap.other))
        fail("needs two F32 tensors of the same shape");
      if (!tap.other->data || (tap.other->buffer && !tap.other->buffer->is_host()))
        fail("the second tensor is not in host memory");
      break;
  }
}

namespace {

// Calls f(i1, i2, i3) for rows ith, ith + nth, ... of a tensor of t's shape,
// in order, stepping the coordinates instead of dividing for each row.
template <class F>
void for_rows(const Tensor& t, int ith, int nth, F&& f) {
  if (ith >= t.nrows()) return;
  int64_t i1 = ith % t.ne[1], i2 = ith / t.ne[1] % t.ne[2], i3 = ith / t.ne[1] / t.ne[2];
  while (i3 < t.ne[3]) {
    f(i1, i2, i3);
    for (i1 += nth; i1 >= t.ne[1]; ++i2) i1 -= t.ne[1];
    for (; i2 >= t.ne[2]; ++i3) i2 -= t.ne[2];
  }
}

const float* row_at(const Tensor& t, int64_t i1, int64_t i2, int64_t i3) {
  return reinterpret_cast<const float*>(t.at(0, i1, i2, i3));
}

bool adjacent_f32(const Tensor& t) { return t.type == DType::F32 && t.nb[0] == sizeof(float); }

float value(const float* row, const Tensor& t, int64_t i0) {
  return *reinterpret_cast<const float*>(reinterpret_cast<const char*>(row) + i0 * t.nb[0]);
}

// Adds the squares of columns [k0, k1) of `rows` rows of x from `first`
// (row_bytes apart) to acc. The square of a float is exact in double, so any
// order of the columns, and a fused multiply-add, give the host reference's
// sums: each column's rows are added in order.
void add_squares(const Tensor& x, const float* first, int64_t rows, size_t row_bytes, int64_t k0, int64_t k1,
                 double* acc, bool simd) {
  if (simd && adjacent_f32(x)) return column_sum_sq_rows_avx2(first + k0, rows, row_bytes, k1 - k0, acc + k0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = reinterpret_cast<const float*>(reinterpret_cast<const char*>(first) + r * row_bytes);
    for (int64_t k = k0; k < k1; ++k) {
      const double v = value(row, x, k);
      acc[k] += v * v;
    }
  }
}

// Per expert: each (slot, token) row adds to its expert's columns, rows in
// token order, slots in order (as the host reference).
void expert_column_sum_sq(const Tensor& node, CpuTapState& st, int ith, int nth, bool simd) {
  const Tensor& x = *node.src[1];
  const Tensor& ids = *node.src[2];
  const int64_t K = x.ne[0], E = tap_experts(node);
  if (static_cast<int64_t>(st.column_sum_sq.size()) != K * E) return;  // checked by the caller
  const int64_t per = (K + nth - 1) / nth;
  const int64_t k0 = std::min<int64_t>(K, ith * per), k1 = std::min<int64_t>(K, k0 + per);
  for (int64_t t = 0; t < ids.ne[1]; ++t)
    for (int64_t u = 0; u < ids.ne[0]; ++u) {
      const int32_t e = *reinterpret_cast<const int32_t*>(ids.at(u, t));
      const float* row = row_at(x, u % x.ne[1], t, 0);
      add_squares(x, row, 1, 0, k0, k1, st.column_sum_sq.data() + e * K, simd);
      if (ith == 0) {
        ++st.expert_rows[e];
        ++st.rows;
      }
    }
}


// Each row into the sums of the matrix it meets (one matrix for a 2-D
// weight), rows in order; each thread its own columns.
void column_sum_sq(const Tensor& node, CpuTapState& st, int ith, int nth, bool simd) {
  const Tensor& x = *node.src[1];
  const int64_t K = x.ne[0], matrices = std::max<int64_t>(1, st.batch_matrices);
  if (static_cast<int64_t>(st.column_sum_sq.size()) != K * matrices) return;  // checked by the caller
  const int64_t per = (K + nth - 1) / nth;
  const int64_t k0 = std::min<int64_t>(K, ith * per), k1 = std::min<int64_t>(K, k0 + per);
  int64_t r = 0;
  for (int64_t i3 = 0; i3 < x.ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < x.ne[2]; ++i2) {
      double* acc = st.column_sum_sq.data() + (matrices > 1 ? tap_batch_matrix(node, r) * K : 0);
      add_squares(x, row_at(x, 0, i2, i3), x.ne[1], x.nb[1], k0, k1, acc, simd);
      r += x.ne[1];
    }
  if (ith == 0) st.rows += r;
}

// Fast row kernels for adjacent F32 values: four independent accumulators, no
// per-element branches. A row holding NaN or Inf makes its sum non-finite;
// such a row is redone element by element (the reference's rules).
bool stats_row_fast(const float* x, int64_t n, NodeStats& s) {
  double sum[4] = {0, 0, 0, 0}, sq[4] = {0, 0, 0, 0};
  float lo = x[0], hi = x[0];
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int l = 0; l < 4; ++l) {
      const float v = x[i + l];
      sum[l] += v;
      sq[l] += static_cast<double>(v) * v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  for (; i < n; ++i) {
    sum[0] += x[i];
    sq[0] += static_cast<double>(x[i]) * x[i];
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  return finish_stats_row((sum[0] + sum[1]) + (sum[2] + sum[3]), (sq[0] + sq[1]) + (sq[2] + sq[3]), lo, hi, n, s);
}

bool error_row_fast(const float* a, const float* b, int64_t n, ErrorStats& e) {
  double diff[4] = {0, 0, 0, 0}, aa[4] = {0, 0, 0, 0}, bb[4] = {0, 0, 0, 0}, ab[4] = {0, 0, 0, 0};
  double max_diff = 0;
  int64_t i = 0;
  auto step = [&](int l, float x, float y) {
    const double dx = x, dy = y, d = dx - dy;
    diff[l] += d * d;
    aa[l] += dx * dx;
    bb[l] += dy * dy;
    ab[l] += dx * dy;
    max_diff = std::max(max_diff, std::fabs(d));
  };
  for (; i + 4 <= n; i += 4)
    for (int l = 0; l < 4; ++l) step(l, a[i + l], b[i + l]);
  for (; i < n; ++i) step(0, a[i], b[i]);
  auto total = [](const double* v) { return (v[0] + v[1]) + (v[2] + v[3]); };
  return finish_error_row(total(diff), total(aa), total(bb), total(ab), max_diff, n, e);
}

}  // namespace

void run_tap(const TapWork& tap, const Tensor& node, int ith, int nth, Isa isa) {
  auto& st = static_cast<CpuTapState&>(*tap.state);
  const bool simd = isa != Isa::Scalar;
  auto stats_row = simd ? stats_row_avx2 : stats_row_fast;
  auto error_row = simd ? error_row_avx2 : error_row_fast;
  switch (tap.kind) {
    case TapKind::ColumnSumSq:
      if (node.op == Op::MulMatId)
        expert_column_sum_sq(node, st, ith, nth, simd);
      else
        column_sum_sq(node, st, ith, nth, simd);
      break;
    case TapKind::Stats: {
      NodeStats& s = st.stats[ith];
      const bool adjacent = adjacent_f32(node);
      for_rows(node, ith, nth, [&](int64_t i1, int64_t i2, int64_t i3) {
        const float* row = row_at(node, i1, i2, i3);
        if (adjacent && stats_row(row, node.ne[0], s)) return;
        for (int64_t k = 0; k < node.ne[0]; ++k) s.add(value(row, node, k));
      });
      break;
    }
    case TapKind::ErrorStats: {
      ErrorStats& e = st.errors[ith];
      const Tensor& other = *tap.other;
      const bool adjacent = adjacent_f32(node) && adjacent_f32(other);
      for_rows(node, ith, nth, [&](int64_t i1, int64_t i2, int64_t i3) {
        const float* a = row_at(node, i1, i2, i3);
        const float* b = row_at(other, i1, i2, i3);
        if (adjacent && error_row(a, b, node.ne[0], e)) return;
        ErrorStats row;
        for (int64_t k = 0; k < node.ne[0]; ++k) row.add(value(a, node, k), value(b, other, k));
        e.add_row(row.sum_sq_diff, row.sum_sq_b);
        e.merge_sums(row);
      });
      break;
    }
  }
}

}  // namespace qlens::cpu

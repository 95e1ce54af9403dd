// The host reference of the tap reductions (see qlens/tap.h).
#include "qlens/tap.h"

#include <algorithm>
#include <cmath>

#include "qlens/error.h"

namespace qlens {

const char* tap_kind_name(TapKind kind) {
  switch (kind) {
    case TapKind::ColumnSumSq: return "column_sum_sq";
    case TapKind::Stats: return "stats";
    case TapKind::ErrorStats: return "error_stats";
  }
  return "?";
}

void NodeStats::add(float x) {
  if (std::isnan(x)) {
    ++nan;
  } else if (std::isinf(x)) {
    ++inf;
  } else {
    ++count;
    min = std::min<double>(min, x);
    max = std::max<double>(max, x);
    sum += x;
    sum_sq += static_cast<double>(x) * x;
  }
}

void NodeStats::merge(const NodeStats& o) {
  count += o.count;
  min = std::min(min, o.min);
  max = std::max(max, o.max);
  sum += o.sum;
  sum_sq += o.sum_sq;
  nan += o.nan;
  inf += o.inf;
}

int LogHistogram::bucket(double v) {
  if (std::isnan(v)) return kBuckets - 1;
  if (!(v >= std::ldexp(1.0, kMinExp))) return 0;
  if (v >= std::ldexp(1.0, kMaxExp)) return kBuckets - 1;
  // floor(log2(v) * 8) without a logarithm (a bucket per row of every tap):
  // the binary exponent, then the eighth of an octave by comparing the
  // mantissa with 2^(k/8).
  static const double kStep[kStepsPerOctave] = {1.0,
                                                1.0905077326652577,
                                                1.1892071150027210,
                                                1.2968395546510096,
                                                1.4142135623730951,
                                                1.5422108254079407,
                                                1.6817928305074290,
                                                1.8340080864093424};
  int e = 0;
  const double m = 2 * std::frexp(v, &e);  // v = m * 2^(e-1), m in [1, 2)
  int sub = 0;
  while (sub + 1 < kStepsPerOctave && m >= kStep[sub + 1]) ++sub;
  const int b = 1 + (e - 1 - kMinExp) * kStepsPerOctave + sub;
  return std::clamp(b, 1, kBuckets - 2);
}

double LogHistogram::bucket_value(int b) {
  if (b <= 0) return 0.0;
  if (b >= kBuckets - 1) return std::ldexp(1.0, kMaxExp);
  return std::exp2(kMinExp + (b - 0.5) / kStepsPerOctave);
}

void LogHistogram::merge(const LogHistogram& o) {
  if (o.counts.empty()) return;
  if (counts.empty()) {
    counts = o.counts;
    return;
  }
  for (int i = 0; i < kBuckets; ++i) counts[i] += o.counts[i];
}

uint64_t LogHistogram::total() const {
  uint64_t n = 0;
  for (uint64_t c : counts) n += c;
  return n;
}

double LogHistogram::quantile(double q) const {
  const uint64_t n = total();
  if (n == 0) return 0.0;
  // The smallest bucket whose cumulative count reaches rank ceil(q * n).
  const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(std::clamp(q, 0.0, 1.0) * n)));
  uint64_t seen = 0;
  for (int b = 0; b < static_cast<int>(counts.size()); ++b) {
    seen += counts[b];
    if (seen >= rank) return bucket_value(b);
  }
  return bucket_value(kBuckets - 1);
}

void ErrorStats::add_row(double row_sum_sq_diff, double row_sum_sq_b) {
  row_nmse.add(row_sum_sq_b > 0 ? row_sum_sq_diff / row_sum_sq_b : row_sum_sq_diff);
}

void ErrorStats::add(float a, float b) {
  if (!std::isfinite(a) || !std::isfinite(b)) {
    ++non_finite;
    return;
  }
  const double da = a, db = b, d = da - db;
  ++count;
  sum_sq_diff += d * d;
  sum_sq_a += da * da;
  sum_sq_b += db * db;
  sum_ab += da * db;
  max_abs_diff = std::max(max_abs_diff, std::fabs(d));
}

void ErrorStats::merge(const ErrorStats& o) {
  merge_sums(o);
  row_nmse.merge(o.row_nmse);
}

void ErrorStats::merge_sums(const ErrorStats& o) {
  count += o.count;
  sum_sq_diff += o.sum_sq_diff;
  sum_sq_a += o.sum_sq_a;
  sum_sq_b += o.sum_sq_b;
  sum_ab += o.sum_ab;
  max_abs_diff = std::max(max_abs_diff, o.max_abs_diff);
  non_finite += o.non_finite;
}

void TapResult::merge(const TapResult& o) {
  if (o.kind != kind) throw Error("tap results of different kinds cannot be merged");
  switch (kind) {
    case TapKind::ColumnSumSq:
      if (o.column_sum_sq.empty() && o.rows == 0) break;  // nothing accumulated
      if (column_sum_sq.empty()) column_sum_sq.assign(o.column_sum_sq.size(), 0.0);
      if (o.column_sum_sq.size() != column_sum_sq.size())
        throw Error("tap results over " + std::to_string(column_sum_sq.size()) + " and " +
                    std::to_string(o.column_sum_sq.size()) + " columns cannot be merged");
      for (size_t k = 0; k < column_sum_sq.size(); ++k) column_sum_sq[k] += o.column_sum_sq[k];
      rows += o.rows;
      if (expert_rows.empty()) expert_rows.assign(o.expert_rows.size(), 0);
      if (!o.expert_rows.empty() && o.expert_rows.size() != expert_rows.size())
        throw Error("tap results over " + std::to_string(expert_rows.size()) + " and " +
                    std::to_string(o.expert_rows.size()) + " experts cannot be merged");
      for (size_t e = 0; e < o.expert_rows.size(); ++e) expert_rows[e] += o.expert_rows[e];
      if (batch_matrices == 0) batch_matrices = o.batch_matrices;
      if (o.batch_matrices != 0 && o.batch_matrices != batch_matrices)
        throw Error("tap results over " + std::to_string(batch_matrices) + " and " +
                    std::to_string(o.batch_matrices) + " matrices cannot be merged");
      break;
    case TapKind::Stats: stats.merge(o.stats); break;
    case TapKind::ErrorStats: error.merge(o.error); break;
  }
}

int64_t tap_experts(const Tensor& node) {
  return node.op == Op::MulMatId && node.src[0] ? node.src[0]->ne[2] : 0;
}

int64_t tap_batch_matrices(const Tensor& node) {
  if (node.op != Op::MulMat || !node.src[0]) return 0;
  const int64_t n = node.src[0]->ne[2] * node.src[0]->ne[3];
  return n > 1 ? n : 0;
}

int64_t tap_batch_matrix(const Tensor& node, int64_t row) {
  const Tensor& w = *node.src[0];
  const Tensor& x = *node.src[1];
  const int64_t i2 = (row / x.ne[1]) % x.ne[2], i3 = row / (x.ne[1] * x.ne[2]);
  return (i3 % w.ne[3]) * w.ne[2] + i2 % w.ne[2];
}

int64_t tap_columns(TapKind kind, const Tensor& node) {
  if (kind != TapKind::ColumnSumSq || !node.src[1]) return 0;
  return node.src[1]->ne[0] * std::max<int64_t>(1, tap_experts(node) + tap_batch_matrices(node));
}

void tap_accumulate_batch_values(const std::vector<float>& x, const Tensor& node, TapResult& acc) {
  const int64_t K = node.src[1]->ne[0], M = tap_batch_matrices(node);
  acc.kind = TapKind::ColumnSumSq;
  acc.batch_matrices = M;
  if (acc.column_sum_sq.empty()) acc.column_sum_sq.assign(K * M, 0.0);
  if (M < 1 || static_cast<int64_t>(acc.column_sum_sq.size()) != K * M || x.size() % K != 0)
    throw Error("tap: the activations of '" + node.name + "' do not match its matrices");
  const int64_t rows = static_cast<int64_t>(x.size()) / K;
  for (int64_t r = 0; r < rows; ++r) {
    double* sums = acc.column_sum_sq.data() + tap_batch_matrix(node, r) * K;
    for (int64_t k = 0; k < K; ++k) sums[k] += static_cast<double>(x[r * K + k]) * x[r * K + k];
  }
  acc.rows += rows;
}

void tap_accumulate_expert_values(const std::vector<float>& x, int64_t K, int64_t b1, const std::vector<int32_t>& ids,
                                  int64_t n_used, int64_t n_expert, TapResult& acc) {
  acc.kind = TapKind::ColumnSumSq;
  if (K <= 0 || b1 <= 0 || n_used <= 0 || ids.size() % n_used != 0 ||
      x.size() != static_cast<size_t>(K * b1) * (ids.size() / n_used))
    throw Error("tap: expert activations and ids do not match");
  if (acc.column_sum_sq.empty()) acc.column_sum_sq.assign(K * n_expert, 0.0);
  if (acc.expert_rows.empty()) acc.expert_rows.assign(n_expert, 0);
  if (static_cast<int64_t>(acc.column_sum_sq.size()) != K * n_expert) throw Error("tap: column count changed");
  const int64_t N = static_cast<int64_t>(ids.size()) / n_used;
  for (int64_t t = 0; t < N; ++t)
    for (int64_t u = 0; u < n_used; ++u) {
      const int32_t e = ids[t * n_used + u];
      if (e < 0 || e >= n_expert) throw Error("tap: expert id " + std::to_string(e) + " out of range");
      const float* row = x.data() + (t * b1 + u % b1) * K;
      for (int64_t k = 0; k < K; ++k) acc.column_sum_sq[e * K + k] += static_cast<double>(row[k]) * row[k];
      ++acc.expert_rows[e];
      ++acc.rows;
    }
}

namespace {

float value_at(const Tensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return *reinterpret_cast<const float*>(t.at(i0, i1, i2, i3));
}

template <class F>
void for_each_index(const Tensor& t, F&& f) {
  for (int64_t i3 = 0; i3 < t.ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < t.ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < t.ne[1]; ++i1)
        for (int64_t i0 = 0; i0 < t.ne[0]; ++i0) f(i0, i1, i2, i3);
}

void require_f32(const Tensor& t, const char* what) {
  if (t.type != DType::F32)
    throw Error(std::string("tap: ") + what + " '" + t.name + "' must be F32, is " + std::string(type_name(t.type)));
}

}  // namespace

void tap_accumulate_host(TapKind kind, const Tensor& node, const Tensor* other, TapResult& acc) {
  acc.kind = kind;
  switch (kind) {
    case TapKind::ColumnSumSq: {
      const Tensor* x = node.src[1];
      if (node.op == Op::MulMatId && x && node.src[2]) {
        require_f32(*x, "activations");
        const Tensor& ids = *node.src[2];
        std::vector<float> values;
        for_each_index(*x, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
          values.push_back(value_at(*x, i0, i1, i2, i3));
        });
        std::vector<int32_t> chosen;
        for (int64_t t = 0; t < ids.ne[1]; ++t)
          for (int64_t u = 0; u < ids.ne[0]; ++u) chosen.push_back(*reinterpret_cast<const int32_t*>(ids.at(u, t)));
        tap_accumulate_expert_values(values, x->ne[0], x->ne[1], chosen, ids.ne[0], tap_experts(node), acc);
        break;
      }
      if (node.op != Op::MulMat || !x) throw Error("tap: column sums need a MUL_MAT node, '" + node.name + "' is not");
      require_f32(*x, "activations");
      if (tap_batch_matrices(node) > 0) {
        std::vector<float> values;
        for_each_index(*x, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
          values.push_back(value_at(*x, i0, i1, i2, i3));
        });
        tap_accumulate_batch_values(values, node, acc);
        break;
      }
      if (acc.column_sum_sq.empty()) acc.column_sum_sq.assign(x->ne[0], 0.0);
      if (static_cast<int64_t>(acc.column_sum_sq.size()) != x->ne[0])
        throw Error("tap: '" + node.name + "' has " + std::to_string(x->ne[0]) + " columns, the tap " +
                    std::to_string(acc.column_sum_sq.size()));
      for_each_index(*x, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
        const double v = value_at(*x, i0, i1, i2, i3);
        acc.column_sum_sq[i0] += v * v;
      });
      acc.rows += x->nrows();
      break;
    }
    case TapKind::Stats:
      require_f32(node, "node");
      for_each_index(node, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
        acc.stats.add(value_at(node, i0, i1, i2, i3));
      });
      break;
    case TapKind::ErrorStats:
      require_f32(node, "node");
      if (!other || !same_shape(node, *other))
        throw Error("tap: error statistics of '" + node.name + "' need a second tensor of the same shape");
      require_f32(*other, "second tensor");
      for (int64_t i3 = 0; i3 < node.ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < node.ne[2]; ++i2)
          for (int64_t i1 = 0; i1 < node.ne[1]; ++i1) {
            ErrorStats row;
            for (int64_t i0 = 0; i0 < node.ne[0]; ++i0)
              row.add(value_at(node, i0, i1, i2, i3), value_at(*other, i0, i1, i2, i3));
            acc.error.add_row(row.sum_sq_diff, row.sum_sq_b);
            acc.error.merge_sums(row);
          }
      break;
  }
}

void tap_accumulate_values(TapKind kind, const std::vector<float>& values, int64_t row_length,
                           const std::vector<float>* other, TapResult& acc) {
  acc.kind = kind;
  switch (kind) {
    case TapKind::ColumnSumSq: {
      if (row_length <= 0 || values.size() % row_length != 0) throw Error("tap: values do not form rows");
      if (acc.column_sum_sq.empty()) acc.column_sum_sq.assign(row_length, 0.0);
      if (static_cast<int64_t>(acc.column_sum_sq.size()) != row_length) throw Error("tap: column count changed");
      const int64_t rows = static_cast<int64_t>(values.size()) / row_length;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < row_length; ++k) {
          const double v = values[r * row_length + k];
          acc.column_sum_sq[k] += v * v;
        }
      acc.rows += rows;
      break;
    }
    case TapKind::Stats:
      for (float v : values) acc.stats.add(v);
      break;
    case TapKind::ErrorStats: {
      if (!other || other->size() != values.size()) throw Error("tap: error statistics need two equal-sized tensors");
      if (row_length <= 0 || values.size() % row_length != 0) throw Error("tap: values do not form rows");
      for (size_t r = 0; r < values.size() / row_length; ++r) {
        ErrorStats row;
        for (int64_t k = 0; k < row_length; ++k) row.add(values[r * row_length + k], (*other)[r * row_length + k]);
        acc.error.add_row(row.sum_sq_diff, row.sum_sq_b);
        acc.error.merge_sums(row);
      }
      break;
    }
  }
}

}  // namespace qlens
